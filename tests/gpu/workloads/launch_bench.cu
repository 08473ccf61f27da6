// Empty-kernel launch loop for the shim's launch overhead (issue #13 point 5). An ordinary
// nvcc program (static cudart): WARMUP launches, then ROUNDS timed loops of N launches of an
// empty kernel, each timed on the host clock from the first launch to the end of
// cudaDeviceSynchronize. Prints the median ns per launch and the total number of launches
// (so that a launch-counting policy can be checked against it).
//
//   launch_bench [N=200000] [ROUNDS=3] [WARMUP=20000] [SYNC_DIR]
//   -> launch_ns median=… rounds=…,…,… launches=… errors=0
//
// With SYNC_DIR, after round r it creates SYNC_DIR/done-r and waits for SYNC_DIR/go-r, so
// that launch_toggle.sh can change the loaded policy between rounds of one process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include <cuda_runtime.h>

__global__ void empty_kernel() {}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	int warmup = argc > 3 ? atoi(argv[3]) : 20000;
	if (n <= 0 || rounds <= 0 || warmup < 0) {
		fprintf(stderr, "usage: launch_bench [N] [ROUNDS] [WARMUP]\n");
		return 2;
	}
	cudaError_t e = cudaFree(0);
	if (e != cudaSuccess) {
		printf("error init: %d (%s)\n", (int)e, cudaGetErrorName(e));
		return 1;
	}
	long long launches = 0;
	for (int i = 0; i < warmup; i++, launches++)
		empty_kernel<<<1, 1>>>();
	cudaDeviceSynchronize();
	std::vector<double> ns;
	for (int r = 0; r < rounds; r++) {
		auto t0 = std::chrono::steady_clock::now();
		for (int i = 0; i < n; i++)
			empty_kernel<<<1, 1>>>();
		cudaDeviceSynchronize();
		auto t1 = std::chrono::steady_clock::now();
		launches += n;
		ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
		if (argc > 4) {
			std::string dir = argv[4];
			std::string done = dir + "/done-" + std::to_string(r);
			std::string go = dir + "/go-" + std::to_string(r);
			if (FILE *f = fopen(done.c_str(), "w"))
				fclose(f);
			for (int i = 0; access(go.c_str(), F_OK) != 0; i++) {
				if (i > 60000) {
					printf("error: no %s\n", go.c_str());
					return 1;
				}
				usleep(1000);
			}
			// Untimed launches after a change: a changed chain starts on the interpreter
			// and the shim's watcher compiles it within milliseconds (docs/shim.md,
			// "Native code as points are called"); the next round times native code.
			for (int i = 0; i < warmup / 10; i++, launches++)
				empty_kernel<<<1, 1>>>();
			cudaDeviceSynchronize();
		}
	}
	e = cudaGetLastError();
	std::vector<double> sorted = ns;
	std::sort(sorted.begin(), sorted.end());
	printf("launch_ns median=%.1f rounds=", sorted[sorted.size() / 2]);
	for (size_t i = 0; i < ns.size(); i++)
		printf("%s%.1f", i ? "," : "", ns[i]);
	printf(" launches=%lld errors=%d\n", launches, (int)e);
	return e != cudaSuccess;
}
