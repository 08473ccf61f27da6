/* Dispatch test policy (issue #11): nested bpf_loop. The verifier accepts it, yet it would
 * make 2^23 * 2^23 callback invocations on every cuMemAlloc; the run-time iteration budget
 * (2^23 per run) ends it, and dispatch treats that fault as verdict 0 (fail open). Were the
 * loops allowed to finish, the verdict would be 7. */
#include "gpubpf.h"

static long inner(__u32 index, void *data)
{
	return 0;
}

static long outer(__u32 index, void *data)
{
	bpf_loop(1 << 23, inner, data, 0);
	return 0;
}

GPUBPF_ENTRY(cuMemAlloc, nested_loops)
{
	bpf_loop(1 << 23, outer, 0, 0);
	return 7;
}

char LICENSE[] SEC("license") = "MIT";
