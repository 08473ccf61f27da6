/* Cold-cache probe application (benches/cold_cache/run.sh): N empty-kernel launches on the
 * mock driver, each after `pollute()` has run some 400 KB of straight-line code and touched
 * 96 KB of data, as a real driver's own work between two launches does, so that what a
 * policed launch finds in the L1 caches is what a real one finds. One launch and a sleep
 * come first, so that the shim has initialised and its watcher has compiled the chains to
 * native code before the counted loop.
 *
 *   app N [DIRTY=1] [SLEEP_S=0] [TIMED=0]
 *
 * With TIMED=1 it also times each launch call alone (the time stamp counter around the
 * call, fenced; `pollute` is outside) and prints `launch_ns mean=… median=…`: the latency
 * of a cold launch on this machine's CPU, which benches/cold_cache/time.sh compares with
 * and without a policy.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

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
	int timed = argc > 4 ? atoi(argv[4]) : 0;
	uint64_t *ticks = timed ? calloc((size_t)n, sizeof *ticks) : NULL;
	if (timed && !ticks) {
		fputs("out of memory\n", stderr);
		return 1;
	}
	struct timespec w0, w1;
	clock_gettime(CLOCK_MONOTONIC, &w0);
	uint64_t c0 = __rdtsc();
	for (long i = 0; i < n; i++) {
		if (dirty)
			pollute((uint64_t)i);
		uint64_t t0 = 0;
		if (timed) {
			_mm_lfence();
			t0 = __rdtsc();
			_mm_lfence();
		}
		CUresult r = launch();
		if (timed) {
			_mm_lfence();
			ticks[i] = __rdtsc() - t0;
		}
		if (r != 0) {
			fputs("launch failed\n", stderr);
			return 1;
		}
	}
	if (timed) {
		clock_gettime(CLOCK_MONOTONIC, &w1);
		double ns = (double)(w1.tv_sec - w0.tv_sec) * 1e9 + (double)(w1.tv_nsec - w0.tv_nsec);
		double ns_per_tick = ns / (double)(__rdtsc() - c0);
		double sum = 0;
		for (long i = 0; i < n; i++)
			sum += (double)ticks[i];
		/* Median by counting: ticks are small integers. */
		uint64_t lo = 0, hi = 1 << 20;
		while (lo < hi) {
			uint64_t mid = (lo + hi) / 2, below = 0;
			for (long i = 0; i < n; i++)
				below += ticks[i] <= mid;
			if (below * 2 >= (uint64_t)n)
				hi = mid;
			else
				lo = mid + 1;
		}
		printf("launch_ns mean=%.2f median=%.2f n=%ld\n", sum / (double)n * ns_per_tick,
		       (double)lo * ns_per_tick, n);
		free(ticks);
	}
	return 0;
}
