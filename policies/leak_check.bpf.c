/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * leak_check: keep every live allocation with its size, API, process, thread and time, and
 * credit it when it is freed; what a process never freed is still there after it exits:
 *
 *   gpubpf load leak_check.o
 *   gpubpf run -- ./app …
 *   gpubpf maps dump leak_live        # one entry per allocation never freed
 *   gpubpf maps dump leak_summary     # per process: allocs, frees, live bytes
 *
 * Programs (exit, result 0 only: a failed call allocated or freed nothing):
 *   cuMemAlloc, cuMemAllocPitch (pitch x Height), cuMemAllocManaged, cuMemAllocAsync,
 *   cuMemAllocFromPoolAsync                  device pointers, freed by cuMemFree and
 *                                            cuMemFreeAsync (when enqueued)
 *   cuMemAllocHost, cuMemHostAlloc           pinned host memory, freed by cuMemFreeHost
 *   cuMemCreate                              physical allocations, freed by cuMemRelease
 * Arrays and mipmapped arrays are not tracked.
 *
 * The call site: `site` is where the application called the driver, as `module+0xoffset`
 * (gpubpf_get_caller: the first frame outside the shim — the application's code, or the
 * library that called the driver, e.g. a dynamically linked cudart), for
 * `addr2line -f -e MODULE OFFSET`; with pid, tid, API and a CLOCK_MONOTONIC time.
 *
 * Knobs (`const volatile`, set with `--set`):
 *   min_size     track only allocations of at least this many bytes (default 0: all)
 *
 * Maps (pinned by name, so they outlive an unload and a reload):
 *   leak_live     hash (65536), { handle, pid, kind } -> struct leak_alloc { size, time_ns,
 *                 pid, tid, api_id, kind, site }; kind: 1 device pointer, 2 host pointer,
 *                 3 cuMemCreate handle. When full, new allocations are counted in
 *                 leak_summary.untracked instead.
 *   leak_summary  hash (4096), pid -> { allocs, frees, live_bytes, untracked }
 * Entries of exited processes stay until removed (`gpubpf maps delete leak_live --key …`,
 * or `gpubpf maps unpin` and a reload for a fresh start).
 */
#include "gpubpf.h"

/* Track only allocations of at least this many bytes. */
const volatile __u64 min_size = 0;

enum leak_kind {
	LEAK_DPTR = 1,   /* device (or managed) pointer */
	LEAK_HOST = 2,   /* pinned host pointer */
	LEAK_HANDLE = 3, /* CUmemGenericAllocationHandle */
};

struct leak_key {
	__u64 handle;
	__u32 pid;
	__u32 kind;
};

struct leak_alloc {
	__u64 size;
	__u64 time_ns;  /* CLOCK_MONOTONIC at the allocation's return */
	__u32 pid;
	__u32 tid;
	__u32 api_id;   /* GPUBPF_API_* of the allocating call */
	__u32 kind;
	char site[64];  /* the call site, `module+0xoffset` (empty when unknown) */
};

struct leak_summary {
	__u64 allocs;     /* tracked allocations */
	__u64 frees;      /* of which freed */
	__u64 live_bytes; /* bytes allocated and not freed */
	__u64 untracked;  /* allocations not recorded: leak_live was full */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct leak_key);
	__type(value, struct leak_alloc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} leak_live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct leak_summary);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} leak_summary SEC(".maps");

static __always_inline struct leak_summary *summary_of(__u32 pid)
{
	struct leak_summary *s = bpf_map_lookup_elem(&leak_summary, &pid);

	if (s)
		return s;
	struct leak_summary zero = {};
	bpf_map_update_elem(&leak_summary, &pid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&leak_summary, &pid);
}

