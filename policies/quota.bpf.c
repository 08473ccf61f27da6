/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * quota: cap the device memory a process and a user may hold.
 *
 *   gpubpf load quota.o --set limit_bytes=8GiB --set user_limit_bytes=32GiB
 *
 * - cuda/cuMemAlloc (entry): refuses an allocation that would take the calling process over
 *   `limit_bytes` or its user over `user_limit_bytes` with CUDA_ERROR_OUT_OF_MEMORY (the
 *   real call is skipped). 0 means "no limit".
 * - cudaret/cuMemAlloc (exit): accounts the allocation that really happened (result 0):
 *   adds its size to the process and user counters and remembers pointer → size.
 * - cudaret/cuMemFree (exit): on success, subtracts the remembered size again.
 *
 * Counters live in hash maps (`proc_usage` by pid, `user_usage` by uid) and are updated with
 * atomics, so threads and processes sharing the maps count correctly. The check on entry and
 * the accounting on exit are separate steps: allocations racing in other threads between the
 * two can overshoot the limit by at most their own sizes.
 */
#include "gpubpf.h"

/* Per-process limit in bytes (0: unlimited). */
const volatile __u64 limit_bytes = 4ULL << 30;
/* Per-user limit in bytes (0: unlimited). */
const volatile __u64 user_limit_bytes = 0;
/* Log refusals with bpf_printk. */
const volatile bool log_denials = true;

struct usage {
	__u64 bytes;   /* currently allocated */
	__u64 allocs;  /* successful allocations */
	__u64 frees;   /* successful frees of tracked pointers */
	__u64 denied;  /* allocations refused by this policy */
};

struct allocation {
	__u64 size;
	__u32 pid;
	__u32 uid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct usage);
} proc_usage SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct usage);
} user_usage SEC(".maps");

/* Live allocations: device pointer → size and owner. LRU so that leaks cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct allocation);
} allocations SEC(".maps");

static __always_inline struct usage *usage_of(void *map, __u32 id)
{
	struct usage *u = bpf_map_lookup_elem(map, &id);

	if (u)
		return u;
	struct usage zero = {};
	bpf_map_update_elem(map, &id, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &id);
}

/* Whether `cur + size` exceeds `limit` (0: no limit), without overflowing. */
static __noinline int over_limit(__u64 cur, __u64 size, __u64 limit)
{
	if (limit == 0)
		return 0;
	return size > limit || cur > limit - size;
}

static __always_inline __u32 current_uid(void)
{
	return (__u32)bpf_get_current_uid_gid();
}

GPUBPF_ENTRY(cuMemAlloc, quota_alloc)
{
	__u64 size = ctx->args.bytesize;
	__u32 pid = ctx->hdr.pid;
	__u32 uid = current_uid();
	struct usage *p = usage_of(&proc_usage, pid);
	struct usage *u = usage_of(&user_usage, uid);

	if (!p || !u)
		return 0; /* maps full: fail open rather than break the application */
	if (over_limit(p->bytes, size, limit_bytes)) {
		__sync_fetch_and_add(&p->denied, 1);
		if (log_denials)
			bpf_printk("quota: pid %u denied %llu bytes (process limit)", pid, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (over_limit(u->bytes, size, user_limit_bytes)) {
		__sync_fetch_and_add(&u->denied, 1);
		if (log_denials)
			bpf_printk("quota: uid %u denied %llu bytes (user limit)", uid, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return 0;
}

GPUBPF_EXIT(cuMemAlloc, quota_alloc_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	__u64 size = ctx->args.bytesize;
	__u64 dptr = ctx->out.dptr;
	struct allocation a = { .size = size, .pid = ctx->hdr.pid, .uid = current_uid() };
	struct usage *p = usage_of(&proc_usage, a.pid);
	struct usage *u = usage_of(&user_usage, a.uid);

	if (p) {
		__sync_fetch_and_add(&p->bytes, size);
		__sync_fetch_and_add(&p->allocs, 1);
	}
	if (u) {
		__sync_fetch_and_add(&u->bytes, size);
		__sync_fetch_and_add(&u->allocs, 1);
	}
	bpf_map_update_elem(&allocations, &dptr, &a, BPF_ANY);
	return 0;
}

GPUBPF_EXIT(cuMemFree, quota_free_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	__u64 dptr = ctx->args.dptr;
	struct allocation *a = bpf_map_lookup_elem(&allocations, &dptr);

	if (!a)
		return 0; /* allocated before the policy was loaded */
	__u64 size = a->size;
	struct usage *p = bpf_map_lookup_elem(&proc_usage, &a->pid);
	struct usage *u = bpf_map_lookup_elem(&user_usage, &a->uid);

	if (p) {
		__sync_fetch_and_sub(&p->bytes, size);
		__sync_fetch_and_add(&p->frees, 1);
	}
	if (u) {
		__sync_fetch_and_sub(&u->bytes, size);
		__sync_fetch_and_add(&u->frees, 1);
	}
	bpf_map_delete_elem(&allocations, &dptr);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
