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
 *
 * Every allocation family of INTERCEPTION.md §5 is there for the quota tests: cuMemAlloc
 * (host blocks), cuMemAllocPitch/Managed/Async/FromPoolAsync, cuMemCreate (+ cuMemAddress
 * Reserve/Free, cuMemMap/Unmap, which allocate nothing), cuArrayCreate/cuArray3DCreate/
 * cuMipmappedArrayCreate sized from their descriptors, with their frees/destroys. Those
 * live in a table whose slots are reused lowest-first, and addresses and handles derive
 * from the slot: two processes that make the same calls get the same device addresses
 * and handles, as they may on a real device. All of them count against a device of
 * MOCK_TOTAL_MEMORY bytes, which cuMemGetInfo and cuDeviceTotalMem report;
 * `mock_usage()` gives the bytes in use and the live allocations.
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

typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUarray;
typedef void *CUmipmappedArray;
typedef void *CUmemoryPool;

typedef struct {
	size_t Width;
	size_t Height;
	unsigned int Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
	size_t Width;
	size_t Height;
	size_t Depth;
	unsigned int Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct {
	int type;
	int requestedHandleTypes;
	struct {
		int type;
		int id;
	} location;
	void *win32HandleMetaData;
	unsigned char allocFlags[8];
} CUmemAllocationProp;

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

/* ---- the table of the other families' allocations -------------------------------- */

enum kind { K_DPTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP };

#define MAX_LIVE 1024
#define DPTR_BASE 0x7e0000000000ULL /* + slot * 1 MiB */
#define ARRAY_BASE 0xa00000ULL      /* + slot * 16 (CUarray, CUmipmappedArray) */

static struct live {
	int kind; /* 0: free slot */
	size_t size;
} table[MAX_LIVE];
static atomic_flag table_lock = ATOMIC_FLAG_INIT;

static void lock(void)
{
	while (atomic_flag_test_and_set(&table_lock))
		;
}

static void unlock(void)
{
	atomic_flag_clear(&table_lock);
}

static unsigned long long id_of(int kind, int slot)
{
	switch (kind) {
	case K_DPTR:
		return DPTR_BASE + ((unsigned long long)slot << 20);
	case K_HANDLE:
		return (unsigned long long)slot + 1;
	default:
		return ARRAY_BASE + (unsigned long long)slot * 16;
	}
}

/* Takes the lowest free slot for `size` bytes of `kind`; its id in *id. */
static CUresult take(int kind, size_t size, unsigned long long *id)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (atomic_fetch_add(&used_bytes, size) + size > MOCK_TOTAL_MEMORY) {
		atomic_fetch_sub(&used_bytes, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	lock();
	for (int i = 0; i < MAX_LIVE; i++) {
		if (table[i].kind == 0) {
			table[i].kind = kind;
			table[i].size = size;
			unlock();
			*id = id_of(kind, i);
			atomic_fetch_add(&n_alloc, 1);
			return CUDA_SUCCESS;
		}
	}
	unlock();
	atomic_fetch_sub(&used_bytes, size);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Frees the live allocation `id` of `kind`: 0, or -1 when there is none. */
static int give_back(int kind, unsigned long long id)
{
	lock();
	for (int i = 0; i < MAX_LIVE; i++) {
		if (table[i].kind == kind && id_of(kind, i) == id) {
			atomic_fetch_sub(&used_bytes, table[i].size);
			table[i].kind = 0;
			unlock();
			atomic_fetch_add(&n_free, 1);
			return 0;
		}
	}
	unlock();
	return -1;
}

static int is_table_dptr(CUdeviceptr p)
{
	return p >= DPTR_BASE && p < DPTR_BASE + ((unsigned long long)MAX_LIVE << 20);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
			    unsigned int element_size)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !pitch || width == 0 || height == 0 ||
	    (element_size != 4 && element_size != 8 && element_size != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + 511) / 512 * 512;
	CUresult r = take(K_DPTR, p * height, dptr);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || (flags != 1 && flags != 2)) /* CU_MEM_ATTACH_GLOBAL / _HOST */
		return CUDA_ERROR_INVALID_VALUE;
	return take(K_DPTR, bytesize, dptr);
}

/* The stream handle the test applications treat as being captured into a graph. */
#define MOCK_CAPTURING_STREAM ((CUstream)(uintptr_t)0xCA97)

/* CU_STREAM_CAPTURE_STATUS_ACTIVE (1) for MOCK_CAPTURING_STREAM, NONE (0) otherwise. */
CUresult cuStreamIsCapturing(CUstream s, int *status)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	*status = s == MOCK_CAPTURING_STREAM;
	return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	(void)s;
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	return take(K_DPTR, bytesize, dptr);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				 CUstream s)
{
	(void)s;
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !pool)
		return CUDA_ERROR_INVALID_VALUE;
	return take(K_DPTR, bytesize, dptr);
}

