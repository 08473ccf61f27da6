// Real-GPU test application for policies/quota.bpf.c over every allocation family
// (INTERCEPTION.md §5): an ordinary nvcc program (static cudart; the driver API through
// libcuda for cuMemCreate) that prints what it did.
//
//   families MIB N   for each family: up to N allocations of MIB MiB until the first error
//                    ("F ok=K first_error=E (name)"), then frees them all and allocates once
//                    more ("F after_free=E"): the frees must have been credited
//   meminfo MIB      cudaMemGetInfo and cuDeviceTotalMem before and after a cudaMalloc of
//                    MIB MiB ("getinfo free=… total=…", "totalmem bytes=…")
//
// Families: malloc (cudaMalloc), pitch (cudaMallocPitch, 1 MiB rows), managed
// (cudaMallocManaged), async (cudaMallocAsync/cudaFreeAsync), pool (cudaMallocFromPoolAsync
// on the device's default pool), create (cuMemCreate + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess, as PyTorch's expandable segments), array (cudaMallocArray, float, 16384
// wide), array3d (cudaMalloc3DArray, float, 256 x 256 x depth), mipmap
// (cudaMallocMipmappedArray, float, 4096 wide, 1 level).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

struct Alloc {
	void *p = nullptr;
	cudaArray_t a = nullptr;
	cudaMipmappedArray_t m = nullptr;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	size_t size = 0;
};

static cudaStream_t stream;
static cudaMemPool_t pool;

static int alloc(const char *f, size_t bytes, Alloc *a)
{
	a->size = bytes;
	if (!strcmp(f, "malloc"))
		return cudaMalloc(&a->p, bytes);
	if (!strcmp(f, "pitch")) {
		size_t pitch = 0;
		return cudaMallocPitch(&a->p, &pitch, 1 << 20, bytes >> 20);
	}
	if (!strcmp(f, "managed"))
		return cudaMallocManaged(&a->p, bytes);
	if (!strcmp(f, "async")) {
		int r = cudaMallocAsync(&a->p, bytes, stream);
		return r ? r : cudaStreamSynchronize(stream);
	}
	if (!strcmp(f, "pool")) {
		int r = cudaMallocFromPoolAsync(&a->p, bytes, pool, stream);
		return r ? r : cudaStreamSynchronize(stream);
	}
	if (!strcmp(f, "create")) {
		CUmemAllocationProp prop = {};
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = 0;
		int r = cuMemCreate(&a->h, bytes, &prop, 0);
		if (r)
			return r;
		CUmemAccessDesc acc = {};
		acc.location = prop.location;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		if (cuMemAddressReserve(&a->va, bytes, 0, 0, 0) || cuMemMap(a->va, bytes, 0, a->h, 0) ||
		    cuMemSetAccess(a->va, bytes, &acc, 1)) {
			printf("error: reserve/map/access failed\n");
			exit(1);
		}
		return 0;
	}
	cudaChannelFormatDesc fl = cudaCreateChannelDesc<float>();
	if (!strcmp(f, "array"))
		return cudaMallocArray(&a->a, &fl, 16384, bytes / (16384 * 4));
	if (!strcmp(f, "array3d"))
		return cudaMalloc3DArray(&a->a, &fl, make_cudaExtent(256, 256, bytes / (256 * 256 * 4)));
	if (!strcmp(f, "mipmap"))
		return cudaMallocMipmappedArray(&a->m, &fl, make_cudaExtent(4096, bytes / (4096 * 4), 0),
						1);
	printf("error: unknown family %s\n", f);
	exit(1);
}

static int release(const char *f, Alloc *a)
{
	if (!strcmp(f, "async") || !strcmp(f, "pool")) {
		int r = cudaFreeAsync(a->p, stream);
		return r ? r : cudaStreamSynchronize(stream);
	}
	if (!strcmp(f, "create")) {
		if (cuMemUnmap(a->va, a->size) || cuMemAddressFree(a->va, a->size))
			return 1;
		return cuMemRelease(a->h);
	}
	if (!strcmp(f, "array") || !strcmp(f, "array3d"))
		return cudaFreeArray(a->a);
	if (!strcmp(f, "mipmap"))
		return cudaFreeMipmappedArray(a->m);
	return cudaFree(a->p);
}

static void families(size_t mib, int n)
{
	const char *fs[] = { "malloc", "pitch", "managed", "async", "pool",
			     "create", "array", "array3d", "mipmap" };
	for (const char *f : fs) {
		std::vector<Alloc> as(n);
		int ok = 0, first = 0;
		for (int i = 0; i < n; i++) {
			int r = alloc(f, mib << 20, &as[i]);
			if (r) {
				first = r;
				cudaGetLastError(); // clear the sticky-free error of the runtime API
				break;
			}
			ok++;
		}
		for (int i = 0; i < ok; i++)
			if (release(f, &as[i]))
				printf("%s: free %d failed\n", f, i);
		Alloc again;
		int r = alloc(f, mib << 20, &again);
		if (r == 0)
			release(f, &again);
		printf("%s ok=%d first_error=%d (%s) after_free=%d\n", f, ok, first,
		       first ? cudaGetErrorName((cudaError_t)first) : "-", r);
		fflush(stdout);
	}
}

static void meminfo(size_t mib)
{
	size_t fr = 0, total = 0, bytes = 0;
	CUdevice dev;
	cuDeviceGet(&dev, 0);
	cudaMemGetInfo(&fr, &total);
	printf("getinfo free=%zu total=%zu\n", fr, total);
	void *p = nullptr;
	printf("malloc %d\n", (int)cudaMalloc(&p, mib << 20));
	cudaMemGetInfo(&fr, &total);
	printf("getinfo free=%zu total=%zu\n", fr, total);
	// The call first: the order in which printf's arguments are evaluated is unspecified.
	CUresult tm = cuDeviceTotalMem(&bytes, dev);
	printf("totalmem %d bytes=%zu\n", (int)tm, bytes);
	cudaFree(p);
	cudaMemGetInfo(&fr, &total);
	printf("getinfo free=%zu total=%zu\n", fr, total);
}

int main(int argc, char **argv)
{
	if (cudaFree(0) || cudaStreamCreate(&stream) || cudaDeviceGetDefaultMemPool(&pool, 0)) {
		printf("error: no device\n");
		return 1;
	}
	if (argc == 4 && !strcmp(argv[1], "families"))
		families(atoi(argv[2]), atoi(argv[3]));
	else if (argc == 3 && !strcmp(argv[1], "meminfo"))
		meminfo(atoi(argv[2]));
	else {
		printf("usage: families MIB N | meminfo MIB\n");
		return 2;
	}
	return 0;
}
