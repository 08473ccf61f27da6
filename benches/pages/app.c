/* Page probe application (benches/pages/run.sh): initialises on the mock driver, makes 50
 * launches (so that the shim's watcher compiles the called chain), sleeps SLEEP_S seconds
 * for the compilation, then makes 20 launches, each after a call of `marker` that the run's
 * memory trace splits the launches at, and writes /proc/self/maps to MAPS_OUT to name the
 * pages.
 *
 *   app SLEEP_S MAPS_OUT
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
			void **extra);

__attribute__((noinline)) void marker(int i)
{
	__asm__ volatile("" ::"r"(i));
}

static void launch(void)
{
	cuLaunchKernel((void *)0x1234, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
}

int main(int argc, char **argv)
{
	if (argc < 3 || cuInit(0) != 0)
		return 1;
	for (int i = 0; i < 50; i++)
		launch();
	sleep((unsigned)atoi(argv[1]));
	for (int i = 0; i < 20; i++) {
		marker(i);
		launch();
	}
	marker(-1);
	FILE *in = fopen("/proc/self/maps", "r"), *out = fopen(argv[2], "w");
	if (!in || !out)
		return 1;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		fwrite(buf, 1, n, out);
	fclose(in);
	fclose(out);
	return 0;
}