static CUresult free_dptr(CUdeviceptr dptr);

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	(void)s;
	return free_dptr(dptr);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	/* One pinned device allocation on device 0 (CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	 * CU_MEM_LOCATION_TYPE_DEVICE = 1). */
	if (!handle || !prop || flags != 0 || prop->type != 1 || prop->location.type != 1 ||
	    prop->location.id != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return take(K_HANDLE, size, handle);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	return give_back(K_HANDLE, handle) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Virtual address ranges and mappings allocate no memory: checked, not counted. */
static atomic_ullong next_va = 0x600000000000ULL;

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	(void)alignment, (void)addr;
	if (!ptr || size == 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*ptr = atomic_fetch_add(&next_va, (size + 0xfffff) & ~0xfffffULL);
	return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
		  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	if (!ptr || size == 0 || offset != 0 || flags != 0 || handle == 0 || handle > MAX_LIVE)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	int ok = table[handle - 1].kind == K_HANDLE && table[handle - 1].size >= size;
	unlock();
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Bytes per channel of a CUarray_format (8-, 16- and 32-bit integers, half, float). */
static size_t format_bytes(unsigned int f)
{
	switch (f) {
	case 0x01: case 0x08: return 1;
	case 0x02: case 0x09: case 0x10: return 2;
	case 0x03: case 0x0a: case 0x20: return 4;
	default: return 0;
	}
}

static size_t at_least_1(size_t v)
{
	return v ? v : 1;
}

static size_t array_size(size_t w, size_t h, size_t d, unsigned int format, unsigned int ch,
			 unsigned int levels)
{
	size_t elem = format_bytes(format) * ch, total = 0;

	if (w == 0 || elem == 0 || (ch != 1 && ch != 2 && ch != 4) || levels == 0)
		return 0;
	for (unsigned int i = 0; i < levels; i++)
		total += at_least_1(w >> i) * at_least_1(h >> i) * at_least_1(d >> i) * elem;
	return total;
}

CUresult cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long id = 0;
	CUresult r = take(K_ARRAY,
			  array_size(desc->Width, desc->Height, 0, desc->Format,
				     desc->NumChannels, 1),
			  &id);
	*handle = (CUarray)(uintptr_t)id;
	return r;
}

CUresult cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long id = 0;
	CUresult r = take(K_ARRAY,
			  array_size(desc->Width, desc->Height, desc->Depth, desc->Format,
				     desc->NumChannels, 1),
			  &id);
	*handle = (CUarray)(uintptr_t)id;
	return r;
}

CUresult cuArrayDestroy(CUarray a)
{
	return give_back(K_ARRAY, (uintptr_t)a) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
				unsigned int levels)
{
	if (!atomic_load(&initialized))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long id = 0;
	CUresult r = take(K_MIPMAP,
			  array_size(desc->Width, desc->Height, desc->Depth, desc->Format,
				     desc->NumChannels, levels),
			  &id);
	*handle = (CUmipmappedArray)(uintptr_t)id;
	return r;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
	return give_back(K_MIPMAP, (uintptr_t)a) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	if (!bytes || dev != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = MOCK_TOTAL_MEMORY;
	return CUDA_SUCCESS;
}

/* ---- cuMemFree: host blocks of cuMemAlloc_v2 and the table's device pointers -------- */

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return free_dptr(dptr);
}

