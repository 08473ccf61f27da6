/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* An entry program on cuLaunchKernel that does nothing and lets every call through: the
 * shim benchmark's measure of what running a policy costs apart from the policy's own work. */
#include "gpubpf.h"

SEC("cuda/cuLaunchKernel")
int pass_launch(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
