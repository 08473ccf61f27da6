/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * meminfo: make memory queries report the quota instead of the whole device.
 *
 *   gpubpf load quota.o --set limit_bytes=8GiB
 *   gpubpf load meminfo.o
 *
 * Frameworks size their caches from what the driver reports (PyTorch's
 * `torch.cuda.mem_get_info()`, TensorFlow's allocator, vLLM's gpu_memory_utilization): under a
 * quota they should see the quota.
 *
 * - cudaret/cuMemGetInfo (exit): `total` becomes the tightest limit that applies to the
 *   calling process (its own, its user's, its device's), `free` that limit minus what the
 *   bucket already holds (the smallest such headroom, never below 0) — and neither ever
 *   exceeds what the driver reported.
 * - cudaret/cuDeviceTotalMem (exit): `bytes` becomes the tightest limit, likewise.
 *
 * No knobs: it reads what quota.bpf.c keeps. Both objects include `quota.h`, whose maps are
 * pinned by name, so they bind the same registry maps whichever is loaded first: the usage
 * counters (`proc_usage`, `user_usage`, `dev_usage`) and `quota_limits`, where quota's entry
 * programs on these two calls publish the limits it was loaded with just before the driver
 * is called. Without quota loaded the limits read 0 and the driver's values pass unchanged.
 */
#include "gpubpf.h"
#include "quota.h"

struct view {
	__u64 total;
	__u64 free;
};

/* Narrows `v` to `limit` (0: none) for a bucket holding `used` bytes. */
static __always_inline void narrow(struct view *v, __u64 limit, __u64 used)
{
	if (limit == 0)
		return;
	if (limit < v->total)
		v->total = limit;
	__u64 headroom = used < limit ? limit - used : 0;

	if (headroom < v->free)
		v->free = headroom;
}

static __always_inline __u64 used_by(void *map, __u32 id)
{
	struct usage *u = bpf_map_lookup_elem(map, &id);

	return u ? u->bytes : 0;
}

/* Applies every limit that binds process `pid` of user `uid` on device `dev` (-1: none). */
static __noinline int apply(struct view *v, __u32 pid, __s32 dev)
{
	__u32 zero = 0;
	struct quota_limits *l = bpf_map_lookup_elem(&quota_limits, &zero);

	if (!l)
		return 0;
	__u32 uid = (__u32)bpf_get_current_uid_gid();

	narrow(v, l->process, used_by(&proc_usage, pid));
	narrow(v, l->user, used_by(&user_usage, uid));
	if (dev >= 0)
		narrow(v, l->device, used_by(&dev_usage, (__u32)dev));
	if (v->free > v->total)
		v->free = v->total;
	return 0;
}

GPUBPF_EXIT(cuMemGetInfo, meminfo_getinfo)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	struct view v = { .total = ctx->out.total, .free = ctx->out.free };

	apply(&v, ctx->hdr.pid, ctx->hdr.device);
	ctx->out.total = v.total;
	ctx->out.free = v.free;
	return 0;
}

GPUBPF_EXIT(cuDeviceTotalMem, meminfo_totalmem)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	struct view v = { .total = ctx->out.bytes, .free = ctx->out.bytes };

	apply(&v, ctx->hdr.pid, (__s32)ctx->args.dev);
	ctx->out.bytes = v.total;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
