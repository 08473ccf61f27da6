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
 * Programs, by family (entry: reserve the size in every bucket or refuse; exit: record the
 * allocation when the call succeeded, give the reservation back when it did not):
 *   cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged,    size from the arguments; Pitch reserves
 *   cuMemAllocAsync, cuMemAllocFromPoolAsync           Width x Height and charges the real
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
 * correctly, and a limit is never crossed: the entry adds the size to each bucket first and
 * takes it back when the sum crosses the limit, so of allocations racing in threads or
 * processes only those that fit pass (one may be refused while another's reservation, which
 * its call may yet give back, is counted). Between entry and exit a reservation is already
 * in `bytes` and `allocs`; the thread's slot in `quota_pending` tells the exit what to settle.
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
/* A size no device accepts (an unreadable or impossible descriptor, a Width x Height that
 * overflows), or a host allocation: not policed, left to the driver. */
#define SIZE_UNKNOWN (~0ULL)

/* Threads' slots in `quota_pending` (a power of two: the slot is tid modulo this). */
#define PENDING_SLOTS 65536

/*
 * What a thread's allocation call reserved on entry, for its exit: written by every entry
 * (held 0 when nothing was reserved), consumed by the exit of the same call. Entry and exit
 * of one call run on one thread with no other policed call between them (a call the driver
 * makes from inside is not policed), so the slot cannot change in between except by another
 * live thread whose id is equal modulo PENDING_SLOTS; then the exit finds another tid and
 * settles nothing: the reservation stays charged, whether the call failed or succeeded (its
 * allocation is then not recorded, so its free credits nothing) — an over-count, never an
 * under-count.
 */
struct pending {
	__u32 tid;    /* whose call */
	__u32 api_id; /* which call */
	__u64 size;   /* bytes reserved */
	__s32 device; /* the device bucket charged, -1: none */
	__u32 uid;    /* the user bucket charged */
	__u32 held;   /* 1: `size` is reserved in the buckets */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PENDING_SLOTS);
	__type(key, __u32);
	__type(value, struct pending);
} quota_pending SEC(".maps");

static __always_inline struct usage *usage_of(void *map, __u32 id)
{
	struct usage *u = bpf_map_lookup_elem(map, &id);

	if (u)
		return u;
	struct usage zero = {};
	bpf_map_update_elem(map, &id, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &id);
}

static __always_inline __u32 current_uid(void)
{
	return (__u32)bpf_get_current_uid_gid();
}

/* a * b, saturating at SIZE_UNKNOWN (no device accepts it: left to the driver). */
static __always_inline __u64 mul_sat(__u64 a, __u64 b)
{
	if (a == 0)
		return 0;
	__u64 max_b = SIZE_UNKNOWN / a;

	/* Keeps clang from turning the test into a 128-bit multiply BPF has no call for. */
	barrier_var(max_b);
	return b > max_b ? SIZE_UNKNOWN : a * b;
}

/* Takes `size` bytes of bucket `s` unless the bucket would then exceed `limit` (0: no
 * limit): 0, or 1 with nothing taken. The bytes are added first and the sum checked, so
 * two racing allocations cannot both pass on the same headroom. */
static __always_inline int take(struct usage *s, __u64 size, __u64 limit)
{
	if (limit != 0 && size > limit)
		return 1;
	__u64 before = __sync_fetch_and_add(&s->bytes, size);

	if (limit != 0 && before > limit - size) {
		__sync_fetch_and_sub(&s->bytes, size);
		return 1;
	}
	__sync_fetch_and_add(&s->allocs, 1);
	return 0;
}

/* Gives back what take() took. */
static __always_inline void give(struct usage *s, __u64 size)
{
	if (s) {
		__sync_fetch_and_sub(&s->bytes, size);
		__sync_fetch_and_sub(&s->allocs, 1);
	}
}

/*
 * Entry of an allocation of `size` bytes by the calling process on device `dev` (-1:
 * unknown, no device bucket): reserves it in the process, user and device buckets and
 * returns 0, or returns 1 after counting the refusal in the bucket whose limit it would
 * cross. SIZE_UNKNOWN reserves nothing. Fails open (0, nothing held) when a counter cannot
 * be created.
 */
