/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * trace: count calls and measure latency of a few driver functions, and stream one event per
 * call through a ring buffer.
 *
 *   gpubpf load trace.o --set min_latency_ns=10000
 *
 * Each traced API has an entry program (records the start time in the thread's slot) and an
 * exit program (computes the latency, updates per-API statistics and the log2 latency
 * histogram with atomics, and emits an event when the latency reaches `min_latency_ns`).
 * The start times live in an array indexed by thread id, so recording one takes no lock
 * (a hash map's update takes its bucket's lock on every call). A call whose start is not
 * in its slot is not counted: the policy was loaded while it was in flight, a call nested
 * in its driver call on the same thread replaced it, or another live thread whose id is
 * equal modulo START_SLOTS did.
 *
 *   gpubpf maps dump trace.stats          calls, errors, total and max latency per API
 *   gpubpf maps dump trace.latency_hist   calls per API and latency bucket: bucket b counts
 *                                         latencies in [2^b, 2^(b+1)) ns (0 also in 0)
 *   gpubpf events trace.events [-f]       one event per call (kernel name for launches)
 */
#include "gpubpf.h"

/* Only emit events for calls at least this slow (statistics count every call). */
const volatile __u64 min_latency_ns = 0;
/* Emit ring-buffer events at all. */
const volatile bool emit_events = true;

/* Threads' slots in `start` (a power of two: the slot is tid modulo this). */
#define START_SLOTS 65536

struct start_slot {
	__u32 tid;    /* whose start this is (0: none) */
	__u32 api_id; /* of which call */
	__u64 t0;     /* bpf_ktime_get_ns() at entry */
};

struct api_stats {
	__u64 calls;
	__u64 errors;
	__u64 total_ns;
	__u64 max_ns;
};

#define KERNEL_NAME_LEN 64

struct event {
	__u64 timestamp_ns;
	__u64 latency_ns;
	__u64 arg0;      /* first argument (size, pointer or function handle) */
	__u32 api_id;
	__u32 pid;
	__u32 tid;
	__u32 result;
	char kernel[KERNEL_NAME_LEN]; /* launches: the kernel's name, else empty */
};

/* Puts `struct event` into the object's BTF (clang leaves out types only used inside
 * functions), where `gpubpf events` finds it to decode the ring's records. */
const struct event *event_type __attribute__((unused));

struct hist_key {
	__u32 api_id;
	__u32 bucket; /* floor(log2(latency_ns)) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, START_SLOTS);
	__type(key, __u32);
	__type(value, struct start_slot);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct api_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hist_key);
	__type(value, __u64);
} latency_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

static __always_inline int on_entry(struct gpubpf_ctx_header *hdr)
{
	__u32 slot = hdr->tid & (START_SLOTS - 1);
	struct start_slot *s = bpf_map_lookup_elem(&start, &slot);

	if (!s)
		return 0;
	s->tid = hdr->tid;
	s->api_id = hdr->api_id;
	s->t0 = bpf_ktime_get_ns();
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

/* Bit position -> floor(log2) for de Bruijn multiplication (Kim Walisch's table). */
static const __u8 log2_table[64] = {
	0,  47, 1,  56, 48, 27, 2,  60, 57, 49, 41, 37, 28, 16, 3,  61,
	54, 58, 35, 52, 50, 42, 21, 44, 38, 32, 29, 23, 17, 11, 4,  62,
	46, 55, 26, 59, 40, 36, 15, 53, 34, 51, 20, 43, 31, 22, 10, 45,
	25, 39, 14, 33, 19, 30, 9,  24, 13, 18, 8,  12, 7,  6,  5,  63,
};

/* floor(log2(v)), 0 for v <= 1: no branch, so the verifier walks it once. */
static __always_inline __u32 log2_u64(__u64 v)
{
	v |= v >> 1;
	v |= v >> 2;
	v |= v >> 4;
	v |= v >> 8;
	v |= v >> 16;
	v |= v >> 32;
	return log2_table[(v * 0x03f79d71b4cb0a89ULL) >> 58];
}

static __always_inline void count_latency(__u32 api, __u64 latency)
{
	struct hist_key k = { .api_id = api, .bucket = log2_u64(latency) };
	__u64 *n = bpf_map_lookup_elem(&latency_hist, &k);

	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	__u64 one = 1;

	/* Another thread may have created it meanwhile: then add to its count. */
	if (bpf_map_update_elem(&latency_hist, &k, &one, BPF_NOEXIST) != 0) {
		n = bpf_map_lookup_elem(&latency_hist, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
}

/* `func`: the launched CUfunction for launches (its name goes into the event), else 0. */
static __noinline int on_exit(struct gpubpf_ctx_header *hdr, __u64 arg0, __u64 func)
{
	__u32 slot = hdr->tid & (START_SLOTS - 1);
	struct start_slot *st = bpf_map_lookup_elem(&start, &slot);
	__u64 now = bpf_ktime_get_ns();
	__u32 api = hdr->api_id;

	/* Not this call's start: see the top of the file. */
	if (!st || st->tid != hdr->tid || st->api_id != api || st->t0 == 0)
		return 0;
	__u64 latency = now - st->t0;
	st->t0 = 0;

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
	count_latency(api, latency);

	if (!emit_events || latency < min_latency_ns)
		return 0;
	/* A full ring counts the record it drops itself (`gpubpf maps show trace.events`). */
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->timestamp_ns = now;
	e->latency_ns = latency;
	e->arg0 = arg0;
	e->api_id = api;
	e->pid = hdr->pid;
	e->tid = hdr->tid;
	e->result = hdr->result;
	e->kernel[0] = 0;
	if (func && gpubpf_get_kernel_name(func, e->kernel, sizeof(e->kernel)) < 0)
		e->kernel[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

GPUBPF_ENTRY(cuMemAlloc, trace_alloc) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuMemAlloc, trace_alloc_exit) { return on_exit(&ctx->hdr, ctx->args.bytesize, 0); }

GPUBPF_ENTRY(cuMemFree, trace_free) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuMemFree, trace_free_exit) { return on_exit(&ctx->hdr, ctx->args.dptr, 0); }

GPUBPF_ENTRY(cuLaunchKernel, trace_launch) { return on_entry(&ctx->hdr); }
GPUBPF_EXIT(cuLaunchKernel, trace_launch_exit) { return on_exit(&ctx->hdr, ctx->args.f, ctx->args.f); }

/* Written without the macro, as a plain libbpf-style section. */
SEC("cuda/cuCtxSynchronize")
int trace_sync(struct gpubpf_cuCtxSynchronize_entry *ctx)
{
	return on_entry(&ctx->hdr);
}

SEC("cudaret/cuCtxSynchronize")
int trace_sync_exit(struct gpubpf_cuCtxSynchronize_exit *ctx)
{
	return on_exit(&ctx->hdr, 0, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
