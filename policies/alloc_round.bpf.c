/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * alloc_round: round every device allocation up to a pool granularity by rewriting its size
 * argument before the driver sees it (one of the seeds' recipes: fewer distinct sizes, less
 * fragmentation in a caching allocator, sizes a quota counts as the driver really maps).
 *
 *   gpubpf load alloc_round.o --set granularity=2MiB --priority -10
 *
 * Programs (entry): cuMemAlloc, cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync
 * (args.bytesize). Load it with a lower --priority than quota so that quota's entry check
 * sees the rounded size (programs of one attach point run in priority order, each seeing
 * the arguments the previous ones wrote). A size whose rounding would overflow is left as
 * it is (the driver refuses it anyway). The application still believes it asked for its own
 * size: it uses less than it got, never more.
 *
 * Knobs: granularity (bytes, default 2 MiB; 0 or 1: no rounding); rounded (counter in
 * `.bss`: allocations whose size changed, `gpubpf maps dump alloc_round.bss`).
 */
#include "gpubpf.h"

/* Allocation sizes become multiples of this many bytes. */
const volatile __u64 granularity = 2 << 20;
/* Allocations whose size this policy changed. */
__u64 rounded = 0;

static __always_inline __u64 round_up(__u64 size)
{
	__u64 g = granularity;

	if (g <= 1)
		return size;
	__u64 r = size % g;

	if (r == 0 || size > ~0ULL - (g - r))
		return size;
	return size + (g - r);
}

/* Rewrites *size; always lets the call proceed. */
static __always_inline int round_size(__u64 *size)
{
	__u64 s = *size;
	__u64 r = round_up(s);

	if (r != s) {
		*size = r;
		__sync_fetch_and_add(&rounded, 1);
	}
	return 0;
}

GPUBPF_ENTRY(cuMemAlloc, round_alloc) { return round_size(&ctx->args.bytesize); }
GPUBPF_ENTRY(cuMemAllocManaged, round_managed) { return round_size(&ctx->args.bytesize); }
GPUBPF_ENTRY(cuMemAllocAsync, round_async) { return round_size(&ctx->args.bytesize); }
GPUBPF_ENTRY(cuMemAllocFromPoolAsync, round_pool) { return round_size(&ctx->args.bytesize); }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