static __noinline int reserve(struct gpubpf_ctx_header *hdr, __s32 dev, __u64 size)
{
	__u32 slot = hdr->tid & (PENDING_SLOTS - 1);
	struct pending *pd = bpf_map_lookup_elem(&quota_pending, &slot);
	__u32 pid = hdr->pid;
	__u32 uid = current_uid();

	if (!pd)
		return 0;
	pd->tid = hdr->tid;
	pd->api_id = hdr->api_id;
	pd->held = 0;
	if (size == SIZE_UNKNOWN)
		return 0;
	struct usage *p = usage_of(&proc_usage, pid);
	struct usage *u = usage_of(&user_usage, uid);

	if (!p || !u)
		return 0;
	if (take(p, size, limit_bytes)) {
		__sync_fetch_and_add(&p->denied, 1);
		if (log_denials)
			bpf_printk("quota: pid %u denied %llu bytes (process limit)", pid, size);
		return 1;
	}
	if (take(u, size, user_limit_bytes)) {
		give(p, size);
		__sync_fetch_and_add(&u->denied, 1);
		if (log_denials)
			bpf_printk("quota: uid %u denied %llu bytes (user limit)", uid, size);
		return 1;
	}
	if (dev >= 0) {
		struct usage *d = usage_of(&dev_usage, (__u32)dev);

		if (!d) {
			give(p, size);
			give(u, size);
			return 0;
		}
		if (take(d, size, device_limit_bytes)) {
			give(p, size);
			give(u, size);
			__sync_fetch_and_add(&d->denied, 1);
			if (log_denials)
				bpf_printk("quota: device %d denied %llu bytes (device limit)", dev,
					   size);
			return 1;
		}
	}
	pd->size = size;
	pd->device = dev;
	pd->uid = uid;
	pd->held = 1;
	return 0;
}

static __always_inline int verdict(struct gpubpf_ctx_header *hdr, __s32 dev, __u64 size)
{
	return reserve(hdr, dev, size) ? CUDA_ERROR_OUT_OF_MEMORY : 0;
}

/* Adds `delta` bytes (two's complement: a negative one gives back) to the buckets of a
 * reservation, without changing their allocation counts. */
static __always_inline void adjust(__u32 pid, __u32 uid, __s32 dev, __u64 delta)
{
	struct usage *s = bpf_map_lookup_elem(&proc_usage, &pid);

	if (s)
		__sync_fetch_and_add(&s->bytes, delta);
	s = bpf_map_lookup_elem(&user_usage, &uid);
	if (s)
		__sync_fetch_and_add(&s->bytes, delta);
	if (dev >= 0) {
		__u32 d = (__u32)dev;

		s = bpf_map_lookup_elem(&dev_usage, &d);
		if (s)
			__sync_fetch_and_add(&s->bytes, delta);
	}
}

/*
 * Exit of an allocation call: settles this call's reservation. Success records the live
 * allocation (`handle` of `kind`) under the reserved size, or under `real` when that is
 * neither 0 nor SIZE_UNKNOWN and differs (the buckets change by the difference); failure
 * gives the reservation back. Nothing when the entry held nothing (refused, not policed,
 * no counter, or the policy was loaded while the call ran).
 */
