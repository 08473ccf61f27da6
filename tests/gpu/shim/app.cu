// Real-GPU test application for the shim (issue #13, part 1): an ordinary nvcc program
// (static cudart by default) that prints what it did, so that runs with and without
// libgpubpf.so preloaded can be compared line by line.
//
//   app compute        3 allocations, 7 launches, 5 device synchronizations, 2 frees
//                      (one buffer is kept to the end), results checked on the host
//   app alloc N MIB    N allocations of MIB MiB until the first error, then frees them
//                      and allocates once more (the process goes on working)
//   app graph          stream capture of 4 launches, 3 graph launches, 4 stream-ordered
//                      allocations (cudaMallocAsync/cudaFreeAsync)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

__global__ void axpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

static int check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		printf("error %s: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
		return 1;
	}
	return 0;
}

static int compute()
{
	const int n = 1 << 20;
	const size_t bytes = n * sizeof(float);
	float *x, *y, *keep;
	int allocs = 0, frees = 0, launches = 0, syncs = 0;
	if (check(cudaMalloc(&x, bytes), "cudaMalloc x")) return 1;
	allocs++;
	if (check(cudaMalloc(&y, bytes), "cudaMalloc y")) return 1;
	allocs++;
	if (check(cudaMalloc(&keep, 4096), "cudaMalloc keep")) return 1;
	allocs++;
	std::vector<float> hx(n), hy(n);
	for (int i = 0; i < n; i++) {
		hx[i] = (float)(i % 97);
		hy[i] = 1.0f;
	}
	cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(y, hy.data(), bytes, cudaMemcpyHostToDevice);
	for (int k = 0; k < 7; k++) {
		axpy<<<(n + 255) / 256, 256>>>(0.5f, x, y, n);
		launches++;
		if (check(cudaGetLastError(), "launch")) return 1;
		if (k % 2 == 0) {
			if (check(cudaDeviceSynchronize(), "sync")) return 1;
			syncs++;
		}
	}
	if (check(cudaDeviceSynchronize(), "sync")) return 1;
	syncs++;
	cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost);
	double sum = 0;
	int bad = 0;
	for (int i = 0; i < n; i++) {
		float want = 1.0f + 7 * 0.5f * (float)(i % 97);
		if (hy[i] != want) bad++;
		sum += hy[i];
	}
	cudaFree(x);
	frees++;
	cudaFree(y);
	frees++;
	printf("compute allocs=%d frees=%d launches=%d syncs=%d checksum=%.1f wrong=%d\n", allocs,
	       frees, launches, syncs, sum, bad);
	return bad != 0;
}

static int alloc(int count, int mib)
{
	std::vector<void *> ptrs;
	cudaError_t first = cudaSuccess;
	for (int i = 0; i < count; i++) {
		void *p = nullptr;
		cudaError_t e = cudaMalloc(&p, (size_t)mib << 20);
		if (e != cudaSuccess) {
			first = e;
			break;
		}
		ptrs.push_back(p);
	}
	printf("alloc ok=%zu of %d x %d MiB, first_error=%d (%s)\n", ptrs.size(), count, mib,
	       (int)first, cudaGetErrorName(first));
	cudaGetLastError(); /* clear the sticky-free error state of the runtime */
	for (void *p : ptrs)
		cudaFree(p);
	void *again = nullptr;
	cudaError_t e = cudaMalloc(&again, (size_t)mib << 20);
	printf("after freeing: cudaMalloc %d MiB -> %d (%s)\n", mib, (int)e, cudaGetErrorName(e));
	if (e == cudaSuccess)
		cudaFree(again);
	return 0;
}

static int graph()
{
	const int n = 1 << 16;
	float *x, *y;
	cudaStream_t s;
	if (check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 1;
	if (check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc")) return 1;
	if (check(cudaMalloc(&y, n * sizeof(float)), "cudaMalloc")) return 1;
	std::vector<float> hx(n, 1.0f), hy(n, 0.0f);
	cudaMemcpyAsync(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
	cudaMemcpyAsync(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
	cudaGraph_t g;
	cudaGraphExec_t ge;
	if (check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture")) return 1;
	for (int k = 0; k < 4; k++)
		axpy<<<(n + 255) / 256, 256, 0, s>>>(1.0f, x, y, n);
	if (check(cudaStreamEndCapture(s, &g), "end capture")) return 1;
	if (check(cudaGraphInstantiate(&ge, g, 0), "instantiate")) return 1;
	for (int k = 0; k < 3; k++)
		if (check(cudaGraphLaunch(ge, s), "graph launch")) return 1;
	int async_ok = 0;
	for (int k = 0; k < 4; k++) {
		void *p = nullptr;
		if (cudaMallocAsync(&p, 1 << 20, s) == cudaSuccess) {
			async_ok++;
			cudaFreeAsync(p, s);
		}
	}
	if (check(cudaStreamSynchronize(s), "stream sync")) return 1;
	cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += hy[i] != 12.0f; /* 3 graph launches x 4 captured axpy(1, x = 1) */
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaFree(x);
	cudaFree(y);
	cudaStreamDestroy(s);
	printf("graph captured_launches=4 graph_launches=3 async_allocs=%d wrong=%d\n", async_ok, bad);
	return async_ok != 4 || bad != 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "compute"))
		return compute();
	if (argc >= 4 && !strcmp(argv[1], "alloc"))
		return alloc(atoi(argv[2]), atoi(argv[3]));
	if (argc >= 2 && !strcmp(argv[1], "graph"))
		return graph();
	fprintf(stderr, "usage: app compute | alloc N MIB | graph\n");
	return 2;
}
