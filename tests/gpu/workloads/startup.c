/* A process start-up under the driver API (issue #13 point 4): cuInit, the primary context,
 * one 1 MiB cuMemAlloc and its cuMemFree, with the time of each step. run.sh starts 200 of
 * them at once (spawn.py) with and without the shim, with argument `noctx`: cuInit, then
 * cuDeviceTotalMem instead of the context and the allocation. Linked with -lcuda.
 * Prints: startup init_ms=… ctx_ms=… alloc_ms=… total_ms=… */
#include <stdio.h>
#include <time.h>

#include <cuda.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#define CHECK(call)                                                                       \
	do {                                                                              \
		CUresult r_ = (call);                                                     \
		if (r_ != CUDA_SUCCESS) {                                                 \
			printf("error %s: %d\n", #call, (int)r_);                       \
			return 1;                                                         \
		}                                                                         \
	} while (0)

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	double t0 = now_ms();
	CHECK(cuInit(0));
	double t1 = now_ms();
	CHECK(cuDeviceGet(&dev, 0));
	if (argc > 1 && argv[1][0] == 'n') { /* noctx: one policed call that needs no context */
		size_t total = 0;
		CHECK(cuDeviceTotalMem(&total, dev));
		double t2 = now_ms();
		printf("startup init_ms=%.3f query_ms=%.3f total_ms=%.3f\n", t1 - t0, t2 - t1,
		       t2 - t0);
		return 0;
	}
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	double t2 = now_ms();
	CHECK(cuMemAlloc(&p, 1 << 20));
	CHECK(cuMemFree(p));
	double t3 = now_ms();
	CHECK(cuDevicePrimaryCtxRelease(dev));
	printf("startup init_ms=%.3f ctx_ms=%.3f alloc_ms=%.3f total_ms=%.3f\n", t1 - t0, t2 - t1,
	       t3 - t2, t3 - t0);
	return 0;
}
