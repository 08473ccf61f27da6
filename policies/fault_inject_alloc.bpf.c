/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * fault_inject_alloc: fault_inject.bpf.c restricted to allocations whose size lies in
 * [min_size, max_size]; calls outside the range proceed and are not counted.
 *
 *   gpubpf load fault_inject_alloc.o --attach cuMemAlloc,cuMemAllocAsync \
 *       --set min_size=1GiB --set every=1
 *
 * One program, `fault_inject_alloc`, in a section without an API, for the allocation APIs
 * whose second argument is the size in bytes: cuMemAlloc, cuMemAllocManaged,
 * cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate, cuMemAllocHost, cuMemHostAlloc
 * (on another API it refuses nothing; on one whose ctx is shorter the verifier rejects it).
 *
 * Knobs: those of fault_inject.bpf.c (error_code, nth, every, prob_ppm, log_faults; "the
 * Nth call" counts only calls in the range), and
 *   min_size    smallest size in bytes that may fail (default 0)
 *   max_size    largest size in bytes that may fail (default: no bound)
 *
 * Map (pinned by name, shared with fault_inject.bpf.c): fault_counts.
 */
#include "gpubpf.h"
#include "fault_inject.h"

/* Smallest allocation, in bytes, that may fail. */
const volatile __u64 min_size = 0;
/* Largest allocation, in bytes, that may fail. */
const volatile __u64 max_size = ~0ULL;

/* The ctx of an allocation API: header, then the out-pointer, then the size. */
struct alloc_ctx {
	struct gpubpf_ctx_header hdr;
	__u64 out_ptr;
	__u64 size;
};

static __always_inline int is_sized_alloc(__u32 api)
{
	return api == GPUBPF_API_cuMemAlloc || api == GPUBPF_API_cuMemAllocManaged ||
	       api == GPUBPF_API_cuMemAllocAsync || api == GPUBPF_API_cuMemAllocFromPoolAsync ||
	       api == GPUBPF_API_cuMemCreate || api == GPUBPF_API_cuMemAllocHost ||
	       api == GPUBPF_API_cuMemHostAlloc;
}

SEC("cuda")
int fault_inject_alloc(struct alloc_ctx *ctx)
{
	if (!is_sized_alloc(ctx->hdr.api_id))
		return 0;
	__u64 size = ctx->size;

	if (size < min_size || size > max_size)
		return 0;
	return fault_decide(&ctx->hdr) ? fault_error() : 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
