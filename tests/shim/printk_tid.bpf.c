/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Prints the calling thread's id on every cuLaunchKernel (the trace ring test checks that
 * each line's `comm-tid [pid]` prefix names the thread and process that printed it). */
#include "gpubpf.h"

SEC("cuda/cuLaunchKernel")
int printk_tid(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();

	bpf_printk("launch by tid %u of pid %u", (__u32)id, (__u32)(id >> 32));
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
