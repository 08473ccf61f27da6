/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* An entry and an exit program on cuLaunchKernel that do nothing: what a policy with both
 * phases (as trace.o) costs a call apart from its programs' own work
 * (benches/cold_cache/ladder.sh: the rung between pass_launch and trace). */
#include "gpubpf.h"

SEC("cuda/cuLaunchKernel")
int pass_pair(void *ctx)
{
	return 0;
}

SEC("cudaret/cuLaunchKernel")
int pass_pair_exit(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
