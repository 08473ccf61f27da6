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
 *   rt     the same lookups made by a separate shared library, the mock runtime
 *          `libmockrt.so` (tests/shim/mock_runtime.c, found on LD_LIBRARY_PATH), as
 *          libcudart.so does for PyTorch; legacy default stream (flags 0)
 *
 * Scenarios (one line of output per call, so that a test can compare exactly):
 *   quota N SIZE        N allocations of SIZE bytes ("alloc I RC"), one free and a retry
 *                       ("retry RC"), then frees everything
 *   count L A           L launches, A allocation+free pairs, one cuMemGetInfo
 *   launch N            N launches of function 0x1234, each printed ("launch I RC")
 *   reload N            N launches of function 0x1234, cuModuleUnload (after which the mock
 *                       names 0x1234 anew, as a driver reusing a freed function's address
 *                       would), N more launches; not on the link route
 *   libkernels N        N launches of the mock's library kernel 0xab00 (a CUkernel, as CUDA
 *                       12+ cudart launches), then one of function 0x1234 ("launch I RC")
 *   threads T L         T threads doing L launches each
 *   live READY GO SIZE  one allocation ("before RC"), creates file READY, waits for file GO,
 *                       another allocation ("after RC")
 *   forklive READY GO SIZE  one allocation in the parent ("parent alloc RC"), then a forked
 *                       child makes one ("child before RC"), creates file READY holding its pid,
 *                       waits for file GO and makes another ("child after RC"); the parent
 *                       waits ("child exit STATUS")
 *   fork N SIZE         one allocation in the parent ("parent alloc RC"), then a forked child
 *                       does N allocations ("child alloc I RC") and exits; the parent waits
 *                       ("child exit STATUS")
 *   bench N             N launches, then N allocation+free pairs, timed: "launch_ns X" and
 *                       "alloc_free_ns Y" per call (median of 5 rounds)
 *   hammer T STOP       T threads launching as fast as they can until file STOP exists
 *                       ("launches N", the total)
 *   race T N SIZE       T threads released together, each making N allocations of SIZE
 *                       bytes and holding them until every thread is done: "race ok=K"
 *                       (the allocations that succeeded), then everything is freed
 *
 * Allocation families (F: alloc pitch managed async pool create array array3d mipmap; SIZE
 * is the bytes of one allocation: pitch is SIZE x 1 rows of 4-byte elements, create is
 * cuMemCreate + cuMemAddressReserve + cuMemMap like PyTorch's expandable segments, the
 * arrays are SIZE x 1 of one 8-bit channel with one level; each is freed by its own call:
 * cuMemFree, cuMemFreeAsync, cuMemUnmap + cuMemRelease + cuMemAddressFree, cuArrayDestroy,
 * cuMipmappedArrayDestroy):
 *   family F N SIZE     as `quota` for family F, then "mock used=BYTES live=N"
 *   loop F N SIZE       N allocation+free pairs: "loop ok=K first_error=RC"
 *   hold F SIZE READY GO  one allocation ("hold alloc RC id=0x…"), creates READY, waits for
 *                       GO, frees it ("hold free RC")
 *   stages F SIZE READY1 GO1 READY2 GO2  one allocation ("stages alloc RC"), creates
 *                       READY1, waits for GO1, frees it ("stages free RC"), creates READY2,
 *                       waits for GO2: two attach points called one after the other
 *   leak F N SIZE       N allocations ("leak alloc I RC"), frees the even-numbered ones
 *                       ("leak free I RC") and exits holding the odd-numbered ones
 *   capture SIZE        cuMemAllocAsync of SIZE on the NULL stream ("async plain RC") and on
 *                       the stream the mock reports as being captured ("async captured
 *                       RC"), each freed when it succeeded
 *   hostfn N SIZE       N cuLaunchHostFunc calls whose host function (run by the mock
 *                       inside the call) allocates SIZE bytes ("hostfn alloc I RC"), then
 *                       "hostfn launch I RC"; everything allocated is freed at the end
 *   stream P            a stream created with cuStreamCreateWithPriority at priority P
 *                       ("stream RC priority=Q": Q as cuStreamGetPriority reports it)
 *   meminfo SIZE        cuMemGetInfo ("getinfo RC free=… total=…"), a cuMemAlloc of SIZE,
 *                       cuMemGetInfo, cuDeviceTotalMem ("totalmem RC bytes=…"), the free,
 *                       cuMemGetInfo
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
typedef CUresult gpa_v2_ft(const char *, void **, int, uint64_t, int *);

static gpa_v2_ft *gpa_self;
/* The mock runtime's lookup (route rt). */
typedef void *(*rt_proc_fn)(const char *, int, unsigned long long);
static rt_proc_fn rt_proc;

/* The other allocation families: field, function type, exported symbol, base name and
 * the version cudart asks cuGetProcAddress for. */
typedef CUresult pitch_ft(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult managed_ft(CUdeviceptr *, size_t, unsigned);
typedef CUresult async_ft(CUdeviceptr *, size_t, void *);
typedef CUresult pool_ft(CUdeviceptr *, size_t, void *, void *);
typedef CUresult free_async_ft(CUdeviceptr, void *);
typedef CUresult create_ft(unsigned long long *, size_t, const void *, unsigned long long);
typedef CUresult release_ft(unsigned long long);
typedef CUresult reserve_ft(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult range_ft(CUdeviceptr, size_t);
typedef CUresult map_ft(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
typedef CUresult array_ft(void **, const void *);
typedef CUresult mipmap_ft(void **, const void *, unsigned);
typedef CUresult destroy_ft(void *);
typedef CUresult totalmem_ft(size_t *, int);
typedef void usage_ft(unsigned long long[2]);
typedef CUresult hostfunc_ft(void *, void (*)(void *), void *);
typedef CUresult stream_create_ft(void **, unsigned, int);
typedef CUresult stream_prio_ft(void *, int *);

#define FAMILY_APIS(X)                                                                 \
	X(pitch, pitch_ft, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020)                \
	X(managed, managed_ft, cuMemAllocManaged, "cuMemAllocManaged", 6000)           \
	X(async, async_ft, cuMemAllocAsync, "cuMemAllocAsync", 11020)                  \
	X(pool, pool_ft, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020)    \
	X(free_async, free_async_ft, cuMemFreeAsync, "cuMemFreeAsync", 11020)          \
	X(create, create_ft, cuMemCreate, "cuMemCreate", 10020)                        \
	X(release, release_ft, cuMemRelease, "cuMemRelease", 10020)                    \
	X(reserve, reserve_ft, cuMemAddressReserve, "cuMemAddressReserve", 10020)      \
	X(addr_free, range_ft, cuMemAddressFree, "cuMemAddressFree", 10020)            \
	X(map, map_ft, cuMemMap, "cuMemMap", 10020)                                    \
	X(unmap, range_ft, cuMemUnmap, "cuMemUnmap", 10020)                            \
	X(array, array_ft, cuArrayCreate_v2, "cuArrayCreate", 3020)                    \
	X(array3d, array_ft, cuArray3DCreate_v2, "cuArray3DCreate", 3020)              \
	X(array_destroy, destroy_ft, cuArrayDestroy, "cuArrayDestroy", 2000)           \
	X(mipmap, mipmap_ft, cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000)   \
	X(mipmap_destroy, destroy_ft, cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000) \
	X(totalmem, totalmem_ft, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020)        \
	X(hostfunc, hostfunc_ft, cuLaunchHostFunc, "cuLaunchHostFunc", 10000)          \
	X(stream_create, stream_create_ft, cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050) \
	X(stream_prio, stream_prio_ft, cuStreamGetPriority, "cuStreamGetPriority", 5050)

#define FIELD(f, t, sym, base, version) t *f;
static struct {
	FAMILY_APIS(FIELD)
	usage_ft *usage;
} fam;

#ifdef LINK_CUDA
#define DECLARE(f, t, sym, base, version) t sym;
FAMILY_APIS(DECLARE)
usage_ft mock_usage;
#endif

/* The dlopen handle and the self-looked-up cuGetProcAddress of the dlsym/proc routes. */
static void *lib;

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

/* One allocation in the parent ("parent alloc RC"), then fork: 0 in the child. */
static pid_t alloc_then_fork(size_t size)
{
	CUdeviceptr d = 0;
	printf("parent alloc %d\n", cu.alloc(&d, size));
	fflush(stdout);
	pid_t child = fork();
	if (child < 0)
		die("fork");
	return child;
}

/* Waits for `child` and says how it ended ("child exit STATUS"). */
static void wait_child(pid_t child)
{
	int status = 0;
	waitpid(child, &status, 0);
	printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Waits up to a minute for file `go` to exist. */
static void wait_for_go(const char *go)
{
	for (int i = 0; access(go, F_OK) != 0; i++) {
		if (i > 6000)
			die("timed out waiting for GO");
		usleep(10000);
	}
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
	lib = h;
	cu.stats = (stats_fn)need(dlsym(h, "mock_stats"), "dlsym mock_stats");
	if (strcmp(route, "dlsym") == 0) {
		cu.init = (init_fn)need(dlsym(h, "cuInit"), "dlsym cuInit");
		cu.alloc = (alloc_fn)need(dlsym(h, "cuMemAlloc_v2"), "dlsym cuMemAlloc_v2");
		cu.free = (free_fn)need(dlsym(h, "cuMemFree_v2"), "dlsym cuMemFree_v2");
		cu.info = (info_fn)need(dlsym(h, "cuMemGetInfo_v2"), "dlsym cuMemGetInfo_v2");
		cu.launch = (launch_fn)need(dlsym(h, "cuLaunchKernel"), "dlsym cuLaunchKernel");
		return;
	}
	if (strcmp(route, "rt") == 0) {
		void *rt = need(dlopen("libmockrt.so", RTLD_NOW), "dlopen libmockrt.so");
		rt_proc = (rt_proc_fn)need(dlsym(rt, "mockrt_proc"), "dlsym mockrt_proc");
#define RT(field, type, name, version, flags)                                          \
	cu.field = (type)need(rt_proc(name, version, flags), "mockrt_proc " name)
		RT(init, init_fn, "cuInit", 2000, 0);
		RT(alloc, alloc_fn, "cuMemAlloc", 13000, 0);
		RT(free, free_fn, "cuMemFree", 13000, 0);
		RT(info, info_fn, "cuMemGetInfo", 13000, 0);
		RT(launch, launch_fn, "cuLaunchKernel", 13000, 0);
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
	gpa_self = self;
}

/* The family functions, through the same route as the rest. */
static void setup_families(const char *route)
{
	if (strcmp(route, "link") == 0) {
#ifdef LINK_CUDA
#define LINK(f, t, sym, base, version) fam.f = sym;
		FAMILY_APIS(LINK)
		fam.usage = mock_usage;
#endif
		return;
	}
	fam.usage = (usage_ft *)need(dlsym(lib, "mock_usage"), "dlsym mock_usage");
	if (strcmp(route, "dlsym") == 0) {
#define DLSYM(f, t, sym, base, version) fam.f = (t *)need(dlsym(lib, #sym), "dlsym " #sym);
		FAMILY_APIS(DLSYM)
		return;
	}
	if (strcmp(route, "rt") == 0) {
#define RTFAM(f, t, sym, base, version) fam.f = (t *)need(rt_proc(base, version, 0), base);
		FAMILY_APIS(RTFAM)
		return;
	}
	void *p = NULL;
	int st = -1;
#define PROC(f, t, sym, base, version)                                             \
	do {                                                                       \
		p = NULL;                                                          \
		if (gpa_self(base, &p, version, 0, &st) != 0)                      \
			die("cuGetProcAddress " base);                             \
		fam.f = (t *)need(p, base);                                        \
	} while (0);
	FAMILY_APIS(PROC)
}

/* One allocation of a family: its pointer or handle, and for `create` the mapped range. */
struct allocation {
	unsigned long long id;
	CUdeviceptr va;
	size_t size;
};

struct array_desc {
	size_t width, height;
	unsigned format, channels;
};

struct array3d_desc {
	size_t width, height, depth;
	unsigned format, channels, flags;
};

static CUresult family_alloc(const char *f, size_t size, struct allocation *a)
{
	struct array_desc d2 = { size, 0, 0x01, 1 };
	struct array3d_desc d3 = { size, 0, 0, 0x01, 1, 0 };
	/* CUmemAllocationProp: pinned (1), no export handle, device (1) 0. */
	struct {
		int type, handle_types, loc_type, loc_id;
		void *win32;
		unsigned long long flags;
	} prop = { 1, 0, 1, 0, NULL, 0 };
	void *h = NULL;
	size_t pitch = 0;
	CUresult r;

	memset(a, 0, sizeof(*a));
	a->size = size;
	if (strcmp(f, "alloc") == 0)
		return cu.alloc(&a->id, size);
	if (strcmp(f, "pitch") == 0)
		return fam.pitch(&a->id, &pitch, size, 1, 4);
	if (strcmp(f, "managed") == 0)
		return fam.managed(&a->id, size, 1);
	if (strcmp(f, "async") == 0)
		return fam.async(&a->id, size, NULL);
	if (strcmp(f, "pool") == 0)
		return fam.pool(&a->id, size, (void *)0x1, NULL);
	if (strcmp(f, "create") == 0) {
		r = fam.create(&a->id, size, &prop, 0);
		if (r != 0)
			return r;
		if (fam.reserve(&a->va, size, 0, 0, 0) != 0 || fam.map(a->va, size, 0, a->id, 0) != 0)
			die("cuMemAddressReserve/cuMemMap failed");
		return r;
	}
	if (strcmp(f, "array") == 0)
		r = fam.array(&h, &d2);
	else if (strcmp(f, "array3d") == 0)
		r = fam.array3d(&h, &d3);
	else if (strcmp(f, "mipmap") == 0)
		r = fam.mipmap(&h, &d3, 1);
	else
		die("unknown family");
	a->id = (unsigned long long)(uintptr_t)h;
	return r;
}

static CUresult family_free(const char *f, struct allocation *a)
{
	if (strcmp(f, "alloc") == 0 || strcmp(f, "pitch") == 0 || strcmp(f, "managed") == 0)
		return cu.free(a->id);
	if (strcmp(f, "async") == 0 || strcmp(f, "pool") == 0)
		return fam.free_async(a->id, NULL);
	if (strcmp(f, "create") == 0) {
		if (fam.unmap(a->va, a->size) != 0)
			die("cuMemUnmap failed");
		CUresult r = fam.release(a->id);
		if (fam.addr_free(a->va, a->size) != 0)
			die("cuMemAddressFree failed");
		return r;
	}
	if (strcmp(f, "array") == 0 || strcmp(f, "array3d") == 0)
		return fam.array_destroy((void *)(uintptr_t)a->id);
	return fam.mipmap_destroy((void *)(uintptr_t)a->id);
}

static void print_usage(void)
{
	unsigned long long u[2];

	fam.usage(u);
	printf("mock used=%llu live=%llu\n", u[0], u[1]);
}

static void wait_for(const char *ready, const char *go)
{
	fflush(stdout);
	FILE *fp = need(fopen(ready, "w"), "create READY");
	fclose(fp);
	for (int i = 0; access(go, F_OK) != 0; i++) {
		if (i > 6000)
			die("timed out waiting for GO");
		usleep(10000);
	}
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

/* The `race` scenario's threads: released together, each allocates and counts. */
static pthread_barrier_t race_start;
static long race_n;
static size_t race_size;
static atomic_long race_ok;
static CUdeviceptr *race_ptrs;

static void *race_main(void *arg)
{
	CUdeviceptr *mine = race_ptrs + (intptr_t)arg * race_n;

	pthread_barrier_wait(&race_start);
	for (long i = 0; i < race_n; i++)
		if (cu.alloc(&mine[i], race_size) == 0)
			atomic_fetch_add(&race_ok, 1);
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

/* The host function of scenario hostfn: one allocation, made while the driver call that
 * runs it is in flight. */
struct hostfn_call {
	size_t size;
	long i;
	CUdeviceptr *ptrs;
};

static void hostfn_alloc(void *data)
{
	struct hostfn_call *c = data;
	printf("hostfn alloc %ld %d\n", c->i, cu.alloc(&c->ptrs[c->i], c->size));
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: app ROUTE SCENARIO ARGS…");
	setup(argv[1]);
	setup_families(argv[1]);
	if (cu.init(0) != 0)
		die("cuInit failed");
	const char *scenario = argv[2];
	if (strcmp(scenario, "family") == 0 && argc == 6) {
		const char *f = argv[3];
		long n = atol(argv[4]);
		size_t size = (size_t)atoll(argv[5]);
		struct allocation *as = calloc((size_t)n, sizeof(*as));
		int *ok = calloc((size_t)n, sizeof(*ok));
		for (long i = 0; i < n; i++) {
			CUresult r = family_alloc(f, size, &as[i]);
			ok[i] = r == 0;
			printf("alloc %ld %d\n", i, r);
		}
		if (ok[0]) {
			printf("free %d\n", family_free(f, &as[0]));
			CUresult r = family_alloc(f, size, &as[0]);
			ok[0] = r == 0;
			printf("retry %d\n", r);
		}
		for (long i = 0; i < n; i++)
			if (ok[i] && family_free(f, &as[i]) != 0)
				die("free failed");
		free(as);
		free(ok);
		print_usage();
	} else if (strcmp(scenario, "loop") == 0 && argc == 6) {
		const char *f = argv[3];
		long n = atol(argv[4]), good = 0;
		size_t size = (size_t)atoll(argv[5]);
		CUresult first = 0;
		for (long i = 0; i < n; i++) {
			struct allocation a;
			CUresult r = family_alloc(f, size, &a);
			if (r == 0) {
				good++;
				if (family_free(f, &a) != 0)
					die("free failed");
			} else if (first == 0) {
				first = r;
			}
		}
		printf("loop ok=%ld first_error=%d\n", good, first);
		print_usage();
	} else if (strcmp(scenario, "hold") == 0 && argc == 7) {
		struct allocation a;
		CUresult r = family_alloc(argv[3], (size_t)atoll(argv[4]), &a);
		printf("hold alloc %d id=%#llx\n", r, a.id);
		wait_for(argv[5], argv[6]);
		if (r == 0)
			printf("hold free %d\n", family_free(argv[3], &a));
	} else if (strcmp(scenario, "stages") == 0 && argc == 9) {
		struct allocation a;
		CUresult r = family_alloc(argv[3], (size_t)atoll(argv[4]), &a);
		printf("stages alloc %d\n", r);
		wait_for(argv[5], argv[6]);
		printf("stages free %d\n", r == 0 ? family_free(argv[3], &a) : r);
		wait_for(argv[7], argv[8]);
	} else if (strcmp(scenario, "leak") == 0 && argc == 6) {
		long n = atol(argv[4]);
		size_t size = (size_t)atoll(argv[5]);
		struct allocation *as = calloc((size_t)n, sizeof(*as));
		int *ok = calloc((size_t)n, sizeof(*ok));
		for (long i = 0; i < n; i++) {
			CUresult r = family_alloc(argv[3], size, &as[i]);
			ok[i] = r == 0;
			printf("leak alloc %ld %d\n", i, r);
		}
		for (long i = 0; i < n; i += 2)
			if (ok[i])
				printf("leak free %ld %d\n", i, family_free(argv[3], &as[i]));
		free(as);
		free(ok);
		print_usage();
	} else if (strcmp(scenario, "capture") == 0 && argc == 4) {
		size_t size = (size_t)atoll(argv[3]);
		void *streams[2] = { NULL, (void *)(uintptr_t)0xCA97 };
		const char *names[2] = { "plain", "captured" };
		for (int i = 0; i < 2; i++) {
			CUdeviceptr d = 0;
			CUresult r = fam.async(&d, size, streams[i]);
			printf("async %s %d\n", names[i], r);
			if (r == 0)
				fam.free_async(d, streams[i]);
		}
	} else if (strcmp(scenario, "stream") == 0 && argc == 4) {
		void *st = NULL;
		int q = 99;
		CUresult r = fam.stream_create(&st, 1, atoi(argv[3]));
		if (r == 0)
			r = fam.stream_prio(st, &q);
		printf("stream %d priority=%d\n", r, q);
	} else if (strcmp(scenario, "hostfn") == 0 && argc == 5) {
		long n = atol(argv[3]);
		struct hostfn_call c = { (size_t)atoll(argv[4]), 0,
					 calloc((size_t)n, sizeof(CUdeviceptr)) };
		for (long i = 0; i < n; i++) {
			c.i = i;
			CUresult r = fam.hostfunc(NULL, hostfn_alloc, &c);
			printf("hostfn launch %ld %d\n", i, r);
		}
		for (long i = 0; i < n; i++)
			if (c.ptrs[i])
				cu.free(c.ptrs[i]);
		free(c.ptrs);
	} else if (strcmp(scenario, "meminfo") == 0 && argc == 4) {
		size_t fr = 0, total = 0, bytes = 0;
		CUdeviceptr d = 0;
		CUresult r = cu.info(&fr, &total);
		printf("getinfo %d free=%zu total=%zu\n", r, fr, total);
		printf("alloc %d\n", cu.alloc(&d, (size_t)atoll(argv[3])));
		r = cu.info(&fr, &total);
		printf("getinfo %d free=%zu total=%zu\n", r, fr, total);
		r = fam.totalmem(&bytes, 0);
		printf("totalmem %d bytes=%zu\n", r, bytes);
		if (d)
			printf("free %d\n", cu.free(d));
		r = cu.info(&fr, &total);
		printf("getinfo %d free=%zu total=%zu\n", r, fr, total);
	} else if (strcmp(scenario, "quota") == 0 && argc == 5) {
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
	} else if (strcmp(scenario, "launch") == 0 && argc == 4) {
		long n = atol(argv[3]);
		for (long i = 0; i < n; i++)
			printf("launch %ld %d\n", i,
			       cu.launch((void *)0x1234, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		print_usage();
	} else if (strcmp(scenario, "reload") == 0 && argc == 4) {
		typedef CUresult (*unload_fn)(void *);
		if (!lib)
			die("reload needs a dlopen route");
		unload_fn unload = (unload_fn)need(dlsym(lib, "cuModuleUnload"), "dlsym cuModuleUnload");
		long n = atol(argv[3]);
		for (long i = 0; i < 2 * n; i++) {
			if (i == n)
				printf("unload %d\n", unload(NULL));
			printf("launch %ld %d\n", i,
			       cu.launch((void *)0x1234, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		}
	} else if (strcmp(scenario, "libkernels") == 0 && argc == 4) {
		long n = atol(argv[3]);
		for (long i = 0; i <= n; i++)
			printf("launch %ld %d\n", i,
			       cu.launch(i < n ? (void *)0xab00 : (void *)0x1234, 1, 1, 1, 32, 1, 1, 0,
					 NULL, NULL, NULL));
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
	} else if (strcmp(scenario, "race") == 0 && argc == 6) {
		long t = atol(argv[3]);
		race_n = atol(argv[4]);
		race_size = (size_t)atoll(argv[5]);
		if (t <= 0 || race_n <= 0)
			die("race: T and N must be positive");
		race_ptrs = need(calloc((size_t)(t * race_n), sizeof(*race_ptrs)), "calloc");
		pthread_t *ts = need(calloc((size_t)t, sizeof(*ts)), "calloc");
		if (pthread_barrier_init(&race_start, NULL, (unsigned)t) != 0)
			die("pthread_barrier_init");
		for (long i = 0; i < t; i++)
			if (pthread_create(&ts[i], NULL, race_main, (void *)(intptr_t)i) != 0)
				die("pthread_create");
		for (long i = 0; i < t; i++)
			pthread_join(ts[i], NULL);
		printf("race ok=%ld\n", atomic_load(&race_ok));
		for (long i = 0; i < t * race_n; i++)
			if (race_ptrs[i])
				cu.free(race_ptrs[i]);
		free(ts);
		free(race_ptrs);
	} else if (strcmp(scenario, "live") == 0 && argc == 6) {
		size_t size = (size_t)atoll(argv[5]);
		CUdeviceptr d1 = 0, d2 = 0;
		printf("before %d\n", cu.alloc(&d1, size));
		fflush(stdout);
		FILE *f = need(fopen(argv[3], "w"), "create READY");
		fclose(f);
		wait_for_go(argv[4]);
		printf("after %d\n", cu.alloc(&d2, size));
	} else if (strcmp(scenario, "forklive") == 0 && argc == 6) {
		size_t size = (size_t)atoll(argv[5]);
		pid_t child = alloc_then_fork(size);
		if (child == 0) {
			CUdeviceptr c1 = 0, c2 = 0;
			printf("child before %d\n", cu.alloc(&c1, size));
			fflush(stdout);
			/* Written aside and renamed: READY appears with its pid in it. */
			char tmp[4096];
			snprintf(tmp, sizeof(tmp), "%s.tmp", argv[3]);
			FILE *f = need(fopen(tmp, "w"), "create READY");
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
			if (rename(tmp, argv[3]) != 0)
				die("rename READY");
			wait_for_go(argv[4]);
			printf("child after %d\n", cu.alloc(&c2, size));
			fflush(stdout);
			_exit(0);
		}
		wait_child(child);
	} else if (strcmp(scenario, "fork") == 0 && argc == 5) {
		long n = atol(argv[3]);
		size_t size = (size_t)atoll(argv[4]);
		pid_t child = alloc_then_fork(size);
		if (child == 0) {
			printf("child pid %d\n", (int)getpid());
			for (long i = 0; i < n; i++) {
				CUdeviceptr c = 0;
				printf("child alloc %ld %d\n", i, cu.alloc(&c, size));
			}
			fflush(stdout);
			_exit(0);
		}
		wait_child(child);
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
