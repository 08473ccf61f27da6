/* Dispatch test policy, loaded with --shadow: every decision it makes must be reported and
 * never applied. Its entry program rewrites cuMemAlloc's size and refuses with 3; its exit
 * programs override the result with 9 and rewrite cuMemGetInfo's free memory. */
#include "gpubpf.h"

GPUBPF_ENTRY(cuMemAlloc, rewrite_deny)
{
	ctx->args.bytesize = 4096;
	return 3;
}

GPUBPF_EXIT(cuMemAlloc, override_alloc)
{
	ctx->hdr.result = 9;
	return 0;
}

GPUBPF_EXIT(cuMemGetInfo, override_info)
{
	ctx->out.free = 1;
	ctx->hdr.result = 9;
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
