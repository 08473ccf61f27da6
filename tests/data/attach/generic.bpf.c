/* Programs whose sections name no API (`SEC("cuda")`, `SEC("cudaret")`, like libbpf's
 * `SEC("kprobe")`): `gpubpf load generic.o --attach API` says where they go
 * (tests/cli_load_attach.rs). */
#include "gpubpf.h"

__u64 calls;

SEC("cuda")
int count_entry(struct gpubpf_ctx_header *hdr)
{
	__sync_fetch_and_add(&calls, 1);
	return 0;
}

SEC("cudaret")
int count_exit(struct gpubpf_ctx_header *hdr)
{
	if (hdr->result != 0)
		__sync_fetch_and_add(&calls, 1);
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
