/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * priority: a high-priority class of processes (by uid, pid or command name, in maps the
 * operator edits) gets its streams created at the highest stream priority, and the other
 * processes' kernel launches are spaced out while a high-priority process is launching (the
 * seeds' priority scheduling, from the API layer).
 *
 *   gpubpf load priority.o --set throttle_ns=50000 --set active_window_ns=100000000
 *   gpubpf maps update prio_comms --key 'train_prod' --value 1     # by command name
 *   gpubpf maps update prio_uids --key 1001 --value 1              # by uid
 *   gpubpf maps update prio_pids --key 4242 --value 1              # by pid
 *
 * Programs (entry):
 *   cuStreamCreateWithPriority   a high-priority process's streams get `high_priority`
 *                                (default -1000: the driver clamps it to the greatest
 *                                priority of the device, as cuCtxGetStreamPriorityRange
 *                                reports it); other processes' requests are left alone
 *   cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel
 *                                a high-priority process's launch marks the class active
 *                                (`prio_state.last_high_ns`); another process's launch while
 *                                the class was active within `active_window_ns` is delayed
 *                                by `throttle_ns` (gpubpf_delay_ns, at most 100 ms), never
 *                                failed, and never while its stream is being captured into
 *                                a graph (the delay would not apply to the graph's replays)
 *
 * Limits (docs/policies.md, "What cannot be done safely from the API layer"): a stream
 * priority orders work only among the streams of one device and only between kernels — it
 * preempts nothing already running; PyTorch and cuBLAS create their pool streams with
 * cudaStreamCreateWithPriority, but a stream made with plain cuStreamCreate keeps the
 * default priority (the call has no priority to raise). The delay spaces out what the other
 * processes submit; kernels they already queued still run, and a process that launches
 * rarely is barely slowed. For hard isolation use MPS (active-thread percentage) or MIG.
 *
 * Maps (pinned by name): prio_uids (__u32 uid), prio_pids (__u32 pid), prio_comms
 * (char[16] command name, as /proc/PID/comm) -> __u32 (any value: listed); prio_state
 * (array, one entry: last_high_ns, raised streams, throttled launches, total delay).
 */
#include "gpubpf.h"

#define COMM_LEN 16

/* The priority high-priority streams are created at (lower is higher; clamped by the driver). */
const volatile __s32 high_priority = -1000;
/* How long after a high-priority launch the class counts as active, in ns. */
const volatile __u64 active_window_ns = 100000000;
/* Delay of another process's launch while the class is active, in ns (0: none). */
const volatile __u64 throttle_ns = 50000;

struct prio_state {
	__u64 last_high_ns;      /* monotonic time of the last high-priority launch */
	__u64 raised_streams;    /* streams created at high_priority */
	__u64 throttled;         /* other processes' launches delayed */
	__u64 throttled_ns;      /* nanoseconds they were delayed in total */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} prio_uids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} prio_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[COMM_LEN]);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} prio_comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prio_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} prio_state SEC(".maps");

/* Whether the calling process is in the high-priority class. */
static __noinline int is_high(__u32 pid)
{
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	char comm[COMM_LEN] = {};

	if (bpf_map_lookup_elem(&prio_uids, &uid))
		return 1;
	if (bpf_map_lookup_elem(&prio_pids, &pid))
		return 1;
	if (bpf_get_current_comm(comm, sizeof(comm)) < 0)
		return 0;
	return bpf_map_lookup_elem(&prio_comms, comm) != 0;
}

GPUBPF_ENTRY(cuStreamCreateWithPriority, prio_stream)
{
	__u32 k = 0;
	struct prio_state *s;

	if (!is_high(ctx->hdr.pid))
		return 0;
	ctx->args.priority = high_priority;
	s = bpf_map_lookup_elem(&prio_state, &k);
	if (s)
		__sync_fetch_and_add(&s->raised_streams, 1);
	return 0;
}

static __always_inline int on_launch(struct gpubpf_ctx_header *hdr)
{
	__u32 k = 0;
	struct prio_state *s = bpf_map_lookup_elem(&prio_state, &k);
	__u64 now = bpf_ktime_get_ns();

	if (!s)
		return 0;
	if (is_high(hdr->pid)) {
		s->last_high_ns = now;
		return 0;
	}
	if (throttle_ns == 0 || (hdr->flags & GPUBPF_CTX_F_CAPTURING))
		return 0;
	__u64 last = s->last_high_ns;

	if (last == 0 || now - last >= active_window_ns)
		return 0;
	__u64 slept = gpubpf_delay_ns(throttle_ns);

	__sync_fetch_and_add(&s->throttled, 1);
	__sync_fetch_and_add(&s->throttled_ns, slept);
	return 0;
}

GPUBPF_ENTRY(cuLaunchKernel, prio_launch) { return on_launch(&ctx->hdr); }
GPUBPF_ENTRY(cuLaunchKernelEx, prio_launch_ex) { return on_launch(&ctx->hdr); }
GPUBPF_ENTRY(cuLaunchCooperativeKernel, prio_coop) { return on_launch(&ctx->hdr); }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
