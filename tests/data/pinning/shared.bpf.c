/* A map pinned by name (libbpf's LIBBPF_PIN_BY_NAME): every object that declares it with
 * the same definition shares it, and it stays after unload until `gpubpf maps unpin`
 * (tests/cli_maps_pinning.rs). `local` is private to each loaded object. */
#include "gpubpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} shared_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} local SEC(".maps");

SEC("cuda/cuMemAlloc")
int count(struct gpubpf_ctx_header *hdr)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&shared_counts, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	v = bpf_map_lookup_elem(&local, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
