/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The maps `quota.bpf.c` keeps and `meminfo.bpf.c` reads, declared once for both.
 *
 * Every map is pinned by name (LIBBPF_PIN_BY_NAME): the registry holds one `proc_usage`,
 * `user_usage`, `dev_usage`, `quota_allocs` and `quota_limits`, whichever of the two objects
 * is loaded first creates them, the other binds to them (same definitions, from this one
 * header), and they outlive an unload or a reload of either (a replaced quota keeps its
 * counters; `gpubpf maps unpin NAME` releases one). One quota per registry: two quota
 * objects would both count every allocation into the same maps.
 */
#ifndef __GPUBPF_QUOTA_H__
#define __GPUBPF_QUOTA_H__

/* Usage of one process (`proc_usage`, by pid), user (`user_usage`, by uid) or device
 * (`dev_usage`, by ordinal). */
struct usage {
	__u64 bytes;   /* currently allocated */
	__u64 allocs;  /* successful allocations */
	__u64 frees;   /* successful frees of tracked allocations */
	__u64 denied;  /* allocations refused because of this bucket's limit */
};

/* What a live allocation is, in `quota_key.kind`: each family names its allocations in its
 * own space (a device pointer, a physical allocation handle, an array handle). */
enum quota_kind {
	QUOTA_DPTR = 1,    /* cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAlloc*Async */
	QUOTA_HANDLE = 2,  /* cuMemCreate (CUmemGenericAllocationHandle) */
	QUOTA_ARRAY = 3,   /* cuArrayCreate, cuArray3DCreate (CUarray) */
	QUOTA_MIPMAP = 4,  /* cuMipmappedArrayCreate (CUmipmappedArray) */
};

/* Live allocations are keyed by process and pointer/handle: two processes may hold the
 * same device address or handle value. */
struct quota_key {
	__u64 handle;
	__u32 pid;
	__u32 kind;
};

struct quota_alloc {
	__u64 size;
	__u32 pid;
	__u32 uid;
	__s32 device;
	__u32 kind;
};

/* The limits quota was loaded with (0: no limit), published for meminfo. */
struct quota_limits {
	__u64 process;
	__u64 user;
	__u64 device;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct usage);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} proc_usage SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct usage);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} user_usage SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct usage);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dev_usage SEC(".maps");

/* Live allocations. LRU so that leaks cannot fill it (an evicted allocation is no longer
 * credited when freed). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct quota_key);
	__type(value, struct quota_alloc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} quota_allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct quota_limits);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} quota_limits SEC(".maps");

#endif /* __GPUBPF_QUOTA_H__ */