static CUresult free_dptr(CUdeviceptr dptr)
{
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (is_table_dptr(dptr))
		return give_back(K_DPTR, dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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

/* A library's kernel (`CUkernel`), launched cast to a CUfunction as CUDA 12+ cudart launches
 * what `cuLibraryGetKernel` gave it: cuFuncGetName refuses it, cuKernelGetName names it. */
#define MOCK_LIBRARY_KERNEL 0xab00

/* Whether a launch carries exactly the arguments every test app passes. */
static int launch_args_ok(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			  unsigned by, unsigned bz, unsigned shmem, CUstream s)
{
	return (f == (CUfunction)0x1234 || f == (CUfunction)MOCK_LIBRARY_KERNEL) && gx == 1 &&
	       gy == 1 && gz == 1 && bx == 32 && by == 1 && bz == 1 && shmem == 0 && s == NULL;
}

/* Modules unloaded so far: after one, 0x1234 names another function (as a real driver may
 * give a freed function's address to a function loaded later). */
static atomic_int modules_unloaded;

CUresult cuModuleUnload(void *module)
{
	(void)module;
	atomic_fetch_add(&modules_unloaded, 1);
	return CUDA_SUCCESS;
}

/* The name of the one function the test apps launch (gpubpf_get_kernel_name asks it). */
CUresult cuFuncGetName(const char **name, CUfunction f)
{
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (f != (CUfunction)0x1234)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = atomic_load(&modules_unloaded) ? "vector_add_reloaded" : "vector_add";
	return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, void *k)
{
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (k != (void *)MOCK_LIBRARY_KERNEL)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = "library_kernel";
	return CUDA_SUCCESS;
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

/* Streams with a priority, as the real driver: priorities outside
 * [greatest, least] = [-5, 0] are clamped into it; a stream is its slot + 1 in `stream_prio`. */
#define MOCK_STREAMS 64
static int stream_prio[MOCK_STREAMS];
static atomic_int n_streams;

CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	(void)flags;
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	int i = atomic_fetch_add(&n_streams, 1);
	if (i >= MOCK_STREAMS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	stream_prio[i] = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	*ph = (CUstream)(uintptr_t)(0x5000 + i);
	return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream s, int *priority)
{
	uintptr_t i = (uintptr_t)s - 0x5000;
	if (!priority || (uintptr_t)s < 0x5000 || i >= (uintptr_t)atomic_load(&n_streams))
		return CUDA_ERROR_INVALID_HANDLE;
	*priority = stream_prio[i];
	return CUDA_SUCCESS;
}

/* Unlike the real driver, which runs a host function later on a thread of its own, the mock
 * runs it at once, inside the call and on the caller's thread: a driver calling back into
 * the application while one of its calls is in flight (the shim's nested policed calls). */
typedef void (*CUhostFn)(void *);
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	(void)s;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	fn(data);
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
	{ "cuDeviceTotalMem", 3020, 0, (void *)cuDeviceTotalMem_v2 },
	{ "cuMemAllocPitch", 3020, 0, (void *)cuMemAllocPitch_v2 },
	{ "cuMemAllocManaged", 6000, 0, (void *)cuMemAllocManaged },
	{ "cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync },
	{ "cuStreamIsCapturing", 10000, 0, (void *)cuStreamIsCapturing },
	{ "cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync },
	{ "cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync },
	{ "cuMemCreate", 10020, 0, (void *)cuMemCreate },
	{ "cuMemRelease", 10020, 0, (void *)cuMemRelease },
	{ "cuMemAddressReserve", 10020, 0, (void *)cuMemAddressReserve },
	{ "cuMemAddressFree", 10020, 0, (void *)cuMemAddressFree },
	{ "cuMemMap", 10020, 0, (void *)cuMemMap },
	{ "cuMemUnmap", 10020, 0, (void *)cuMemUnmap },
	{ "cuArrayCreate", 3020, 0, (void *)cuArrayCreate_v2 },
	{ "cuArray3DCreate", 3020, 0, (void *)cuArray3DCreate_v2 },
	{ "cuArrayDestroy", 2000, 0, (void *)cuArrayDestroy },
	{ "cuMipmappedArrayCreate", 5000, 0, (void *)cuMipmappedArrayCreate },
	{ "cuMipmappedArrayDestroy", 5000, 0, (void *)cuMipmappedArrayDestroy },
	{ "cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel },
	{ "cuLaunchHostFunc", 10000, 0, (void *)cuLaunchHostFunc },
	{ "cuCtxGetStreamPriorityRange", 5050, 0, (void *)cuCtxGetStreamPriorityRange },
	{ "cuStreamCreateWithPriority", 5050, 0, (void *)cuStreamCreateWithPriority },
	{ "cuStreamGetPriority", 5050, 0, (void *)cuStreamGetPriority },
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

/* Not a driver function: bytes in use on the mock device and live table allocations. */
void mock_usage(unsigned long long out[2])
{
	unsigned long long live = 0;

	lock();
	for (int i = 0; i < MAX_LIVE; i++)
		live += table[i].kind != 0;
	unlock();
	out[0] = atomic_load(&used_bytes);
	out[1] = live;
}
