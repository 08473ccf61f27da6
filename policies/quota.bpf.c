/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * quota: cap the device memory a process, a user and a device may hold, over every
 * allocation family of the driver API (INTERCEPTION.md §5).
 *
 *   gpubpf load quota.o --set limit_bytes=8GiB --set user_limit_bytes=32GiB
 *
 * Knobs (`const volatile`, set with `--set`; 0 means "no limit"):
 *   limit_bytes         per process (all devices together)
 *   user_limit_bytes    per user (all of the user's processes, all devices)
 *   device_limit_bytes  per device (every process on it)
 *   log_denials         bpf_printk a line per refusal
 *
 * Programs, by family (entry: check; exit: account what really happened, result 0 only):
 *   cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged,    size from the arguments; Pitch checks
 *   cuMemAllocAsync, cuMemAllocFromPoolAsync           Width x Height and accounts the real
 *                                                      pitch x Height on exit
 *   cuMemCreate                                        physical allocations (what cuMemMap
 *                                                      maps is already counted here); only
 *                                                      device locations (prop->location)
 *   cuArrayCreate, cuArray3DCreate,                    size from the descriptor, read with
 *   cuMipmappedArrayCreate                             bpf_probe_read_user: width x height x
 *                                                      depth x channels x element size (every
 *                                                      level of a mipmap); the driver's own
 *                                                      padding is not seen
 *   frees credit on exit: cuMemFree, cuMemFreeAsync (either kind of device pointer),
 *   cuMemRelease, cuArrayDestroy, cuMipmappedArrayDestroy
 *   cuMemGetInfo, cuDeviceTotalMem (entry)             publish the limits for meminfo.bpf.c
 *
 * A refusal returns CUDA_ERROR_OUT_OF_MEMORY (2) without calling the driver: what PyTorch's
 * caching allocator and cudart expect of a full device. Counters (maps in quota.h, pinned by
 * name, shared with meminfo) are updated with atomics, so threads and processes count
 * correctly. The check on entry and the accounting on exit are separate steps: allocations
 * racing in other threads between the two can overshoot a limit by at most their own sizes.
 * Memory of a process that exits without freeing it stays charged until its entries are
 * removed (`gpubpf maps delete proc_usage --key PID` and the user/device buckets).
 */
#include "gpubpf.h"
#include "quota.h"

/* Per-process limit in bytes (0: unlimited). */
const volatile __u64 limit_bytes = 4ULL << 30;
/* Per-user limit in bytes (0: unlimited). */
const volatile __u64 user_limit_bytes = 0;
/* Per-device limit in bytes (0: unlimited). */
const volatile __u64 device_limit_bytes = 0;
/* Log refusals with bpf_printk. */
const volatile bool log_denials = true;

/* CUDA_ARRAY_DESCRIPTOR_v2 */
struct array_desc {
	__u64 width;
	__u64 height;
	__u32 format;
	__u32 channels;
};

/* CUDA_ARRAY3D_DESCRIPTOR_v2 */
struct array3d_desc {
	__u64 width;
	__u64 height;
	__u64 depth;
	__u32 format;
	__u32 channels;
	__u32 flags;
};

/* The head of CUmemAllocationProp_v1: type, requestedHandleTypes, location. */
struct alloc_prop_head {
	__u32 type;
	__u32 handle_types;
	__u32 location_type;
	__s32 location_id;
};

#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define SIZE_UNKNOWN (~0ULL)

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

/* a * b, saturating at SIZE_UNKNOWN (which every limit refuses). */
static __always_inline __u64 mul_sat(__u64 a, __u64 b)
{
	if (a == 0)
		return 0;
	__u64 max_b = SIZE_UNKNOWN / a;

	/* Keeps clang from turning the test into a 128-bit multiply BPF has no call for. */
	barrier_var(max_b);
	return b > max_b ? SIZE_UNKNOWN : a * b;
}

/*
 * Entry check of an allocation of `size` bytes by process `pid` on device `dev` (-1:
 * unknown, no device limit): 0, or 1 after counting the refusal in the bucket whose limit
 * it would cross. Fails open (0) when a counter cannot be created.
 */
static __noinline int refuse(__u32 pid, __s32 dev, __u64 size)
{
	__u32 uid = current_uid();
	struct usage *p = usage_of(&proc_usage, pid);
	struct usage *u = usage_of(&user_usage, uid);

	if (!p || !u)
		return 0;
	if (over_limit(p->bytes, size, limit_bytes)) {
		__sync_fetch_and_add(&p->denied, 1);
		if (log_denials)
			bpf_printk("quota: pid %u denied %llu bytes (process limit)", pid, size);
		return 1;
	}
	if (over_limit(u->bytes, size, user_limit_bytes)) {
		__sync_fetch_and_add(&u->denied, 1);
		if (log_denials)
			bpf_printk("quota: uid %u denied %llu bytes (user limit)", uid, size);
		return 1;
	}
	if (dev < 0 || device_limit_bytes == 0)
		return 0;
	struct usage *d = usage_of(&dev_usage, (__u32)dev);

	if (!d)
		return 0;
	if (over_limit(d->bytes, size, device_limit_bytes)) {
		__sync_fetch_and_add(&d->denied, 1);
		if (log_denials)
			bpf_printk("quota: device %d denied %llu bytes (device limit)", dev, size);
		return 1;
	}
	return 0;
}

static __always_inline void charge(struct usage *s, __u64 size)
{
	if (s) {
		__sync_fetch_and_add(&s->bytes, size);
		__sync_fetch_and_add(&s->allocs, 1);
	}
}

static __always_inline void credit(struct usage *s, __u64 size)
{
	if (s) {
		__sync_fetch_and_sub(&s->bytes, size);
		__sync_fetch_and_add(&s->frees, 1);
	}
}

/* Exit accounting of an allocation that succeeded: counters and the live entry. */
static __noinline int account(__u32 pid, __s32 dev, __u32 kind, __u64 handle, __u64 size)
{
	struct quota_key key = { .handle = handle, .pid = pid, .kind = kind };
	struct quota_alloc a = {
		.size = size, .pid = pid, .uid = current_uid(), .device = dev, .kind = kind,
	};

	if (size == SIZE_UNKNOWN)
		return 0;
	charge(usage_of(&proc_usage, pid), size);
	charge(usage_of(&user_usage, a.uid), size);
	if (dev >= 0)
		charge(usage_of(&dev_usage, (__u32)dev), size);
	bpf_map_update_elem(&quota_allocs, &key, &a, BPF_ANY);
	return 0;
}

/* Exit crediting of a free that succeeded: the live entry's size goes back to its buckets. */
static __noinline int release(__u32 pid, __u32 kind, __u64 handle)
{
	struct quota_key key = { .handle = handle, .pid = pid, .kind = kind };
	struct quota_alloc *a = bpf_map_lookup_elem(&quota_allocs, &key);

	if (!a)
		return 0; /* allocated before the policy was loaded, or not tracked */
	__u64 size = a->size;
	__u32 uid = a->uid;
	__s32 dev = a->device;

	credit(bpf_map_lookup_elem(&proc_usage, &pid), size);
	credit(bpf_map_lookup_elem(&user_usage, &uid), size);
	if (dev >= 0) {
		__u32 d = (__u32)dev;
		credit(bpf_map_lookup_elem(&dev_usage, &d), size);
	}
	bpf_map_delete_elem(&quota_allocs, &key);
	return 0;
}

static __always_inline int verdict(__u32 pid, __s32 dev, __u64 size)
{
	return refuse(pid, dev, size) ? CUDA_ERROR_OUT_OF_MEMORY : 0;
}

/* ---- linear allocations -------------------------------------------------------------- */

GPUBPF_ENTRY(cuMemAlloc, quota_alloc)
{
	return verdict(ctx->hdr.pid, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAlloc, quota_alloc_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_DPTR, ctx->out.dptr,
		       ctx->args.bytesize);
}

GPUBPF_ENTRY(cuMemAllocPitch, quota_pitch)
{
	/* The pitch is only known on exit: check the unpadded size. */
	return verdict(ctx->hdr.pid, ctx->hdr.device,
		       mul_sat(ctx->args.WidthInBytes, ctx->args.Height));
}

GPUBPF_EXIT(cuMemAllocPitch, quota_pitch_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_DPTR, ctx->out.dptr,
		       mul_sat(ctx->out.pPitch, ctx->args.Height));
}

