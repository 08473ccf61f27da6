/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Test application for the shim's end-to-end tests. It knows nothing about gpubpf: it calls
 * the (mock) CUDA driver through one of the routes real programs use (INTERCEPTION.md §2):
 *
 *   link   direct ELF binding (built with -DLINK_CUDA and linked against libcuda.so.1)
 *   dlsym  dlopen("libcuda.so.1") + dlsym(handle, "cuMemAlloc_v2"), as cuBLAS and Triton
 *   proc   dlopen + dlsym("cuGetProcAddress_v2"), the self-lookup of "cuGetProcAddress",
 *          then every function by base name, version and flags through it, as CUDA 13's
 *          static cudart; launches with the per-thread default stream flag (-> _ptsz)
 *
 * Scenarios (one line of output per call, so that a test can compare exactly):
 *   quota N SIZE        N allocations of SIZE bytes ("alloc I RC"), one free and a retry
 *                       ("retry RC"), then frees everything
 *   count L A           L launches, A allocation+free pairs, one cuMemGetInfo
 *   threads T L         T threads doing L launches each
 *   live READY GO SIZE  one allocation ("before RC"), creates file READY, waits for file GO,
 *                       another allocation ("after RC")
 *   fork N SIZE         one allocation in the parent ("parent alloc RC"), then a forked child
 *                       does N allocations ("child alloc I RC") and exits; the parent waits
 *                       ("child exit STATUS")
 *   bench N             N launches, then N allocation+free pairs, timed: "launch_ns X" and
 *                       "alloc_free_ns Y" per call (median of 5 rounds)
 *   hammer T STOP       T threads launching as fast as they can until file STOP exists
 *                       ("launches N", the total)
 * At the end: "mock alloc=… free=… launch=… launch_ptsz=… getinfo=…" (what reached the
 * driver).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned, void *, void **, void **);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, uint64_t, int *);
typedef void (*stats_fn)(unsigned long long[5]);

static struct {
	init_fn init;
	alloc_fn alloc;
	free_fn free;
	info_fn info;
	launch_fn launch;
	stats_fn stats;
} cu;

#ifdef LINK_CUDA
CUresult cuInit(unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			unsigned, void *, void **, void **);
void mock_stats(unsigned long long[5]);
#endif

static void die(const char *what)
{
	fprintf(stderr, "app: %s\n", what);
	exit(99);
}

static void *need(void *p, const char *what)
{
	if (!p)
		die(what);
	return p;
}

static void setup(const char *route)
{
	if (strcmp(route, "link") == 0) {
#ifdef LINK_CUDA
		cu.init = cuInit;
		cu.alloc = cuMemAlloc_v2;
		cu.free = cuMemFree_v2;
		cu.info = cuMemGetInfo_v2;
		cu.launch = cuLaunchKernel;
		cu.stats = mock_stats;
		return;
#else
		die("built without -DLINK_CUDA");
#endif
	}
	void *h = need(dlopen("libcuda.so.1", RTLD_NOW), "dlopen libcuda.so.1");
	cu.stats = (stats_fn)need(dlsym(h, "mock_stats"), "dlsym mock_stats");
	if (strcmp(route, "dlsym") == 0) {
		cu.init = (init_fn)need(dlsym(h, "cuInit"), "dlsym cuInit");
		cu.alloc = (alloc_fn)need(dlsym(h, "cuMemAlloc_v2"), "dlsym cuMemAlloc_v2");
		cu.free = (free_fn)need(dlsym(h, "cuMemFree_v2"), "dlsym cuMemFree_v2");
		cu.info = (info_fn)need(dlsym(h, "cuMemGetInfo_v2"), "dlsym cuMemGetInfo_v2");
		cu.launch = (launch_fn)need(dlsym(h, "cuLaunchKernel"), "dlsym cuLaunchKernel");
		return;
	}
	if (strcmp(route, "proc") != 0)
		die("unknown route");
	gpa_v2_fn gpa = (gpa_v2_fn)need(dlsym(h, "cuGetProcAddress_v2"), "dlsym cuGetProcAddress_v2");
	void *p = NULL;
	int st = -1;
	/* cudart's first request: empty name, version 0 -> NULL. */
	if (gpa("", &p, 0, 0, &st) == 0 || p)
		die("empty lookup resolved");
	/* Self-lookup: everything after goes through the answer. */
	if (gpa("cuGetProcAddress", &p, 12000, 0, &st) != 0)
		die("self-lookup failed");
	gpa_v2_fn self = (gpa_v2_fn)need(p, "self-lookup answer");
#define LOOKUP(field, type, name, version, flags)                                  \
	do {                                                                       \
		p = NULL;                                                          \
		if (self(name, &p, version, flags, &st) != 0)                      \
			die("cuGetProcAddress " name);                             \
		cu.field = (type)need(p, name);                                    \
	} while (0)
	LOOKUP(init, init_fn, "cuInit", 2000, 0);
	LOOKUP(alloc, alloc_fn, "cuMemAlloc", 13000, 0);
	LOOKUP(free, free_fn, "cuMemFree", 13000, 0);
	LOOKUP(info, info_fn, "cuMemGetInfo", 13000, 0);
	LOOKUP(launch, launch_fn, "cuLaunchKernel", 13000, 0x2);
}

