/* Cold-cache probe application (benches/cold_cache/run.sh): N empty-kernel launches on the
 * mock driver, each after `pollute()` has run some 400 KB of straight-line code and touched
 * 96 KB of data, as a real driver's own work between two launches does, so that what a
 * policed launch finds in the L1 caches is what a real one finds. One launch and a sleep
 * come first, so that the shim has initialised and its watcher has compiled the chains to
 * native code before the counted loop.
 *
 *   app N [DIRTY=1] [SLEEP_S=0]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
			void **extra);
void pollute(uint64_t seed);

static CUresult launch(void)
{
	return cuLaunchKernel((void *)0x1234, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	int dirty = argc > 2 ? atoi(argv[2]) : 1;
	int pause = argc > 3 ? atoi(argv[3]) : 0;

	if (cuInit(0) != 0 || launch() != 0) {
		fputs("cuInit or the first launch failed\n", stderr);
		return 1;
	}
	if (pause > 0)
		sleep((unsigned)pause);
	for (long i = 0; i < n; i++) {
		if (dirty)
			pollute((uint64_t)i);
		if (launch() != 0) {
			fputs("launch failed\n", stderr);
			return 1;
		}
	}
	return 0;
}
