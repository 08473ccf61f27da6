/* Dispatch test policy (issue #11): a branch that clang cannot fold (the empty asm hides
 * the value from the compiler) but the verifier decides (r = 5 is a known constant). The
 * instructions behind it are never verified; the runtime replaces them with dead-code traps
 * before they are prepared and compiled. */
#include "gpubpf.h"

GPUBPF_ENTRY(cuMemAlloc, dead_branch)
{
	__u64 x = 5;

	asm volatile("" : "+r"(x));
	if (x != 5) {
		__u64 bytes = ctx->args.bytesize;

		return bytes > 100 ? 7 : 3;
	}
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