static void launches(long n)
{
	for (long i = 0; i < n; i++)
		if (cu.launch((void *)0x1234, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0)
			die("launch failed");
}

static void *thread_main(void *arg)
{
	launches((long)(intptr_t)arg);
	return NULL;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median over 5 rounds of the time per iteration of `what` (0: launch, 1: alloc+free). */
static double bench(int what, long n)
{
	double r[5];

	for (int k = 0; k < 5; k++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++) {
			if (what == 0) {
				launches(1);
			} else {
				CUdeviceptr d = 0;
				if (cu.alloc(&d, 256) != 0 || cu.free(d) != 0)
					die("alloc/free failed");
			}
		}
		r[k] = (now_ns() - t0) / (double)n;
	}
	qsort(r, 5, sizeof(r[0]), cmp_double);
	return r[2];
}

static atomic_int stop;

static void *hammer_main(void *arg)
{
	unsigned long long *count = arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		launches(1);
		(*count)++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: app ROUTE SCENARIO ARGS…");
	setup(argv[1]);
	if (cu.init(0) != 0)
		die("cuInit failed");
	const char *scenario = argv[2];
	if (strcmp(scenario, "quota") == 0 && argc == 5) {
		long n = atol(argv[3]);
		size_t size = (size_t)atoll(argv[4]);
		CUdeviceptr *ptrs = calloc((size_t)n, sizeof(*ptrs));
		for (long i = 0; i < n; i++)
			printf("alloc %ld %d\n", i, cu.alloc(&ptrs[i], size));
		if (ptrs[0]) {
			printf("free %d\n", cu.free(ptrs[0]));
			ptrs[0] = 0;
			printf("retry %d\n", cu.alloc(&ptrs[0], size));
		}
		for (long i = 0; i < n; i++)
			if (ptrs[i])
				cu.free(ptrs[i]);
		free(ptrs);
	} else if (strcmp(scenario, "count") == 0 && argc == 5) {
		launches(atol(argv[3]));
		for (long i = 0, a = atol(argv[4]); i < a; i++) {
			CUdeviceptr d = 0;
			if (cu.alloc(&d, 4096) != 0 || cu.free(d) != 0)
				die("alloc/free failed");
		}
		size_t fr = 0, total = 0;
		CUresult rc = cu.info(&fr, &total);
		printf("getinfo %d free=%zu total=%zu\n", rc, fr, total);
	} else if (strcmp(scenario, "threads") == 0 && argc == 5) {
		long t = atol(argv[3]), l = atol(argv[4]);
		pthread_t *ts = calloc((size_t)t, sizeof(*ts));
		for (long i = 0; i < t; i++)
			if (pthread_create(&ts[i], NULL, thread_main, (void *)(intptr_t)l) != 0)
				die("pthread_create");
		for (long i = 0; i < t; i++)
			pthread_join(ts[i], NULL);
		free(ts);
	} else if (strcmp(scenario, "live") == 0 && argc == 6) {
		size_t size = (size_t)atoll(argv[5]);
		CUdeviceptr d1 = 0, d2 = 0;
		printf("before %d\n", cu.alloc(&d1, size));
		fflush(stdout);
		FILE *f = need(fopen(argv[3], "w"), "create READY");
		fclose(f);
		for (int i = 0; access(argv[4], F_OK) != 0; i++) {
			if (i > 6000)
				die("timed out waiting for GO");
			usleep(10000);
		}
		printf("after %d\n", cu.alloc(&d2, size));
	} else if (strcmp(scenario, "fork") == 0 && argc == 5) {
		long n = atol(argv[3]);
		size_t size = (size_t)atoll(argv[4]);
		CUdeviceptr d = 0;
		printf("parent alloc %d\n", cu.alloc(&d, size));
		fflush(stdout);
		pid_t child = fork();
		if (child < 0)
			die("fork");
		if (child == 0) {
			printf("child pid %d\n", (int)getpid());
			for (long i = 0; i < n; i++) {
				CUdeviceptr c = 0;
				printf("child alloc %ld %d\n", i, cu.alloc(&c, size));
			}
			fflush(stdout);
			_exit(0);
		}
		int status = 0;
		waitpid(child, &status, 0);
		printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	} else if (strcmp(scenario, "bench") == 0 && argc == 4) {
		long n = atol(argv[3]);
		printf("launch_ns %.1f\n", bench(0, n));
		printf("alloc_free_ns %.1f\n", bench(1, n));
	} else if (strcmp(scenario, "hammer") == 0 && argc == 5) {
		long t = atol(argv[3]);
		pthread_t *ts = calloc((size_t)t, sizeof(*ts));
		unsigned long long *counts = calloc((size_t)t, sizeof(*counts));
		for (long i = 0; i < t; i++)
			if (pthread_create(&ts[i], NULL, hammer_main, &counts[i]) != 0)
				die("pthread_create");
		while (access(argv[4], F_OK) != 0)
			usleep(10000);
		atomic_store(&stop, 1);
		unsigned long long total = 0;
		for (long i = 0; i < t; i++) {
			pthread_join(ts[i], NULL);
			total += counts[i];
		}
		printf("launches %llu\n", total);
		free(ts);
		free(counts);
	} else {
		die("unknown scenario or wrong arguments");
	}
	unsigned long long s[5];
	cu.stats(s);
	printf("mock alloc=%llu free=%llu launch=%llu launch_ptsz=%llu getinfo=%llu\n", s[0], s[1],
	       s[2], s[3], s[4]);
	return 0;
}
