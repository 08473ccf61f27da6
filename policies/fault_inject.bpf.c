/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * fault_inject: fail a chosen driver API with a chosen CUDA error, to test how an
 * application (or a framework's allocator, retry and error paths) copes.
 *
 *   gpubpf load fault_inject.o --attach cuMemAlloc --set nth=3
 *   gpubpf load fault_inject.o --attach cuLaunchKernel --set every=10 --set error_code=719
 *   gpubpf load fault_inject.o --attach cuStreamSynchronize --set prob_ppm=1000
 *
 * One program, `fault_inject`, in a section without an API: it attaches with `--attach API`
 * (any API of `gpubpf attach-points`, several with `--attach A,B`). A failed call does not
 * reach the driver; the caller gets `error_code`.
 *
 * Knobs (`const volatile`, set with `--set`; fault_inject.h):
 *   error_code  CUresult returned (default 2, CUDA_ERROR_OUT_OF_MEMORY; 1..999)
 *   nth         fail exactly the Nth call of each process and API (1-based; 0: off)
 *   every       fail every Nth call of each process and API (0: off)
 *   prob_ppm    fail with this probability, parts per million (bpf_get_prandom_u32; 0: off)
 *   log_faults  bpf_printk a line per injected fault
 * The three rules are ORed; with all of them off nothing is injected (the calls are still
 * counted). For a size range on allocations see fault_inject_alloc.bpf.c.
 *
 * Map (pinned by name): fault_counts, hash { pid, api_id } -> { calls, injected }.
 */
#include "gpubpf.h"
#include "fault_inject.h"

SEC("cuda")
int fault_inject(struct gpubpf_ctx_header *hdr)
{
	return fault_decide(hdr) ? fault_error() : 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
