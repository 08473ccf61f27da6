/* Dispatch test policy: vetoes allocations over 100 bytes with 7; loaded first in order. */
#include "gpubpf.h"

GPUBPF_ENTRY(cuMemAlloc, veto_big)
{
	return ctx->args.bytesize > 100 ? 7 : 0;
}

char LICENSE[] SEC("license") = "MIT";
