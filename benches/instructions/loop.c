/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The loop application of benches/instructions/run.sh: cuInit, a sleep of argv[1] seconds
 * (the shim's watcher JIT-compiles the published programs meanwhile), then four rounds of
 * 4 096 cuMemAlloc_v2 of 4 KiB (alloc_loop) and their frees (free_loop), then 4 096
 * cuLaunchKernel (launch_loop), then 4 096 allocation + launch pairs (mixed_loop) and their
 * frees. Each loop is a function of its own so that callgrind can
 * count it alone (--toggle-collect).
 *
 *   loop SLEEP_SECONDS [ROUNDS]
 *
 * With ROUNDS (benches/instructions/time_alloc.sh) it times instead, natively: after one
 * untimed round, ROUNDS rounds of alloc_loop(4 096) of 256 bytes each (as benches/shim.rs)
 * on the monotonic clock, the frees between rounds untimed, and prints
 * `alloc_ns median=… min=…` per cuMemAlloc_v2 over the rounds.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long u64;
int cuInit(unsigned flags);
int cuMemAlloc_v2(u64 *dptr, size_t bytes);
int cuMemFree_v2(u64 dptr);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);

#define LIVE 4096
static u64 ptrs[LIVE];
/* Bytes per allocation: 4 KiB when counting, 256 (as benches/shim.rs) when timing. */
static size_t alloc_size = 4096;

__attribute__((noinline)) void alloc_loop(int n)
{
	for (int i = 0; i < n; i++)
		cuMemAlloc_v2(&ptrs[i % LIVE], alloc_size);
}

__attribute__((noinline)) void free_loop(int n)
{
	for (int i = 0; i < n; i++)
		cuMemFree_v2(ptrs[i % LIVE]);
}

__attribute__((noinline)) void launch_loop(int n)
{
	for (int i = 0; i < n; i++)
		cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

/* An allocation and a launch in turn: every call changes the thread's last attach point
 * (as PyTorch's mix of launches, copies and allocations does). */
__attribute__((noinline)) void mixed_loop(int n)
{
	for (int i = 0; i < n; i++) {
		cuMemAlloc_v2(&ptrs[i % LIVE], alloc_size);
		cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
	}
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ROUNDS timed rounds of alloc_loop(LIVE), frees untimed: per-call median and minimum. */
static int time_allocs(int rounds)
{
	double *per_call = calloc((size_t)rounds, sizeof *per_call);

	if (!per_call) {
		fputs("out of memory\n", stderr);
		return 1;
	}
	alloc_size = 256;
	/* The mock always succeeds; a refusal means the loader found another libcuda.so.1
	 * (a real driver without a context answers 201 in about 800 ns). */
	if (cuMemAlloc_v2(&ptrs[0], alloc_size) != 0 || cuMemFree_v2(ptrs[0]) != 0) {
		fputs("cuMemAlloc_v2 refused: is this the mock driver?\n", stderr);
		free(per_call);
		return 1;
	}
	alloc_loop(LIVE);
	free_loop(LIVE);
	for (int r = 0; r < rounds; r++) {
		double t0 = now_ns();
		alloc_loop(LIVE);
		per_call[r] = (now_ns() - t0) / LIVE;
		free_loop(LIVE);
	}
	qsort(per_call, (size_t)rounds, sizeof *per_call, by_value);
	printf("alloc_ns median=%.2f min=%.2f\n", per_call[rounds / 2], per_call[0]);
	free(per_call);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2 && !(argc == 3 && atoi(argv[2]) > 0)) {
		fprintf(stderr, "usage: %s SLEEP_SECONDS [ROUNDS]\n", argv[0]);
		return 2;
	}
	if (cuInit(0) != 0) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	/* One call of each point the loops make, before the sleep: the shim's watcher compiles a
	 * point's programs to native code once the point has been called (docs/shim.md, "Native
	 * code as points are called"), and the loops are to count native runs. */
	void *f = (void *)0x1234;
	if (cuMemAlloc_v2(&ptrs[0], 256) != 0 || cuMemFree_v2(ptrs[0]) != 0 ||
	    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0) != 0) {
		fprintf(stderr, "the first calls failed: is this the mock driver?\n");
		return 1;
	}
	sleep((unsigned)atoi(argv[1]));
	if (argc == 3)
		return time_allocs(atoi(argv[2]));
	for (int r = 0; r < 4; r++) {
		alloc_loop(LIVE);
		free_loop(LIVE);
	}
	launch_loop(LIVE);
	mixed_loop(LIVE);
	for (int i = 0; i < LIVE; i++) /* not free_loop: callgrind counts that one */
		cuMemFree_v2(ptrs[i]);
	return 0;
}
