// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * A program written for libbpf, in the style of libbpf-bootstrap's bootstrap.bpf.c: standard
 * includes, BTF-defined maps, a ring buffer, `const volatile` configuration, static helper
 * functions and only standard helpers. The one change for gpubpf is the SEC() names (they
 * were "tp/sched/sched_process_exec" and "tp/sched/sched_process_exit").
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define TASK_COMM_LEN 16
#define MAX_SLOTS 26

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct event {
	__u32 pid;
	__u32 uid;
	__u64 duration_ns;
	char comm[TASK_COMM_LEN];
	bool exit_event;
};

struct hist {
	__u32 slots[MAX_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} exec_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rb SEC(".maps");

const volatile unsigned long long min_duration_ns = 0;
const volatile bool verbose = false;

/* From libbpf-tools' bits.bpf.h. */
static __always_inline __u64 log2(__u32 v)
{
	__u32 shift, r;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u64 log2l(__u64 v)
{
	__u32 hi = v >> 32;

	if (hi)
		return log2(hi) + 32;
	else
		return log2(v);
}

static int count_slot(__u32 index, void *ctx)
{
	__u64 *acc = ctx;

	*acc += index;
	return 0;
}

SEC("cuda/cuCtxCreate")
int handle_exec(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	__u64 ts = bpf_ktime_get_ns();
	struct event *e;

	bpf_map_update_elem(&exec_start, &pid, &ts, BPF_ANY);
	if (min_duration_ns)
		return 0;

	e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
	if (!e)
		return 0;
	e->exit_event = false;
	e->pid = pid;
	e->uid = (__u32)bpf_get_current_uid_gid();
	e->duration_ns = 0;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("cudaret/cuCtxDestroy")
int handle_exit(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u64 *start_ts, duration_ns = 0, acc = 0;
	__u32 zero = 0;
	struct hist *h;

	start_ts = bpf_map_lookup_elem(&exec_start, &pid);
	if (start_ts)
		duration_ns = bpf_ktime_get_ns() - *start_ts;
	else if (min_duration_ns)
		return 0;
	bpf_map_delete_elem(&exec_start, &pid);
	if (min_duration_ns && duration_ns < min_duration_ns)
		return 0;

	h = bpf_map_lookup_elem(&hists, &zero);
	if (h) {
		__u64 slot = log2l(duration_ns / 1000);
		if (slot < MAX_SLOTS)
			__sync_fetch_and_add(&h->slots[slot], 1);
	}
	bpf_loop(4, count_slot, &acc, 0);
	if (verbose)
		bpf_printk("exit pid %d after %llu ns (%llu)", pid, duration_ns, acc);

	struct event e;

	__builtin_memset(&e, 0, sizeof(e)); /* no uninitialised padding reaches the helper */
	e.pid = pid;
	e.duration_ns = duration_ns;
	e.exit_event = true;
	bpf_get_current_comm(&e.comm, sizeof(e.comm));
	bpf_ringbuf_output(&rb, &e, sizeof(e), 0);
	return 0;
}
