/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * What the shim puts in the ctx, recorded for the end-to-end tests:
 * - cuda/cuLaunchKernel: counts launches, launches through a per-thread-stream symbol
 *   (`hdr.flags`), and records `hdr.variant`, `hdr.device`, `hdr.pid`, `launch.block_x` and
 *   `args.blockDimX` of the last launch;
 * - cudaret/cuMemGetInfo: overrides `out.total` (written back to the application).
 */
#include "gpubpf.h"

/* 0 launches, 1 per-thread launches, 2 variant, 3 device + 1, 4 pid, 5 launch.block_x,
 * 6 args.blockDimX, 7 cuMemGetInfo exits with valid out-values */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} probe SEC(".maps");

static __always_inline void put(__u32 k, __u64 v)
{
	__u64 *slot = bpf_map_lookup_elem(&probe, &k);

	if (slot)
		*slot = v;
}

static __always_inline void add(__u32 k)
{
	__u64 *slot = bpf_map_lookup_elem(&probe, &k);

	if (slot)
		__sync_fetch_and_add(slot, 1);
}

SEC("cuda/cuLaunchKernel")
int probe_launch(struct gpubpf_cuLaunchKernel_entry *ctx)
{
	add(0);
	if (ctx->hdr.flags & GPUBPF_CTX_F_PER_THREAD_STREAM)
		add(1);
	put(2, ctx->hdr.variant);
	put(3, (__u64)(ctx->hdr.device + 1));
	put(4, ctx->hdr.pid);
	put(5, ctx->launch.block_x);
	put(6, ctx->args.blockDimX);
	return 0;
}

SEC("cudaret/cuMemGetInfo")
int probe_getinfo(struct gpubpf_cuMemGetInfo_exit *ctx)
{
	if (ctx->hdr.flags & GPUBPF_CTX_F_OUT_VALID) {
		add(7);
		ctx->out.total = 12345;
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
