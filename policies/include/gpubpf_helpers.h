/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * GENERATED from gpubpf_verifier::helpers::HELPERS — do not edit.
 * Regenerate: GPUBPF_BLESS=1 cargo test -p gpubpf-runtime sdk
 */
#ifndef __GPUBPF_HELPERS_H__
#define __GPUBPF_HELPERS_H__

/* bpf_map_lookup_elem (id 1): Pointer to the value stored under key, or NULL. */
static void *(* const bpf_map_lookup_elem)(void *map, const void *key) = (void *) 1;

/* bpf_map_update_elem (id 2): Insert or update (flags: BPF_ANY, BPF_NOEXIST, BPF_EXIST); 0 or a negative errno. */
static long (* const bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *) 2;

/* bpf_map_delete_elem (id 3): Delete the entry under key; 0 or a negative errno. */
static long (* const bpf_map_delete_elem)(void *map, const void *key) = (void *) 3;

/* bpf_ktime_get_ns (id 5): Monotonic time in nanoseconds. */
static __u64 (* const bpf_ktime_get_ns)(void) = (void *) 5;

/* bpf_trace_printk (id 6): Format up to three arguments (%d %u %x %lld %llu %llx %s %p %%) to the trace log. */
static long (* const bpf_trace_printk)(const char *fmt, __u32 fmt_size, ...) = (void *) 6;

/* bpf_get_prandom_u32 (id 7): A pseudo-random 32-bit number. */
static __u32 (* const bpf_get_prandom_u32)(void) = (void *) 7;

/* bpf_get_current_pid_tgid (id 14): Process id in the upper 32 bits, thread id in the lower 32 bits. */
static __u64 (* const bpf_get_current_pid_tgid)(void) = (void *) 14;

/* bpf_get_current_uid_gid (id 15): Group id in the upper 32 bits, user id in the lower 32 bits. */
static __u64 (* const bpf_get_current_uid_gid)(void) = (void *) 15;

/* bpf_get_current_comm (id 16): Copy the NUL-terminated process name into buf. */
static long (* const bpf_get_current_comm)(void *buf, __u32 size_of_buf) = (void *) 16;

/* bpf_probe_read_user (id 112): Copy size bytes from an application address; 0 or -EFAULT (dst zeroed). */
static long (* const bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *) 112;

/* bpf_probe_read_user_str (id 114): Copy a NUL-terminated string from an application address; its length incl. NUL or -EFAULT. */
static long (* const bpf_probe_read_user_str)(void *dst, __u32 size, const void *unsafe_ptr) = (void *) 114;

/* bpf_ringbuf_output (id 130): Copy a record into the ring buffer; 0 or -EAGAIN when full (counted as a drop). */
static long (* const bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *) 130;

/* bpf_ringbuf_reserve (id 131): Reserve size bytes (a constant) in the ring buffer; NULL when full. */
static void *(* const bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *) 131;

/* bpf_ringbuf_submit (id 132): Publish a reserved record. */
static void (* const bpf_ringbuf_submit)(void *data, __u64 flags) = (void *) 132;

/* bpf_ringbuf_discard (id 133): Drop a reserved record. */
static void (* const bpf_ringbuf_discard)(void *data, __u64 flags) = (void *) 133;

/* bpf_loop (id 181): Call callback_fn(i, callback_ctx) for i in 0..nr_loops (at most 1<<23) until it returns 1. */
static long (* const bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *) 181;

/* gpubpf's own helpers (ids from 0x10000). */

/* gpubpf_get_kernel_name (id 65536): Copy the NUL-terminated name of CUfunction f (the driver's cuFuncGetName) into buf, truncated and zero-padded to size; its length incl. NUL, or -ENOENT (no name: not under the shim, or the driver has none) with buf zeroed. */
static long (* const gpubpf_get_kernel_name)(__u64 f, char *buf, __u32 size) = (void *) 65536;

/* gpubpf_delay_ns (id 65537): Sleep in the calling thread for ns nanoseconds, at most 100 ms a call (GPUBPF_MAX_DELAY_NS); the nanoseconds requested after that bound. */
static long (* const gpubpf_delay_ns)(__u64 ns) = (void *) 65537;

/* gpubpf_get_caller (id 65538): Copy where the application called the hooked driver function from, as `module+0xoffset` (the file name of the calling module and the offset of the call in it, for addr2line), NUL-terminated and zero-padded to size; its length incl. NUL, or -ENOENT (unknown: not under the shim) with buf zeroed. Walks the stack: for debugging policies, not for every call. */
static long (* const gpubpf_get_caller)(char *buf, __u32 size) = (void *) 65538;

#endif /* __GPUBPF_HELPERS_H__ */