static __always_inline void track(struct gpubpf_ctx_header *hdr, __u64 handle, __u64 size, __u32 kind)
{
	if (hdr->result != 0 || handle == 0 || size < min_size)
		return;
	struct leak_summary *s = summary_of(hdr->pid);
	struct leak_key key = { .handle = handle, .pid = hdr->pid, .kind = kind };
	struct leak_alloc a = {
		.size = size,
		.time_ns = bpf_ktime_get_ns(),
		.pid = hdr->pid,
		.tid = hdr->tid,
		.api_id = hdr->api_id,
		.kind = kind,
	};

	if (gpubpf_get_caller(a.site, sizeof(a.site)) < 0)
		a.site[0] = 0;

	if (bpf_map_update_elem(&leak_live, &key, &a, BPF_ANY) != 0) {
		if (s)
			__sync_fetch_and_add(&s->untracked, 1);
		return;
	}
	if (s) {
		__sync_fetch_and_add(&s->allocs, 1);
		__sync_fetch_and_add(&s->live_bytes, size);
	}
}

static __always_inline void untrack(struct gpubpf_ctx_header *hdr, __u64 handle, __u32 kind)
{
	if (hdr->result != 0)
		return;
	struct leak_key key = { .handle = handle, .pid = hdr->pid, .kind = kind };
	struct leak_alloc *a = bpf_map_lookup_elem(&leak_live, &key);

	if (!a)
		return; /* allocated before the policy was loaded, or not tracked */
	__u64 size = a->size;

	if (bpf_map_delete_elem(&leak_live, &key) != 0)
		return; /* another thread freed it first */
	struct leak_summary *s = bpf_map_lookup_elem(&leak_summary, &key.pid);

	if (s) {
		__sync_fetch_and_add(&s->frees, 1);
		__sync_fetch_and_sub(&s->live_bytes, size);
	}
}

GPUBPF_EXIT(cuMemAlloc, leak_alloc)
{
	track(&ctx->hdr, ctx->out.dptr, ctx->args.bytesize, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemAllocPitch, leak_pitch)
{
	__u64 pitch = ctx->out.pPitch, height = ctx->args.Height;
	__u64 max_h = pitch ? ~0ULL / pitch : ~0ULL;

	/* Keeps clang from turning the test into a 128-bit multiply BPF has no call for. */
	barrier_var(max_h);
	__u64 size = height > max_h ? ~0ULL : pitch * height;

	track(&ctx->hdr, ctx->out.dptr, size, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemAllocManaged, leak_managed)
{
	track(&ctx->hdr, ctx->out.dptr, ctx->args.bytesize, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemAllocAsync, leak_async)
{
	track(&ctx->hdr, ctx->out.dptr, ctx->args.bytesize, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemAllocFromPoolAsync, leak_pool)
{
	track(&ctx->hdr, ctx->out.dptr, ctx->args.bytesize, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemAllocHost, leak_host)
{
	track(&ctx->hdr, ctx->out.pp, ctx->args.bytesize, LEAK_HOST);
	return 0;
}
GPUBPF_EXIT(cuMemHostAlloc, leak_host_alloc)
{
	track(&ctx->hdr, ctx->out.pp, ctx->args.bytesize, LEAK_HOST);
	return 0;
}
GPUBPF_EXIT(cuMemCreate, leak_create)
{
	track(&ctx->hdr, ctx->out.handle, ctx->args.size, LEAK_HANDLE);
	return 0;
}

GPUBPF_EXIT(cuMemFree, leak_free) {
	untrack(&ctx->hdr, ctx->args.dptr, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemFreeAsync, leak_free_async)
{
	untrack(&ctx->hdr, ctx->args.dptr, LEAK_DPTR);
	return 0;
}
GPUBPF_EXIT(cuMemFreeHost, leak_free_host) {
	untrack(&ctx->hdr, ctx->args.p, LEAK_HOST);
	return 0;
}
GPUBPF_EXIT(cuMemRelease, leak_release)
{
	untrack(&ctx->hdr, ctx->args.handle, LEAK_HANDLE);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
