/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * alloc_log: one `bpf_printk` line per device allocation and free, with its size, address
 * and result (one of the seeds' recipes: what does this framework allocate?).
 *
 *   gpubpf load alloc_log.o
 *   gpubpf trace -f
 *
 * Programs (exit): cuMemAlloc, cuMemAllocManaged, cuMemAllocAsync (size, address, result)
 * and cuMemFree, cuMemFreeAsync (address, result). Lines read
 * `alloc: cuMemAlloc 1048576 bytes -> 0x7f…000 (0)` and `alloc: cuMemFree 0x7f…000 (0)`;
 * a failed allocation shows address 0 and its CUresult. For sizes per call site and what
 * was never freed see leak_check.bpf.c; for counts and latencies, trace.bpf.c.
 */
#include "gpubpf.h"

/* Log failed calls only. */
const volatile bool errors_only = false;

GPUBPF_EXIT(cuMemAlloc, log_alloc)
{
	if (!errors_only || ctx->hdr.result)
		bpf_printk("alloc: cuMemAlloc %llu bytes -> 0x%llx (%u)", ctx->args.bytesize,
			   ctx->out.dptr, ctx->hdr.result);
	return 0;
}

GPUBPF_EXIT(cuMemAllocManaged, log_managed)
{
	if (!errors_only || ctx->hdr.result)
		bpf_printk("alloc: cuMemAllocManaged %llu bytes -> 0x%llx (%u)",
			   ctx->args.bytesize, ctx->out.dptr, ctx->hdr.result);
	return 0;
}

GPUBPF_EXIT(cuMemAllocAsync, log_async)
{
	if (!errors_only || ctx->hdr.result)
		bpf_printk("alloc: cuMemAllocAsync %llu bytes -> 0x%llx (%u)", ctx->args.bytesize,
			   ctx->out.dptr, ctx->hdr.result);
	return 0;
}

GPUBPF_EXIT(cuMemFree, log_free)
{
	if (!errors_only || ctx->hdr.result)
		bpf_printk("alloc: cuMemFree 0x%llx (%u)", ctx->args.dptr, ctx->hdr.result);
	return 0;
}

GPUBPF_EXIT(cuMemFreeAsync, log_free_async)
{
	if (!errors_only || ctx->hdr.result)
		bpf_printk("alloc: cuMemFreeAsync 0x%llx (%u)", ctx->args.dptr, ctx->hdr.result);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
