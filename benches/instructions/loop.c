/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The loop application of benches/instructions/run.sh: cuInit, a sleep of argv[1] seconds
 * (the shim's watcher JIT-compiles the published programs meanwhile), then four rounds of
 * 4 096 cuMemAlloc_v2 of 4 KiB (alloc_loop) and their frees (free_loop), then 4 096
 * cuLaunchKernel (launch_loop). Each loop is a function of its own so that callgrind can
 * count it alone (--toggle-collect).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef unsigned long long u64;
int cuInit(unsigned flags);
int cuMemAlloc_v2(u64 *dptr, size_t bytes);
int cuMemFree_v2(u64 dptr);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);

#define LIVE 4096
static u64 ptrs[LIVE];

__attribute__((noinline)) void alloc_loop(int n)
{
	for (int i = 0; i < n; i++)
		cuMemAlloc_v2(&ptrs[i % LIVE], 4096);
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

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s SLEEP_SECONDS\n", argv[0]);
		return 2;
	}
	if (cuInit(0) != 0) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	sleep((unsigned)atoi(argv[1]));
	for (int r = 0; r < 4; r++) {
		alloc_loop(LIVE);
		free_loop(LIVE);
	}
	launch_loop(LIVE);
	return 0;
}
