/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * kernel_guard: an allow- or deny-list of kernel names on kernel launches, edited by the
 * operator while applications run.
 *
 *   gpubpf load kernel_guard.o                      # deny-list (empty: nothing refused)
 *   gpubpf maps update kernel_list --key 'evil_kernel' --value 0
 *   gpubpf load kernel_guard.o --set allow_list=1   # only the listed names may launch
 *
 * Programs: cuLaunchKernel, cuLaunchCooperativeKernel (args.f) and cuLaunchKernelEx
 * (launch.function), entry. The name comes from gpubpf_get_kernel_name (the driver's
 * cuFuncGetName, or cuKernelGetName for the library kernels cudart launches; the mangled
 * name for C++ kernels); names longer than 63 bytes are compared on their first 63. A
 * kernel without a name (the driver has none) is treated as the name "": launched under a
 * deny-list, refused under an allow-list.
 *
 * Knobs (`const volatile`, set with `--set`):
 *   allow_list   0: refuse the listed names (default); 1: refuse every other name
 *   error_code   CUresult of a refused launch (default 800, CUDA_ERROR_NOT_PERMITTED; 1..999)
 *   log_denials  bpf_printk a line per refused launch (default true; the function handle:
 *                a string on the stack cannot be printed, its name is in kernel_denied)
 *
 * Maps (pinned by name, so a reload keeps the list):
 *   kernel_list    hash, char[64] name -> __u64 matches (launches that matched the entry;
 *                  insert with --value 0)
 *   kernel_denied  hash, char[64] name -> __u64 refused launches of that name
 */
#include "gpubpf.h"

#define NAME_LEN 64

/* 0: deny-list (the listed names are refused); 1: allow-list (only they may launch). */
const volatile bool allow_list = false;
/* CUresult a refused launch returns (default CUDA_ERROR_NOT_PERMITTED). */
const volatile __u32 error_code = 800;
/* bpf_printk a line per refused launch. */
const volatile bool log_denials = true;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[NAME_LEN]);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kernel_list SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[NAME_LEN]);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kernel_denied SEC(".maps");

/* 1 when a launch of `f` is refused, after counting it; 0 when it proceeds. */
static __noinline int refused(__u64 f)
{
	char name[NAME_LEN] = {};

	if (gpubpf_get_kernel_name(f, name, sizeof(name)) < 0)
		name[0] = 0; /* the helper zeroed it: the name "" */
	__u64 *hits = bpf_map_lookup_elem(&kernel_list, name);

	if (hits)
		__sync_fetch_and_add(hits, 1);
	if (allow_list ? hits != 0 : hits == 0)
		return 0;
	__u64 *n = bpf_map_lookup_elem(&kernel_denied, name);

	if (n) {
		__sync_fetch_and_add(n, 1);
	} else {
		__u64 one = 1;

		if (bpf_map_update_elem(&kernel_denied, name, &one, BPF_NOEXIST) != 0) {
			n = bpf_map_lookup_elem(&kernel_denied, name);
			if (n)
				__sync_fetch_and_add(n, 1);
		}
	}
	if (log_denials)
		bpf_printk("kernel-guard: refused launch of function 0x%llx (name in kernel_denied)", f);
	return 1;
}

static __always_inline int verdict(__u64 f)
{
	__u32 e = error_code;

	if (!refused(f) || e == 0 || e > GPUBPF_VERDICT_MAX)
		return 0;
	return e;
}

GPUBPF_ENTRY(cuLaunchKernel, kernel_guard_launch) { return verdict(ctx->args.f); }
GPUBPF_ENTRY(cuLaunchCooperativeKernel, kernel_guard_coop) { return verdict(ctx->args.f); }
GPUBPF_ENTRY(cuLaunchKernelEx, kernel_guard_launch_ex) { return verdict(ctx->launch.function); }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
