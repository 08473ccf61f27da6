/* Source of the crafted corrupt objects in this directory (see craft.py). */
#include "gpubpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

const volatile __u64 limit = 7;

static __noinline __u64 twice(__u64 x)
{
	return x * 2;
}

SEC("cuda/cuMemAlloc")
int prog(void *ctx)
{
	__u32 k = 1;
	__u64 *v = bpf_map_lookup_elem(&counts, &k);

	if (v && *v > limit)
		return 2;
	return twice(k) == 2 ? 0 : 1;
}

char LICENSE[] SEC("license") = "GPL";
