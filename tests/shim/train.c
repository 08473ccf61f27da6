/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The README demo's application: an unmodified CUDA driver-API program, linked with
 * -lcuda, that knows nothing of gpubpf. It stands in for a training job whose activation
 * cache grows: every step allocates one buffer and keeps it.
 *
 *   train STEPS MIB PAUSE_AT PAUSE_FILE GO_FILE DONE_FILE
 *
 * Runs steps 1..PAUSE_AT, then creates PAUSE_FILE and waits for GO_FILE (the operator
 * changes the policy meanwhile), runs the remaining steps, creates DONE_FILE and waits for
 * GO_FILE to disappear before freeing everything and exiting (so that the process can be
 * looked at while it still holds its memory).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

CUresult cuInit(unsigned int flags);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);

static const char *name(CUresult r)
{
	switch (r) {
	case 0:
		return "CUDA_SUCCESS";
	case 2:
		return "CUDA_ERROR_OUT_OF_MEMORY";
	case 800:
		return "CUDA_ERROR_NOT_PERMITTED";
	default:
		return "error";
	}
}

static void touch(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

static void wait_for(const char *path, int present)
{
	for (int i = 0; (access(path, F_OK) == 0) != present; i++) {
		if (i > 60000) {
			fprintf(stderr, "train: timed out waiting for %s\n", path);
			exit(1);
		}
		usleep(5000);
	}
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: train STEPS MIB PAUSE_AT PAUSE_FILE GO_FILE DONE_FILE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int steps = atoi(argv[1]), pause_at = atoi(argv[3]);
	size_t mib = (size_t)atoll(argv[2]);
	if (cuInit(0) != 0) {
		fprintf(stderr, "train: cuInit failed\n");
		return 1;
	}
	CUdeviceptr *held = calloc((size_t)steps, sizeof(*held));
	size_t holding = 0;
	int refused = 0;
	for (int s = 1; s <= steps; s++) {
		CUresult r = cuMemAlloc_v2(&held[s - 1], mib << 20);
		if (r == 0)
			holding += mib;
		else
			refused++;
		printf("  [train pid %d] step %2d: cuMemAlloc(%zu MiB) = %3d %-26s holding %4zu MiB\n",
		       (int)getpid(), s, mib, r, name(r), holding);
		if (s == pause_at) {
			printf("  [train pid %d] paused after step %d (waiting for the operator)\n",
			       (int)getpid(), s);
			touch(argv[4]);
			wait_for(argv[5], 1);
		}
	}
	printf("  [train pid %d] done: %zu MiB held, %d allocations refused\n", (int)getpid(),
	       holding, refused);
	touch(argv[6]);
	wait_for(argv[5], 0);
	for (int s = 0; s < steps; s++)
		if (held[s])
			cuMemFree_v2(held[s]);
	free(held);
	return 0;
}