GPUBPF_ENTRY(cuMemAllocManaged, quota_managed)
{
	return verdict(ctx->hdr.pid, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocManaged, quota_managed_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_DPTR, ctx->out.dptr,
		       ctx->args.bytesize);
}

GPUBPF_ENTRY(cuMemAllocAsync, quota_async)
{
	return verdict(ctx->hdr.pid, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocAsync, quota_async_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_DPTR, ctx->out.dptr,
		       ctx->args.bytesize);
}

GPUBPF_ENTRY(cuMemAllocFromPoolAsync, quota_pool)
{
	return verdict(ctx->hdr.pid, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocFromPoolAsync, quota_pool_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_DPTR, ctx->out.dptr,
		       ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemFree, quota_free_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return release(ctx->hdr.pid, QUOTA_DPTR, ctx->args.dptr);
}

/* A stream-ordered free is credited when it is enqueued: the memory goes back to the
 * pool, which the application no longer holds. */
GPUBPF_EXIT(cuMemFreeAsync, quota_free_async_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return release(ctx->hdr.pid, QUOTA_DPTR, ctx->args.dptr);
}

/* ---- virtual memory management: physical allocations ------------------------------- */

/* The device a cuMemCreate allocates on: prop->location.id for a device location, the
 * current device when the properties cannot be read, -2 for a host location (not policed). */
static __always_inline __s32 create_device(__u64 prop, __s32 current)
{
	struct alloc_prop_head head = {};

	if (bpf_probe_read_user(&head, sizeof(head), (const void *)prop) != 0)
		return current;
	if (head.location_type != CU_MEM_LOCATION_TYPE_DEVICE)
		return -2;
	return head.location_id;
}

GPUBPF_ENTRY(cuMemCreate, quota_create)
{
	__s32 dev = create_device(ctx->args.prop, ctx->hdr.device);

	if (dev == -2)
		return 0;
	return verdict(ctx->hdr.pid, dev, ctx->args.size);
}

GPUBPF_EXIT(cuMemCreate, quota_create_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	__s32 dev = create_device(ctx->args.prop, ctx->hdr.device);

	if (dev == -2)
		return 0;
	return account(ctx->hdr.pid, dev, QUOTA_HANDLE, ctx->out.handle, ctx->args.size);
}

GPUBPF_EXIT(cuMemRelease, quota_release_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return release(ctx->hdr.pid, QUOTA_HANDLE, ctx->args.handle);
}

/* ---- arrays ------------------------------------------------------------------------- */

/* Bytes per channel of a CUarray_format; 4 (the widest) for formats not listed. */
static __always_inline __u64 format_bytes(__u32 format)
{
	switch (format) {
	case 0x01: /* CU_AD_FORMAT_UNSIGNED_INT8 */
	case 0x08: /* CU_AD_FORMAT_SIGNED_INT8 */
		return 1;
	case 0x02: /* CU_AD_FORMAT_UNSIGNED_INT16 */
	case 0x09: /* CU_AD_FORMAT_SIGNED_INT16 */
	case 0x10: /* CU_AD_FORMAT_HALF */
		return 2;
	default:   /* UNSIGNED_INT32, SIGNED_INT32, FLOAT and newer formats */
		return 4;
	}
}

/* Larger than any array dimension a device supports (131072 is the largest): a descriptor
 * beyond it is refused by the driver, and the size arithmetic below cannot overflow. */
#define MAX_ARRAY_DIM (1ULL << 18)
/* Levels of a mipmap whose largest dimension is below MAX_ARRAY_DIM. */
#define MAX_MIP_LEVELS 18

/* v, or 1 for 0 (v < 2^63), without a branch. */
static __always_inline __u64 at_least_1(__u64 v)
{
	return v + ((v - 1) >> 63);
}

/* Bytes of `levels` levels of a width x height x depth array (a dimension of 0 counts as
 * 1) of `channels` channels of `format`, each level half the previous one in every
 * dimension (at least 1), or SIZE_UNKNOWN for a descriptor no device accepts. */
static __always_inline __u64 array_bytes(__u64 width, __u64 height, __u64 depth, __u32 format,
					 __u32 channels, __u32 levels)
{
	if (width >= MAX_ARRAY_DIM || height >= MAX_ARRAY_DIM || depth >= MAX_ARRAY_DIM ||
	    channels > 4)
		return SIZE_UNKNOWN;
	__u64 elem = format_bytes(format) * at_least_1(channels);
	__u64 total = 0;

	for (__u32 i = 0; i < MAX_MIP_LEVELS && i < levels; i++)
		total += at_least_1(width >> i) * at_least_1(height >> i) *
			 at_least_1(depth >> i) * elem;
	return total;
}

static __always_inline __u64 array2d_size(__u64 desc)
{
	struct array_desc d = {};

	if (bpf_probe_read_user(&d, sizeof(d), (const void *)desc) != 0)
		return SIZE_UNKNOWN;
	return array_bytes(d.width, d.height, 0, d.format, d.channels, 1);
}

/* Bytes of a 3D (or layered) array, or of `levels` levels of a mipmapped one. */
static __always_inline __u64 array3d_size(__u64 desc, __u32 levels)
{
	struct array3d_desc d = {};

	if (bpf_probe_read_user(&d, sizeof(d), (const void *)desc) != 0)
		return SIZE_UNKNOWN;
	return array_bytes(d.width, d.height, d.depth, d.format, d.channels, levels);
}

GPUBPF_ENTRY(cuArrayCreate, quota_array)
{
	__u64 size = array2d_size(ctx->args.pAllocateArray);

	if (size == SIZE_UNKNOWN)
		return 0; /* unreadable or impossible descriptor: the driver refuses it */
	return verdict(ctx->hdr.pid, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuArrayCreate, quota_array_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_ARRAY, ctx->out.pHandle,
		       array2d_size(ctx->args.pAllocateArray));
}

GPUBPF_ENTRY(cuArray3DCreate, quota_array3d)
{
	__u64 size = array3d_size(ctx->args.pAllocateArray, 1);

	if (size == SIZE_UNKNOWN)
		return 0;
	return verdict(ctx->hdr.pid, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuArray3DCreate, quota_array3d_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_ARRAY, ctx->out.pHandle,
		       array3d_size(ctx->args.pAllocateArray, 1));
}

GPUBPF_EXIT(cuArrayDestroy, quota_array_destroy_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return release(ctx->hdr.pid, QUOTA_ARRAY, ctx->args.hArray);
}

GPUBPF_ENTRY(cuMipmappedArrayCreate, quota_mipmap)
{
	__u64 size = array3d_size(ctx->args.pMipmappedArrayDesc, ctx->args.numMipmapLevels);

	if (size == SIZE_UNKNOWN)
		return 0;
	return verdict(ctx->hdr.pid, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuMipmappedArrayCreate, quota_mipmap_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return account(ctx->hdr.pid, ctx->hdr.device, QUOTA_MIPMAP, ctx->out.pHandle,
		       array3d_size(ctx->args.pMipmappedArrayDesc, ctx->args.numMipmapLevels));
}

GPUBPF_EXIT(cuMipmappedArrayDestroy, quota_mipmap_destroy_done)
{
	if (ctx->hdr.result != CUDA_SUCCESS)
		return 0;
	return release(ctx->hdr.pid, QUOTA_MIPMAP, ctx->args.hMipmappedArray);
}

/* ---- the limits, for meminfo.bpf.c --------------------------------------------------- */

/* Runs on entry of the reporting calls, before meminfo's exit programs read the limits:
 * they always see the limits of the quota loaded now. */
static __always_inline int publish_limits(void)
{
	__u32 zero = 0;
	struct quota_limits *l = bpf_map_lookup_elem(&quota_limits, &zero);

	if (l) {
		l->process = limit_bytes;
		l->user = user_limit_bytes;
		l->device = device_limit_bytes;
	}
	return 0;
}

GPUBPF_ENTRY(cuMemGetInfo, quota_publish_getinfo)
{
	return publish_limits();
}

GPUBPF_ENTRY(cuDeviceTotalMem, quota_publish_totalmem)
{
	return publish_limits();
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
