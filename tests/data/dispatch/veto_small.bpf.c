/* Dispatch test policy: vetoes every cuMemAlloc with 5; loaded with a high priority number
 * (runs after veto_big). Its exit program turns verdict 5 back into success, and halves the
 * free memory cuMemGetInfo reports. */
#include "gpubpf.h"

GPUBPF_ENTRY(cuMemAlloc, veto_all)
{
	return 5;
}

GPUBPF_EXIT(cuMemAlloc, forgive)
{
	if (ctx->hdr.result == 5)
		ctx->hdr.result = CUDA_SUCCESS;
	return 0;
}

GPUBPF_EXIT(cuMemGetInfo, halve_free)
{
	if (ctx->hdr.result == CUDA_SUCCESS)
		ctx->out.free = ctx->out.free / 2;
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
