/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * gpubpf.h — the restricted-C SDK for gpubpf policies.
 *
 * Self-contained: needs no kernel, libc or libbpf headers. Compile a policy with
 *
 *     clang -O2 -g -target bpf -mcpu=v3 -I policies/include -c x.bpf.c -o x.o
 *
 * or simply `gpubpf build x.bpf.c` (which carries an embedded copy of these headers).
 *
 * Programs are placed in sections naming the CUDA driver function they hook:
 *     SEC("cuda/cuMemAlloc")      runs on entry (return 0 to proceed, or a CUresult)
 *     SEC("cudaret/cuMemAlloc")   runs on exit
 * Maps are declared the libbpf way, in SEC(".maps") with __uint/__type/__array; globals in
 * .rodata/.data/.bss become one-entry array maps, and `const volatile` globals can be set at
 * load time (`gpubpf load x.o --set limit_bytes=8GiB`).
 */
#ifndef __GPUBPF_H__
#define __GPUBPF_H__

/* ---- fixed-width types ------------------------------------------------------------- */
typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

typedef __s8 s8;
typedef __u8 u8;
typedef __s16 s16;
typedef __u16 u16;
typedef __s32 s32;
typedef __u32 u32;
typedef __s64 s64;
typedef __u64 u64;

#ifndef __cplusplus
#ifndef bool
typedef _Bool bool;
#define bool bool
#define true 1
#define false 0
#endif
#endif

#ifndef NULL
#define NULL ((void *)0)
#endif

_Static_assert(sizeof(__u64) == 8 && sizeof(void *) == 8, "gpubpf.h expects -target bpf");

/* ---- attributes and compiler helpers (as libbpf's bpf_helpers.h) -------------------- */
#define SEC(name) __attribute__((section(name), used))

#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
#ifndef __noinline
#define __noinline __attribute__((noinline))
#endif
#ifndef __weak
#define __weak __attribute__((weak))
#endif
#ifndef __hidden
#define __hidden __attribute__((visibility("hidden")))
#endif
#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#endif
#ifndef unlikely
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif
#ifndef barrier
#define barrier() asm volatile("" ::: "memory")
#endif
/* Hide a variable's value from the optimiser (keeps a bounds check where it is written). */
#ifndef barrier_var
#define barrier_var(var) asm volatile("" : "+r"(var))
#endif
#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif
#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

#define ___gpubpf_concat(a, b) a##b
#define ___gpubpf_apply(fn, n) ___gpubpf_concat(fn, n)

/* ---- BTF-defined maps ------------------------------------------------------------- */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define __array(name, val) typeof(val) *name[]
#define __ulong(name, val) enum { ___gpubpf_apply(__unique_value, __COUNTER__) = val } name

/* Map types: the Linux values. gpubpf implements ARRAY, HASH, LRU_HASH and RINGBUF. */
enum bpf_map_type {
	BPF_MAP_TYPE_UNSPEC = 0,
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

/* Flags of bpf_map_update_elem. */
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

/* Map creation flags (map_flags). */
enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_RDONLY_PROG = (1U << 7),
	BPF_F_WRONLY_PROG = (1U << 8),
	BPF_F_MMAPABLE = (1U << 10),
};

/* __uint(pinning, …) of a map in SEC(".maps"), as libbpf: maps are private to their
 * object unless pinned by name, which shares one map across every object that declares it
 * (same definition) and keeps it after unload (`gpubpf maps unpin` releases it). */
enum libbpf_pin_type {
	LIBBPF_PIN_NONE = 0,
	LIBBPF_PIN_BY_NAME = 1,
};

/* Flags of bpf_ringbuf_output/submit/discard. */
enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};

/* Legacy map definitions, in SEC("maps"). */
struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

/* ---- CUDA results a verdict may return --------------------------------------------- */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_UNKNOWN 999

/* ---- helpers (generated from the runtime's helper table) ---------------------------- */
#include "gpubpf_helpers.h"

/* bpf_printk("fmt", args...): at most three arguments, formatted into the trace log. */
#define bpf_printk(fmt, ...)                                                   \
	({                                                                     \
		static const char ____fmt[] = fmt;                             \
		bpf_trace_printk(____fmt, sizeof(____fmt), ##__VA_ARGS__);      \
	})

/* ---- ctx structures of the attach points (generated from the catalog) -------------- */
#include "gpubpf_ctx.h"

/*
 * Typed program definitions (the gpubpf counterpart of libbpf's BPF_PROG): the program gets
 * `ctx` typed for the hooked function, so the call's arguments are named fields.
 *
 *     GPUBPF_ENTRY(cuMemAlloc, deny_big)             // SEC("cuda/cuMemAlloc")
 *     {
 *             return ctx->args.bytesize > (1ULL << 30) ? CUDA_ERROR_OUT_OF_MEMORY : 0;
 *     }
 *
 *     GPUBPF_EXIT(cuMemAlloc, account)               // SEC("cudaret/cuMemAlloc")
 *     {
 *             if (ctx->hdr.result == CUDA_SUCCESS) record(ctx->out.dptr, ctx->args.bytesize);
 *             return 0;
 *     }
 */
#define GPUBPF_ENTRY(api, name)                                                \
	SEC("cuda/" #api) int name(struct gpubpf_##api##_entry *ctx)
#define GPUBPF_EXIT(api, name)                                                 \
	SEC("cudaret/" #api) int name(struct gpubpf_##api##_exit *ctx)

#endif /* __GPUBPF_H__ */
