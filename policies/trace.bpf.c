/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * trace: count calls and measure latency of a few driver functions, and stream one event per
 * call through a ring buffer.
 *
 *   gpubpf load trace.o --set min_latency_ns=10000
 *
 * Each traced API has an entry program (records the start time per thread and API) and an
 * exit program (computes the latency, updates per-API statistics with atomics and emits an
 * event when the latency reaches `min_latency_ns`).
 */
#include "gpubpf.h"

/* Only emit events for calls at least this slow (statistics count every call). */
const volatile __u64 min_latency_ns = 0;
/* Emit ring-buffer events at all. */
const volatile bool emit_events = true;

struct start_key {
	__u32 tid;
	__u32 api_id;
};

struct api_stats {
	__u64 calls;
	__u64 errors;
	__u64 total_ns;
	__u64 max_ns;
};

struct event {
	__u64 timestamp_ns;
	__u64 latency_ns;
	__u64 arg0;      /* first argument (size, pointer or function handle) */
	__u32 api_id;
	__u32 pid;
	__u32 tid;
	__u32 result;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct start_key);
	__type(value, __u64);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct api_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Dropped events (ring buffer full). */
__u64 dropped_events = 0;

static __always_inline int on_entry(struct gpubpf_ctx_header *hdr)
{
	struct start_key key = { .tid = hdr->tid, .api_id = hdr->api_id };
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&start, &key, &now, BPF_ANY);
	return 0;
}

/* Raises *max to at least v (bounded compare-and-swap retries). */
static __always_inline void atomic_max(__u64 *max, __u64 v)
{
	for (int i = 0; i < 4; i++) {
		__u64 cur = *max;
		if (cur >= v)
			return;
		if (__sync_val_compare_and_swap(max, cur, v) == cur)
			return;
	}
}

static __noinline int on_exit(struct gpubpf_ctx_header *hdr, __u64 arg0)
{
	struct start_key key = { .tid = hdr->tid, .api_id = hdr->api_id };
	__u64 *t0 = bpf_map_lookup_elem(&start, &key);
	__u64 now = bpf_ktime_get_ns();
	__u32 api = hdr->api_id;

	if (!t0)
		return 0; /* entry ran before the policy was loaded */
	__u64 latency = now - *t0;
	bpf_map_delete_elem(&start, &key);

	struct api_stats *s = bpf_map_lookup_elem(&stats, &api);
	if (!s) {
		struct api_stats zero = {};
		bpf_map_update_elem(&stats, &api, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, &api);
		if (!s)
			return 0;
	}
	__sync_fetch_and_add(&s->calls, 1);
	if (hdr->result != 0)
		__sync_fetch_and_add(&s->errors, 1);
	__sync_fetch_and_add(&s->total_ns, latency);
	atomic_max(&s->max_ns, latency);

	if (!emit_events || latency < min_latency_ns)
		return 0;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&dropped_events, 1);
		return 0;
	}
	e->timestamp_ns = now;
	e->latency_ns = latency;
	e->arg0 = arg0;
	e->api_id = api;
	e->pid = hdr->pid;
	e->tid = hdr->tid;
	e->result = hdr->result;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

GPUBPF_ENTRY(cuMemAlloc, trace_alloc) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuMemAlloc, trace_alloc_exit) { return on_exit(&ctx->hdr, ctx->args.bytesize); }

GPUBPF_ENTRY(cuMemFree, trace_free) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuMemFree, trace_free_exit) { return on_exit(&ctx->hdr, ctx->args.dptr); }

GPUBPF_ENTRY(cuLaunchKernel, trace_launch) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuLaunchKernel, trace_launch_exit) { return on_exit(&ctx->hdr, ctx->args.f); }

/* Written without the macro, as a plain libbpf-style section. */
SEC("cuda/cuCtxSynchronize")
int trace_sync(struct gpubpf_cuCtxSynchronize_entry *ctx)
{
	return on_entry(&ctx->hdr);
}

SEC("cudaret/cuCtxSynchronize")
int trace_sync_exit(struct gpubpf_cuCtxSynchronize_exit *ctx)
{
	return on_exit(&ctx->hdr, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
