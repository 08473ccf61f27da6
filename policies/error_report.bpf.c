/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * error_report: count and report the driver calls that fail (one of the seeds' recipes:
 * which API fails, with which CUresult, in which process?).
 *
 *   gpubpf load error_report.o --attach cuMemAlloc,cuLaunchKernel,cuStreamSynchronize
 *   gpubpf maps dump error_counts      # { api_id, result } -> calls; ids: gpubpf attach-points
 *   gpubpf trace -f                    # with log_errors: one line per failure
 *
 * One exit program, `error_report`, in a section without an API (`--attach` any APIs of
 * `gpubpf attach-points`). Calls a policy refused count too (their result is the verdict).
 *
 * Knobs: log_errors (a `bpf_printk` line per failure, default true).
 * Map (pinned by name): error_counts, hash { api_id, result } -> __u64 calls.
 */
#include "gpubpf.h"

/* bpf_printk a line per failed call. */
const volatile bool log_errors = true;

struct error_key {
	__u32 api_id;
	__u32 result;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct error_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} error_counts SEC(".maps");

SEC("cudaret")
int error_report(struct gpubpf_ctx_header *hdr)
{
	__u32 result = hdr->result;

	if (result == 0)
		return 0;
	struct error_key k = { .api_id = hdr->api_id, .result = result };
	__u64 *n = bpf_map_lookup_elem(&error_counts, &k);

	if (n) {
		__sync_fetch_and_add(n, 1);
	} else {
		__u64 one = 1;

		if (bpf_map_update_elem(&error_counts, &k, &one, BPF_NOEXIST) != 0) {
			n = bpf_map_lookup_elem(&error_counts, &k);
			if (n)
				__sync_fetch_and_add(n, 1);
		}
	}
	if (log_errors)
		bpf_printk("error: pid %u api %u returned %u", hdr->pid, hdr->api_id, result);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
