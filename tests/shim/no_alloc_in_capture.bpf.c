/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Refuses stream-ordered allocations on a stream that is being captured into a graph
 * (hdr.flags & GPUBPF_CTX_F_CAPTURING, which the shim sets from cuStreamIsCapturing because
 * this program reads hdr.flags). */
#include "gpubpf.h"

SEC("cuda/cuMemAllocAsync")
int no_alloc_in_capture(struct gpubpf_cuMemAllocAsync_entry *ctx)
{
	if (ctx->hdr.flags & GPUBPF_CTX_F_CAPTURING)
		return GPUBPF_CUDA_ERROR_NOT_SUPPORTED;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
