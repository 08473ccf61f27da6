/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * fault_inject_kernel: fault_inject.bpf.c restricted to the launches of one kernel, by name;
 * launches of other kernels proceed and are not counted.
 *
 *   gpubpf load fault_inject_kernel.o --set kernel=vector_add --set every=10 \
 *       --set error_code=719
 *
 * Programs: cuLaunchKernel, cuLaunchCooperativeKernel (args.f) and cuLaunchKernelEx
 * (launch.function), entry. The name is the driver's (cuFuncGetName or cuKernelGetName through
 * gpubpf_get_kernel_name: the mangled name of a C++ kernel); names are compared on their
 * first 63 bytes. A kernel the driver has no name for never matches a non-empty `kernel`.
 *
 * Knobs: those of fault_inject.bpf.c (error_code, nth, every, prob_ppm, log_faults; "the Nth
 * call" counts only launches of the kernel), and
 *   kernel      the kernel's name (a string, at most 63 bytes); "" (default): every kernel
 *
 * Map (pinned by name, shared with fault_inject.bpf.c): fault_counts.
 */
#include "gpubpf.h"
#include "fault_inject.h"

#define NAME_LEN 64

/* Name of the kernel whose launches may fail; "": every kernel. */
const volatile char kernel[NAME_LEN] = "";

/* Whether CUfunction `f` is the chosen kernel. */
static __noinline int matches(__u64 f)
{
	char name[NAME_LEN] = {};

	if (kernel[0] == 0)
		return 1;
	if (gpubpf_get_kernel_name(f, name, sizeof(name)) < 0)
		return 0;
#pragma unroll
	for (int i = 0; i < NAME_LEN - 1; i++) {
		if (name[i] != kernel[i])
			return 0;
		if (name[i] == 0)
			return 1;
	}
	return 1;
}

static __always_inline int decide(struct gpubpf_ctx_header *hdr, __u64 f)
{
	if (!matches(f))
		return 0;
	return fault_decide(hdr) ? fault_error() : 0;
}

GPUBPF_ENTRY(cuLaunchKernel, fault_kernel_launch) { return decide(&ctx->hdr, ctx->args.f); }
GPUBPF_ENTRY(cuLaunchCooperativeKernel, fault_kernel_coop) { return decide(&ctx->hdr, ctx->args.f); }
GPUBPF_ENTRY(cuLaunchKernelEx, fault_kernel_launch_ex)
{
	return decide(&ctx->hdr, ctx->launch.function);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
