/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Counts cuLaunchKernel calls in one array slot (the swap-under-load test replaces this
 * object again and again; the map is kept by name, so the count must stay exact). */
#include "gpubpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} launches SEC(".maps");

SEC("cuda/cuLaunchKernel")
int count_launch(void *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&launches, &k);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
