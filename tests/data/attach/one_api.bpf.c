/* One program per phase, both written for one API: `--attach API` moves both
 * (tests/cli_load_attach.rs). They read only the ctx header, valid at every API. */
#include "gpubpf.h"

__u64 failures;

SEC("cuda/cuMemAlloc")
int on_entry(struct gpubpf_ctx_header *hdr)
{
	return 0;
}

SEC("cudaret/cuMemAlloc")
int on_exit(struct gpubpf_ctx_header *hdr)
{
	if (hdr->result != 0)
		__sync_fetch_and_add(&failures, 1);
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
