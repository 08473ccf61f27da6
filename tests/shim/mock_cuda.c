/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * A mock CUDA driver (`libcuda.so.1`) for the shim's end-to-end tests: host memory stands in
 * for device memory. It exports the handful of driver functions the test applications use,
 * under their real exported names and C signatures, and a `cuGetProcAddress[_v2]` that
 * resolves base names by requested version and flags as the real driver does
 * (INTERCEPTION.md §3): `cuMemAlloc@3020 -> cuMemAlloc_v2`, `cuLaunchKernel@7000 flags=0x2
 * -> cuLaunchKernel_ptsz`, `cuGetProcAddress@12000 -> cuGetProcAddress_v2` (self-lookup),
 * and NULL with CUDA_ERROR_NOT_FOUND for an unknown or empty name.
 *
 * Built with -Wl,-Bsymbolic so that the addresses it hands out are its own functions even
 * when the shim, preloaded, interposes the same names (as the real driver's are).
 *
 * `mock_stats()` reports what really reached the driver: calls per function, so a test can
 * tell legacy-stream from per-thread-stream launches and denied from executed allocations.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUfunction;
typedef void *CUstream;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500

#define MOCK_TOTAL_MEMORY (1ULL << 30)

static atomic_int initialized;
static atomic_ullong used_bytes;
static atomic_ullong n_alloc, n_free, n_launch, n_launch_ptsz, n_getinfo;

CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	atomic_store(&initialized, 1);
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 13000;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!dev || ordinal != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = 0;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = 0;
	return CUDA_SUCCESS;
}

/* Allocation header in front of each block, so that cuMemFree knows the size. */
struct block {
	size_t size;
	size_t pad;
};

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (atomic_fetch_add(&used_bytes, bytesize) + bytesize > MOCK_TOTAL_MEMORY) {
		atomic_fetch_sub(&used_bytes, bytesize);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct block *b = malloc(sizeof(*b) + bytesize);
	if (!b) {
		atomic_fetch_sub(&used_bytes, bytesize);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	b->size = bytesize;
	*dptr = (CUdeviceptr)(uintptr_t)(b + 1);
	atomic_fetch_add(&n_alloc, 1);
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	struct block *b = (struct block *)(uintptr_t)dptr - 1;
	atomic_fetch_sub(&used_bytes, b->size);
	free(b);
	atomic_fetch_add(&n_free, 1);
	return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	*total = MOCK_TOTAL_MEMORY;
	*free_bytes = MOCK_TOTAL_MEMORY - atomic_load(&used_bytes);
	atomic_fetch_add(&n_getinfo, 1);
	return CUDA_SUCCESS;
}

/* Whether a launch carries exactly the arguments every test app passes. */
static int launch_args_ok(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			  unsigned by, unsigned bz, unsigned shmem, CUstream s)
{
	return f == (CUfunction)0x1234 && gx == 1 && gy == 1 && gz == 1 && bx == 32 && by == 1 &&
	       bz == 1 && shmem == 0 && s == NULL;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			void **extra)
{
	(void)params, (void)extra;
	/* As the real driver: a corrupted handle or dimension is refused (the test apps launch
	 * function 0x1234 on a 1x1x1 grid of 32x1x1 blocks, no shared memory, default stream). */
	if (!launch_args_ok(f, gx, gy, gz, bx, by, bz, shmem, s))
		return CUDA_ERROR_INVALID_HANDLE;
	atomic_fetch_add(&n_launch, 1);
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			     unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			     void **extra)
{
	(void)params, (void)extra;
	/* As the real driver: a corrupted handle or dimension is refused (the test apps launch
	 * function 0x1234 on a 1x1x1 grid of 32x1x1 blocks, no shared memory, default stream). */
	if (!launch_args_ok(f, gx, gy, gz, bx, by, bz, shmem, s))
		return CUDA_ERROR_INVALID_HANDLE;
	atomic_fetch_add(&n_launch_ptsz, 1);
	return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
			     int *status);

/* base name, minimum CUDA version, per-thread-stream variant?, function */
static const struct entry {
	const char *base;
	int version;
	int per_thread;
	void *fn;
} TABLE[] = {
	{ "cuInit", 2000, 0, (void *)cuInit },
	{ "cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion },
	{ "cuDeviceGet", 2000, 0, (void *)cuDeviceGet },
	{ "cuCtxGetDevice", 2000, 0, (void *)cuCtxGetDevice },
	{ "cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2 },
	{ "cuMemFree", 3020, 0, (void *)cuMemFree_v2 },
	{ "cuMemGetInfo", 3020, 0, (void *)cuMemGetInfo_v2 },
	{ "cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel },
	{ "cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz },
	{ "cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress },
	{ "cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2 },
};

/* Newest entry of `symbol` with version <= `version`; the per-thread one with flag 0x2. */
static void *resolve(const char *symbol, int version, uint64_t flags)
{
	const struct entry *best = NULL;
	int want_pt = (flags & 0x2) != 0;

	if (!symbol || !*symbol)
		return NULL;
	for (size_t i = 0; i < sizeof(TABLE) / sizeof(TABLE[0]); i++) {
		const struct entry *e = &TABLE[i];
		if (strcmp(e->base, symbol) != 0 || e->version > version)
			continue;
		if (e->per_thread && !want_pt)
			continue;
		if (!best || e->per_thread > best->per_thread ||
		    (e->per_thread == best->per_thread && e->version > best->version))
			best = e;
	}
	return best ? best->fn : NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
			     int *status)
{
	if (!pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = resolve(symbol, version, flags);
	if (status)
		*status = *pfn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* Not a driver function: what really reached the mock, for the tests. */
void mock_stats(unsigned long long out[5])
{
	out[0] = atomic_load(&n_alloc);
	out[1] = atomic_load(&n_free);
	out[2] = atomic_load(&n_launch);
	out[3] = atomic_load(&n_launch_ptsz);
	out[4] = atomic_load(&n_getinfo);
}
