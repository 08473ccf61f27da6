/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * launch_limit: a token bucket on kernel launches per process: `rate` launches a second on
 * average, bursts of up to `burst`. A launch that finds the bucket empty is delayed (the
 * calling thread sleeps with gpubpf_delay_ns) until its token is due, never failed; a
 * launch on a stream that is being captured into a graph (hdr.flags has
 * GPUBPF_CTX_F_CAPTURING) is never delayed: capture records work, it does not run it, and
 * a sleep there would only slow the capture down.
 *
 *   gpubpf load launch_limit.o --set rate=1000 --set burst=50
 *
 * Programs: cuLaunchKernel, cuLaunchCooperativeKernel, cuLaunchKernelEx (entry).
 *
 * Knobs (`const volatile`, set with `--set`):
 *   rate          launches per second (default 1000; 0: no limit)
 *   burst         bucket size in launches (default 10; at least 1)
 *   max_delay_ns  longest one launch waits (default 10 ms; gpubpf_delay_ns never sleeps
 *                 more than 100 ms a call); a launch whose token is due later still waits
 *                 only this long, and the bucket stays empty for the next one
 *
 * Maps (pinned by name):
 *   launch_bucket  hash, pid -> { credit (token-nanoseconds: 1e9 is one token), last_ns }
 *   launch_stats   hash, pid -> { launches, delayed, delay_ns, capture_skips }
 * The bucket of a process is read and written without a lock: threads launching at the
 * same moment may both take the last token (the rate is approximate under contention).
 */
#include "gpubpf.h"

/* Launches per second (0: no limit). */
const volatile __u64 rate = 1000;
/* Bucket size in launches. */
const volatile __u64 burst = 10;
/* Longest one launch waits, in nanoseconds. */
const volatile __u64 max_delay_ns = 10000000;

#define NS_PER_S 1000000000ULL

struct bucket {
	__u64 credit;  /* token-nanoseconds: NS_PER_S is one launch */
	__u64 last_ns; /* when credit was last brought up to date */
};

struct launch_stats {
	__u64 launches;      /* launches seen */
	__u64 delayed;       /* of which delayed */
	__u64 delay_ns;      /* total delay */
	__u64 capture_skips; /* launches that found the bucket empty during a capture */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} launch_bucket SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct launch_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} launch_stats SEC(".maps");

static __always_inline int limit(struct gpubpf_ctx_header *hdr)
{
	__u64 r = rate, cap_tokens = burst ? burst : 1;
	__u32 pid = hdr->pid;

	if (r == 0)
		return 0;
	if (r > NS_PER_S)
		r = NS_PER_S; /* more than one launch a nanosecond: no limit to speak of */
	struct launch_stats *st = bpf_map_lookup_elem(&launch_stats, &pid);

	if (!st) {
		struct launch_stats zero = {};

		bpf_map_update_elem(&launch_stats, &pid, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&launch_stats, &pid);
		if (!st)
			return 0;
	}
	__sync_fetch_and_add(&st->launches, 1);

	__u64 now = bpf_ktime_get_ns();
	__u64 cap = cap_tokens > ~0ULL / NS_PER_S ? ~0ULL : cap_tokens * NS_PER_S;
	struct bucket *b = bpf_map_lookup_elem(&launch_bucket, &pid);

	if (!b) {
		/* A new process starts with a full bucket. */
		struct bucket full = { .credit = cap, .last_ns = now };

		bpf_map_update_elem(&launch_bucket, &pid, &full, BPF_NOEXIST);
		b = bpf_map_lookup_elem(&launch_bucket, &pid);
		if (!b)
			return 0;
	}
	__u64 credit = b->credit;
	__u64 elapsed = now > b->last_ns ? now - b->last_ns : 0;
	/* elapsed * r, saturating at cap (cap / r ns fill the bucket). */
	__u64 fill_ns = cap / r;

	barrier_var(fill_ns);
	if (elapsed >= fill_ns || credit >= cap - elapsed * r)
		credit = cap;
	else
		credit += elapsed * r;

	if (credit >= NS_PER_S) {
		b->credit = credit - NS_PER_S;
		b->last_ns = now;
		return 0;
	}
	/* The token is due in (NS_PER_S - credit) / r ns, rounded up. */
	__u64 wait = (NS_PER_S - credit + r - 1) / r;

	if (hdr->flags & GPUBPF_CTX_F_CAPTURING) {
		__sync_fetch_and_add(&st->capture_skips, 1);
		b->credit = credit;
		b->last_ns = now;
		return 0;
	}
	if (wait > max_delay_ns)
		wait = max_delay_ns;
	long slept = gpubpf_delay_ns(wait);

	if (slept > 0) {
		__sync_fetch_and_add(&st->delayed, 1);
		__sync_fetch_and_add(&st->delay_ns, slept);
	}
	/* The launch took its token, due now (or late by the bound): the bucket is empty. */
	b->credit = 0;
	b->last_ns = bpf_ktime_get_ns();
	return 0;
}

GPUBPF_ENTRY(cuLaunchKernel, launch_limit) { return limit(&ctx->hdr); }
GPUBPF_ENTRY(cuLaunchCooperativeKernel, launch_limit_coop) { return limit(&ctx->hdr); }
GPUBPF_ENTRY(cuLaunchKernelEx, launch_limit_ex) { return limit(&ctx->hdr); }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
