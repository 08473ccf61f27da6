// The launch goal of issue #13 point 5 measured inside ONE process with the driver's own
// cuLaunchKernel and the shim's side by side: batches of B empty-kernel launches alternate
// between the real driver function (found as the shim finds it: libc's own dlsym, reached
// through dlvsym, on libcuda.so.1, so no wrapper is in the way) and the function the
// program binds normally (-lcuda: the shim's wrapper under LD_PRELOAD), PAIRS times. Each
// batch is timed on the host clock from its first launch to the end of a cuCtxSynchronize
// through the real function. Adjacent batches meet the same machine state, so the median
// of the per-pair differences cancels the drifts (±10 % over seconds on the H200 host)
// that separate loops of a toggle see.
//
//   launch_interleave [PAIRS=500] [B=2000] [WORK_KB=0]
//   -> INTERLEAVE hooked_ns=… direct_ns=… added=…ns (…%) pairs=… launches=… errors=0 … work_kb=…
//
// WORK_KB > 0 writes one word per cache line of a WORK_KB buffer after every launch, as an
// application's own work between launches (PyTorch's is far larger than an empty loop's):
// what the policy then adds beyond its cost without that work is its indirect cost, the
// lines of the work that the policy's lines evicted, and its own lines the work evicted.
//
// Run it under the shim with a policy loaded (the goal: policy vs no shim) and with
// nothing attached (the shim's own cost); without the shim both sides are the driver's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <dlfcn.h>

#include <cuda.h>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*sync_fn)(void);
typedef void *(*dlsym_fn)(void *, const char *);

// The application's work between launches (WORK_KB): one word per line of the buffer.
static std::vector<unsigned long long> work;

static void do_work(unsigned long long seed)
{
	for (size_t i = 0; i < work.size(); i += 8)
		work[i] += seed;
}

static double batch(launch_fn launch, sync_fn sync, CUfunction f, int b, int *errors)
{
	auto t0 = std::chrono::steady_clock::now();
	for (int i = 0; i < b; i++) {
		if (launch(f, 1, 1, 1, 1, 1, 1, 0, 0, nullptr, nullptr) != CUDA_SUCCESS)
			++*errors;
		do_work((unsigned long long)i);
	}
	sync();
	auto t1 = std::chrono::steady_clock::now();
	return std::chrono::duration<double, std::nano>(t1 - t0).count() / b;
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

int main(int argc, char **argv)
{
	int pairs = argc > 1 ? atoi(argv[1]) : 500;
	int b = argc > 2 ? atoi(argv[2]) : 2000;
	int work_kb = argc > 3 ? atoi(argv[3]) : 0;
	if (pairs <= 0 || b <= 0 || work_kb < 0) {
		fprintf(stderr, "usage: launch_interleave [PAIRS] [B] [WORK_KB]\n");
		return 2;
	}
	work.assign((size_t)work_kb * 1024 / sizeof(unsigned long long), 0);
	if (cudaFree(0) != cudaSuccess) {
		printf("error init\n");
		return 1;
	}
	cudaFunction_t rf;
	if (cudaGetFuncBySymbol(&rf, (const void *)empty_kernel) != cudaSuccess) {
		printf("error cudaGetFuncBySymbol\n");
		return 1;
	}
	CUfunction f = (CUfunction)rf;
	dlsym_fn real_dlsym = nullptr;
	for (const char *v : {"GLIBC_2.34", "GLIBC_2.2.5"})
		if (!real_dlsym)
			real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", v);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!real_dlsym || !h) {
		printf("error: no libc dlsym or libcuda.so.1\n");
		return 1;
	}
	launch_fn direct = (launch_fn)real_dlsym(h, "cuLaunchKernel");
	sync_fn sync = (sync_fn)real_dlsym(h, "cuCtxSynchronize");
	launch_fn hooked = cuLaunchKernel;
	if (!direct || !sync) {
		printf("error: cuLaunchKernel or cuCtxSynchronize not in libcuda.so.1\n");
		return 1;
	}
	int errors = 0;
	for (int i = 0; i < 10; i++) {
		batch(direct, sync, f, b, &errors);
		batch(hooked, sync, f, b, &errors);
	}
	std::vector<double> d, k, diff;
	for (int p = 0; p < pairs; p++) {
		// Alternate which side goes first, so that neither always follows the other.
		double x, y;
		if (p % 2) {
			y = batch(hooked, sync, f, b, &errors);
			x = batch(direct, sync, f, b, &errors);
		} else {
			x = batch(direct, sync, f, b, &errors);
			y = batch(hooked, sync, f, b, &errors);
		}
		d.push_back(x);
		k.push_back(y);
		diff.push_back(y - x);
	}
	double md = median(d), mk = median(k), mdiff = median(diff);
	printf("INTERLEAVE hooked_ns=%.1f direct_ns=%.1f added=%+.1fns (%+.2f%%) pairs=%d launches=%lld "
	       "errors=%d hooked_is_wrapper=%d work_kb=%d\n",
	       mk, md, mdiff, 100.0 * mdiff / md, pairs, 2LL * (pairs + 10) * b, errors,
	       direct != hooked, work_kb);
	return errors != 0;
}
