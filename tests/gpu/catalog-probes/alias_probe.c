/*
 * alias_probe.c: which driver entry points does each CUDA runtime API call reach?
 *
 * Subscribes to CUPTI's runtime- and driver-API callbacks, then calls the runtime functions
 * that gpubpf maps to driver attach points (crates/runtime/src/attach/aliases.rs). Every
 * driver call made while a runtime call is in progress is printed as
 * "<runtime function>\t<driver function>" to the file named by argv[1]. Host-only C: the
 * kernel is PTX loaded with cudaLibraryLoadData, so no nvcc is needed. See run.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cupti.h>

static FILE *out;
static __thread const char *current_runtime;

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			    const void *data)
{
	const CUpti_CallbackData *d = data;
	(void)ud;
	(void)cbid;
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API) {
		current_runtime = d->callbackSite == CUPTI_API_ENTER ? d->functionName : NULL;
		if (d->callbackSite == CUPTI_API_ENTER)
			fprintf(out, "%s\t(runtime)\n", d->functionName);
	} else if (dom == CUPTI_CB_DOMAIN_DRIVER_API && d->callbackSite == CUPTI_API_ENTER) {
		fprintf(out, "%s\t%s\n", current_runtime ? current_runtime : "-", d->functionName);
	}
}

static int failures;
#define TRY(call)                                                                    \
	do {                                                                         \
		cudaError_t e_ = (call);                                             \
		if (e_ != cudaSuccess) {                                             \
			fprintf(stderr, "%s:%d %s -> %d (%s)\n", __FILE__, __LINE__, \
				#call, (int)e_, cudaGetErrorName(e_));               \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
			  ".visible .entry k(.param .u64 p) { ret; }\n";

static void CUDART_CB host_fn(void *p)
{
	(void)p;
}

int main(int argc, char **argv)
{
	CUpti_SubscriberHandle sub;
	const size_t n = 1 << 20;
	void *d1, *d2, *h1, *h2, *m, *pd, *hreg;
	size_t pitch, free_b, total_b;
	cudaStream_t s, s2, s3;
	cudaEvent_t e1, e2;
	float ms;
	int dev, count, attr, ver;
	size_t lim;

	out = fopen(argc > 1 ? argv[1] : "alias_probe.tsv", "w");
	if (!out)
		return 2;
	if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) != CUPTI_SUCCESS ||
	    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS ||
	    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) {
		fprintf(stderr, "cupti subscribe failed\n");
		return 3;
	}

	/* Devices and contexts. */
	TRY(cudaGetDeviceCount(&count));
	TRY(cudaSetDeviceFlags(cudaDeviceScheduleAuto));
	TRY(cudaSetDevice(0));
	TRY(cudaGetDevice(&dev));
	TRY(cudaDeviceGetAttribute(&attr, cudaDevAttrMultiProcessorCount, 0));
	TRY(cudaDriverGetVersion(&ver));
	TRY(cudaDeviceSetLimit(cudaLimitStackSize, 2048));
	TRY(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
	TRY(cudaMemGetInfo(&free_b, &total_b));

	/* Allocation. */
	TRY(cudaMalloc(&d1, n));
	TRY(cudaMalloc(&d2, n));
	TRY(cudaMallocPitch(&pd, &pitch, 1024, 64));
	TRY(cudaMallocManaged(&m, n, cudaMemAttachGlobal));
	TRY(cudaMallocHost(&h1, n));
	TRY(cudaHostAlloc(&h2, n, cudaHostAllocDefault));
	hreg = aligned_alloc(4096, n);
	TRY(cudaHostRegister(hreg, n, cudaHostRegisterDefault));
	{
		struct cudaChannelFormatDesc desc =
			cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
		struct cudaExtent ext = { 64, 64, 4 };
		struct cudaPitchedPtr pp;
		cudaArray_t a, a3;
		cudaMipmappedArray_t mip;
		TRY(cudaMallocArray(&a, &desc, 64, 64, 0));
		TRY(cudaMalloc3DArray(&a3, &desc, ext, 0));
		TRY(cudaMallocMipmappedArray(&mip, &desc, ext, 2, 0));
		TRY(cudaMalloc3D(&pp, ext));
		TRY(cudaMemset3D(pp, 0, ext));
		TRY(cudaFreeArray(a));
		TRY(cudaFreeArray(a3));
		TRY(cudaFreeMipmappedArray(mip));
		TRY(cudaFree(pp.ptr));
	}

	/* Streams and events. */
	TRY(cudaStreamCreate(&s));
	TRY(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	TRY(cudaStreamCreateWithPriority(&s3, cudaStreamNonBlocking, -1));
	TRY(cudaEventCreate(&e1));
	TRY(cudaEventCreateWithFlags(&e2, cudaEventDefault));

	/* Copies and sets. */
	TRY(cudaMemcpy(d1, h1, n, cudaMemcpyHostToDevice));
	TRY(cudaMemcpy(h1, d1, n, cudaMemcpyDeviceToHost));
	TRY(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
	TRY(cudaMemcpy(d2, d1, n, cudaMemcpyDefault));
	TRY(cudaMemcpyAsync(d1, h1, n, cudaMemcpyHostToDevice, s));
	TRY(cudaMemcpyAsync(h1, d1, n, cudaMemcpyDeviceToHost, s));
	TRY(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, s));
	TRY(cudaMemcpy2D(pd, pitch, h1, 1024, 1024, 64, cudaMemcpyHostToDevice));
	TRY(cudaMemcpy2DAsync(pd, pitch, h1, 1024, 1024, 64, cudaMemcpyHostToDevice, s));
	TRY(cudaMemcpyPeer(d2, 0, d1, 0, n));
	TRY(cudaMemcpyPeerAsync(d2, 0, d1, 0, n, s));
	TRY(cudaMemset(d1, 0, n));
	TRY(cudaMemsetAsync(d1, 0, n, s));
	TRY(cudaMemset2D(pd, pitch, 0, 1024, 64));
	TRY(cudaMemset2DAsync(pd, pitch, 0, 1024, 64, s));
	{
		struct cudaMemLocation loc = { cudaMemLocationTypeDevice, 0 };
		TRY(cudaMemPrefetchAsync(m, n, loc, 0, s));
		TRY(cudaMemAdvise(m, n, cudaMemAdviseSetReadMostly, loc));
	}

	/* Stream-ordered allocation and pools. */
	{
		void *a1, *a2;
		cudaMemPool_t pool;
		struct cudaMemPoolProps props;
		memset(&props, 0, sizeof(props));
		props.allocType = cudaMemAllocationTypePinned;
		props.location.type = cudaMemLocationTypeDevice;
		props.location.id = 0;
		TRY(cudaMallocAsync(&a1, n, s));
		TRY(cudaFreeAsync(a1, s));
		TRY(cudaMemPoolCreate(&pool, &props));
		TRY(cudaMallocFromPoolAsync(&a2, n, pool, s));
		TRY(cudaFreeAsync(a2, s));
		TRY(cudaStreamSynchronize(s));
		TRY(cudaMemPoolTrimTo(pool, 0));
		TRY(cudaMemPoolDestroy(pool));
	}

	/* Launches. */
	{
		cudaLibrary_t lib;
		cudaKernel_t k;
		void *arg = d1;
		void *args[] = { &arg };
		dim3 grid = { 1, 1, 1 }, block = { 32, 1, 1 };
		cudaLaunchConfig_t cfg;
		struct cudaFuncAttributes fa;
		cudaGraph_t g;
		cudaGraphExec_t ge;
		enum cudaStreamCaptureStatus cs;
		TRY(cudaLibraryLoadData(&lib, PTX, NULL, NULL, 0, NULL, NULL, 0));
		TRY(cudaLibraryGetKernel(&k, lib, "k"));
		TRY(cudaFuncGetAttributes(&fa, (const void *)k));
		TRY(cudaLaunchKernel((const void *)k, grid, block, args, 0, s));
		memset(&cfg, 0, sizeof(cfg));
		cfg.gridDim = grid;
		cfg.blockDim = block;
		cfg.stream = s;
		TRY(cudaLaunchKernelExC(&cfg, (const void *)k, args));
		TRY(cudaLaunchCooperativeKernel((const void *)k, grid, block, args, 0, s));
		TRY(cudaLaunchHostFunc(s, host_fn, NULL));
		TRY(cudaEventRecord(e1, s));
		TRY(cudaEventRecordWithFlags(e2, s, 0));
		TRY(cudaStreamWaitEvent(s2, e1, 0));
		TRY(cudaStreamQuery(s2));
		TRY(cudaEventSynchronize(e2));
		TRY(cudaEventElapsedTime(&ms, e1, e2));

		TRY(cudaStreamBeginCapture(s3, cudaStreamCaptureModeGlobal));
		TRY(cudaStreamIsCapturing(s3, &cs));
		TRY(cudaLaunchKernel((const void *)k, grid, block, args, 0, s3));
		TRY(cudaStreamEndCapture(s3, &g));
		TRY(cudaGraphInstantiate(&ge, g, 0));
		TRY(cudaGraphUpload(ge, s3));
		TRY(cudaGraphLaunch(ge, s3));
		TRY(cudaStreamSynchronize(s3));
		TRY(cudaGraphExecDestroy(ge));
		TRY(cudaGraphDestroy(g));
		TRY(cudaLibraryUnload(lib));
	}

	/* Reporting, IPC, pointer attributes. */
	{
		cudaIpcMemHandle_t ipc;
		struct cudaPointerAttributes pa;
		TRY(cudaIpcGetMemHandle(&ipc, d1));
		TRY(cudaPointerGetAttributes(&pa, d1));
	}

	/* Tear-down. */
	TRY(cudaDeviceSynchronize());
	TRY(cudaEventDestroy(e1));
	TRY(cudaEventDestroy(e2));
	TRY(cudaStreamDestroy(s));
	TRY(cudaStreamDestroy(s2));
	TRY(cudaStreamDestroy(s3));
	TRY(cudaHostUnregister(hreg));
	free(hreg);
	TRY(cudaFreeHost(h1));
	TRY(cudaFreeHost(h2));
	TRY(cudaFree(pd));
	TRY(cudaFree(m));
	TRY(cudaFree(d1));
	TRY(cudaFree(d2));
	TRY(cudaDeviceReset());

	cuptiUnsubscribe(sub);
	fclose(out);
	fprintf(stderr, "alias_probe: %d failed calls\n", failures);
	return 0;
}
