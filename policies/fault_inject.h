/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The decision `fault_inject.bpf.c` and `fault_inject_alloc.bpf.c` share: its knobs, its
 * counter map and `fault_decide`. Each including object gets its own copy of the knobs
 * (its `.rodata`); `fault_counts` is pinned by name, so both count into one map.
 */
#ifndef __GPUBPF_FAULT_INJECT_H__
#define __GPUBPF_FAULT_INJECT_H__

/* CUresult the failed calls return (default CUDA_ERROR_OUT_OF_MEMORY); 1..999. */
const volatile __u32 error_code = 2;
/* Fail exactly the Nth call (1-based) of each process and API; 0: off. */
const volatile __u64 nth = 0;
/* Fail every Nth call (the Nth, 2Nth, …) of each process and API; 0: off. */
const volatile __u64 every = 0;
/* Fail a call with this probability in parts per million (0..1000000); 0: off. */
const volatile __u32 prob_ppm = 0;
/* bpf_printk a line per injected fault. */
const volatile bool log_faults = false;

/* Counters of one process and API. */
struct fault_key {
	__u32 pid;
	__u32 api_id; /* GPUBPF_API_* */
};

struct fault_count {
	__u64 calls;    /* calls seen (that passed the filter) */
	__u64 injected; /* of which failed with error_code */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fault_key);
	__type(value, struct fault_count);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fault_counts SEC(".maps");

#define FAULT_PPM 1000000

/* Counts the call and decides: 1 (fail it with error_code) or 0 (it proceeds). The rules are
 * ORed; a call whose counter cannot be created proceeds (fails open), and so does every call
 * when error_code is out of 1..999. */
static __noinline int fault_decide(struct gpubpf_ctx_header *hdr)
{
	struct fault_key key = { .pid = hdr->pid, .api_id = hdr->api_id };
	struct fault_count *c = bpf_map_lookup_elem(&fault_counts, &key);

	if (!c) {
		struct fault_count zero = {};

		bpf_map_update_elem(&fault_counts, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&fault_counts, &key);
		if (!c)
			return 0;
	}
	__u64 n = __sync_fetch_and_add(&c->calls, 1) + 1;
	int fail = 0;

	if (nth != 0 && n == nth)
		fail = 1;
	if (every != 0 && n % every == 0)
		fail = 1;
	if (prob_ppm != 0 && bpf_get_prandom_u32() % FAULT_PPM < prob_ppm)
		fail = 1;
	if (!fail || error_code == 0 || error_code > GPUBPF_VERDICT_MAX)
		return 0;
	__sync_fetch_and_add(&c->injected, 1);
	if (log_faults)
		bpf_printk("fault-inject: pid %u api %u call %llu", hdr->pid, hdr->api_id, n);
	return 1;
}

/* What an entry program returns for a call fault_decide failed: error_code, bounded. */
static __always_inline int fault_error(void)
{
	__u32 e = error_code;

	if (e == 0 || e > GPUBPF_VERDICT_MAX)
		return 0;
	return e;
}

#endif /* __GPUBPF_FAULT_INJECT_H__ */
