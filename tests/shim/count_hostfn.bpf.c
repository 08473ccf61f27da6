/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Counts cuLaunchHostFunc calls (the nested-call test: a policed call whose driver call
 * runs application code that makes policed calls of its own). */
#include "gpubpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hostfn_calls SEC(".maps");

SEC("cuda/cuLaunchHostFunc")
int count_hostfn(void *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&hostfn_calls, &k);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