static __noinline int settle(struct gpubpf_ctx_header *hdr, __u32 kind, __u64 handle,
			     __u64 real)
{
	__u32 slot = hdr->tid & (PENDING_SLOTS - 1);
	struct pending *pd = bpf_map_lookup_elem(&quota_pending, &slot);
	__u32 pid = hdr->pid;

	if (!pd || pd->tid != hdr->tid || pd->api_id != hdr->api_id || !pd->held)
		return 0;
	pd->held = 0;
	__u64 size = pd->size;
	__u32 uid = pd->uid;
	__s32 dev = pd->device;

	if (hdr->result != CUDA_SUCCESS) {
		give(bpf_map_lookup_elem(&proc_usage, &pid), size);
		give(bpf_map_lookup_elem(&user_usage, &uid), size);
		if (dev >= 0) {
			__u32 d = (__u32)dev;

			give(bpf_map_lookup_elem(&dev_usage, &d), size);
		}
		return 0;
	}
	if (real != 0 && real != SIZE_UNKNOWN && real != size) {
		adjust(pid, uid, dev, real - size);
		size = real;
	}
	struct quota_key key = { .handle = handle, .pid = pid, .kind = kind };
	struct quota_alloc a = {
		.size = size, .pid = pid, .uid = uid, .device = dev, .kind = kind,
	};

	bpf_map_update_elem(&quota_allocs, &key, &a, BPF_ANY);
	return 0;
}

static __always_inline void credit(struct usage *s, __u64 size)
{
	if (s) {
		__sync_fetch_and_sub(&s->bytes, size);
		__sync_fetch_and_add(&s->frees, 1);
	}
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

/* ---- linear allocations -------------------------------------------------------------- */

GPUBPF_ENTRY(cuMemAlloc, quota_alloc)
{
	return verdict(&ctx->hdr, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAlloc, quota_alloc_done)
{
	return settle(&ctx->hdr, QUOTA_DPTR, ctx->out.dptr, 0);
}

GPUBPF_ENTRY(cuMemAllocPitch, quota_pitch)
{
	/* The pitch is only known on exit: reserve the unpadded size. */
	return verdict(&ctx->hdr, ctx->hdr.device,
		       mul_sat(ctx->args.WidthInBytes, ctx->args.Height));
}

GPUBPF_EXIT(cuMemAllocPitch, quota_pitch_done)
{
	return settle(&ctx->hdr, QUOTA_DPTR, ctx->out.dptr,
		      mul_sat(ctx->out.pPitch, ctx->args.Height));
}

GPUBPF_ENTRY(cuMemAllocManaged, quota_managed)
{
	return verdict(&ctx->hdr, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocManaged, quota_managed_done)
{
	return settle(&ctx->hdr, QUOTA_DPTR, ctx->out.dptr, 0);
}

GPUBPF_ENTRY(cuMemAllocAsync, quota_async)
{
	return verdict(&ctx->hdr, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocAsync, quota_async_done)
{
	return settle(&ctx->hdr, QUOTA_DPTR, ctx->out.dptr, 0);
}

GPUBPF_ENTRY(cuMemAllocFromPoolAsync, quota_pool)
{
	return verdict(&ctx->hdr, ctx->hdr.device, ctx->args.bytesize);
}

GPUBPF_EXIT(cuMemAllocFromPoolAsync, quota_pool_done)
{
	return settle(&ctx->hdr, QUOTA_DPTR, ctx->out.dptr, 0);
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

	return verdict(&ctx->hdr, dev, dev == -2 ? SIZE_UNKNOWN : ctx->args.size);
}

GPUBPF_EXIT(cuMemCreate, quota_create_done)
{
	return settle(&ctx->hdr, QUOTA_HANDLE, ctx->out.handle, 0);
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

	/* SIZE_UNKNOWN (unreadable or impossible descriptor): the driver refuses it. */
	return verdict(&ctx->hdr, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuArrayCreate, quota_array_done)
{
	return settle(&ctx->hdr, QUOTA_ARRAY, ctx->out.pHandle, 0);
}

GPUBPF_ENTRY(cuArray3DCreate, quota_array3d)
{
	__u64 size = array3d_size(ctx->args.pAllocateArray, 1);

	return verdict(&ctx->hdr, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuArray3DCreate, quota_array3d_done)
{
	return settle(&ctx->hdr, QUOTA_ARRAY, ctx->out.pHandle, 0);
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

	return verdict(&ctx->hdr, ctx->hdr.device, size);
}

GPUBPF_EXIT(cuMipmappedArrayCreate, quota_mipmap_done)
{
	return settle(&ctx->hdr, QUOTA_MIPMAP, ctx->out.pHandle, 0);
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
