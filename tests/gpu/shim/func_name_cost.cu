// What the real driver's cuFuncGetName costs per call (gpubpf_get_kernel_name asks it for a
// handle it has no copy of), on a CUfunction and, refused, on a library's CUkernel beside
// cuKernelGetName; beside clock_gettime(CLOCK_MONOTONIC) (bpf_ktime_get_ns,
// read twice per traced call), and a bare `rdtsc` (what a clock of our own would cost at
// least). Run without the shim:
//   nvcc -O2 -arch=sm_90 -o func_name_cost func_name_cost.cu -lcuda && ./func_name_cost
#include <cstdio>
#include <cstring>
#include <ctime>
#include <x86intrin.h>

#include <cuda.h>
#include <cuda_runtime.h>

template <typename T>
__global__ void templated_axpy_with_a_long_name(T a, const T *x, T *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

static double now_ns()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main()
{
	const int n = 1 << 10;
	float *x, *y;
	if (cudaMalloc(&x, n * 4) || cudaMalloc(&y, n * 4)) {
		printf("FUNCNAME error: cudaMalloc\n");
		return 1;
	}
	templated_axpy_with_a_long_name<float><<<4, 256>>>(0.5f, x, y, n);
	cudaDeviceSynchronize();
	cudaFunction_t f;
	if (cudaGetFuncBySymbol(&f, (const void *)templated_axpy_with_a_long_name<float>)) {
		printf("FUNCNAME error: cudaGetFuncBySymbol\n");
		return 1;
	}
	const char *name = nullptr;
	if (cuFuncGetName(&name, (CUfunction)f) != CUDA_SUCCESS || !name) {
		printf("FUNCNAME error: cuFuncGetName\n");
		return 1;
	}
	const int iters = 1000000;
	double best_name = 1e30, best_clock = 1e30, best_tsc = 1e30;
	unsigned long long tsc_sink = 0;
	for (int r = 0; r < 5; r++) {
		double t0 = now_ns();
		for (int i = 0; i < iters; i++)
			cuFuncGetName(&name, (CUfunction)f);
		double t1 = now_ns();
		for (int i = 0; i < iters; i++)
			now_ns();
		double t2 = now_ns();
		for (int i = 0; i < iters; i++)
			tsc_sink += __rdtsc();
		double t3 = now_ns();
		best_tsc = (t3 - t2) / iters < best_tsc ? (t3 - t2) / iters : best_tsc;
		best_name = (t1 - t0) / iters < best_name ? (t1 - t0) / iters : best_name;
		best_clock = (t2 - t1) / iters < best_clock ? (t2 - t1) / iters : best_clock;
	}
	printf("FUNCNAME cuFuncGetName %.1f ns per call (best of 5 x %d), clock_gettime %.1f ns, "
	       "rdtsc %.1f ns; name %zu bytes: %s\n",
	       best_name, iters, best_clock, best_tsc, strlen(name), name);
	// What naming a PyTorch launch costs without the shim's per-handle copy: CUDA 12+
	// cudart launches the library's CUkernel, which cuFuncGetName refuses, so
	// gpubpf_get_kernel_name then asks cuKernelGetName (2026-12-07: a traced launch that
	// emitted its event cost ~4-6 us in PyTorch).
	cudaKernel_t k;
	if (cudaGetKernel(&k, (const void *)templated_axpy_with_a_long_name<float>)) {
		printf("FUNCNAME error: cudaGetKernel\n");
		return 1;
	}
	const int kiters = 100000;
	double best_refused = 1e30, best_kernel = 1e30;
	CUresult refused = cuFuncGetName(&name, (CUfunction)k);
	for (int r = 0; r < 5; r++) {
		double t0 = now_ns();
		for (int i = 0; i < kiters; i++)
			cuFuncGetName(&name, (CUfunction)k);
		double t1 = now_ns();
		for (int i = 0; i < kiters; i++)
			cuKernelGetName(&name, (CUkernel)k);
		double t2 = now_ns();
		best_refused = (t1 - t0) / kiters < best_refused ? (t1 - t0) / kiters : best_refused;
		best_kernel = (t2 - t1) / kiters < best_kernel ? (t2 - t1) / kiters : best_kernel;
	}
	name = nullptr;
	CUresult named = cuKernelGetName(&name, (CUkernel)k);
	printf("FUNCNAME library kernel: cuFuncGetName refuses it (%d) in %.1f ns, cuKernelGetName "
	       "(%d) %.1f ns per call (best of 5 x %d); name %s\n",
	       (int)refused, best_refused, (int)named, best_kernel, kiters, name ? name : "(none)");
	return tsc_sink == 1 ? 2 : 0;
}
