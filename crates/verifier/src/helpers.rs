//! Helper functions: ids, names and signatures, defined once.
//!
//! This table is the single source of truth for helpers. The verifier checks calls against
//! it, the runtime registers one implementation per id (and refuses ids not listed here), and
//! the SDK's C declarations (`policies/include/gpubpf_helpers.h`) are generated from it.
//! Standard helpers keep their Linux ids; gpubpf's own helpers live at
//! [`GPUBPF_HELPER_BASE`] and above.

/// First id of gpubpf's own helpers (Linux ids stay below this).
pub const GPUBPF_HELPER_BASE: i32 = 0x1_0000;

/// The most `gpubpf_delay_ns` sleeps in one call (100 ms): a policy slows a call down, it
/// cannot hang it.
pub const GPUBPF_MAX_DELAY_NS: u64 = 100_000_000;

/// What an argument register must hold at a helper call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// Any initialised scalar.
    Scalar,
    /// A scalar or an uninitialised register (trailing variadic arguments such as those of
    /// `bpf_trace_printk`); a pointer is rejected so that no address leaks.
    OptScalar,
    /// A map handle (`lddw rX, map`), any map type accepted by the helper.
    ConstMapPtr,
    /// Pointer to initialised memory of the map's key size (stack or map value).
    MapKey,
    /// Pointer to initialised memory of the map's value size (stack or map value).
    MapValue,
    /// Pointer to initialised memory; its size is the next argument ([`ArgKind::ConstSize`]).
    ReadableMem,
    /// Pointer to memory the helper writes (may be uninitialised); size is the next argument.
    WritableMem,
    /// Size of the preceding memory argument: a scalar with known bounds, > 0.
    ConstSize,
    /// Size of the preceding memory argument: a scalar with known bounds, >= 0.
    ConstSizeOrZero,
    /// A compile-time constant scalar (flags).
    ConstFlags,
    /// A compile-time constant size > 0 of memory the helper returns (`bpf_ringbuf_reserve`).
    ConstAllocSize,
    /// Pointer returned by `bpf_ringbuf_reserve`, after its NULL check; releases it.
    RingbufMem,
    /// Address of a static subprogram (`lddw rX, func` with `BPF_PSEUDO_FUNC`).
    Callback,
    /// Pointer to stack memory passed through to a callback, or NULL.
    StackOrNull,
    /// An application address: any scalar; the helper reads it with fault protection.
    UserPtr,
}

/// What a helper returns in `r0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetKind {
    /// An unknown scalar.
    Scalar,
    /// Nothing meaningful (`r0` becomes an unknown scalar, as in the kernel).
    Void,
    /// Pointer to a value of the map in argument 1, or NULL.
    MapValueOrNull,
    /// Pointer to ring-buffer memory of the size in argument 2, or NULL; must be released.
    RingbufMemOrNull,
}

/// Which maps a `ConstMapPtr` argument accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapClass {
    /// Array, hash, LRU hash and global-data maps.
    KeyValue,
    /// Array, hash, LRU hash and global-data maps that programs may write: not read-only
    /// ones (`.rodata`, `BPF_F_RDONLY_PROG`; Linux: "write into map forbidden").
    KeyValueWritable,
    /// Ring buffers.
    Ringbuf,
    /// Not applicable (no map argument).
    None,
}

/// A helper's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelperSig {
    /// Helper id (the `imm` of `call`).
    pub id: i32,
    /// C name, as declared in the SDK header.
    pub name: &'static str,
    /// C prototype's return type.
    pub c_ret: &'static str,
    /// C prototype's parameters, e.g. `"void *map, const void *key"`.
    pub c_params: &'static str,
    /// Kinds of r1.. (at most five).
    pub args: &'static [ArgKind],
    /// Return kind.
    pub ret: RetKind,
    /// Map class accepted by a `ConstMapPtr` argument.
    pub map_class: MapClass,
    /// One-line documentation.
    pub doc: &'static str,
}

use ArgKind as A;

/// Every helper gpubpf knows, sorted by id.
pub static HELPERS: &[HelperSig] = &[
    HelperSig {
        id: 1,
        name: "bpf_map_lookup_elem",
        c_ret: "void *",
        c_params: "void *map, const void *key",
        args: &[A::ConstMapPtr, A::MapKey],
        ret: RetKind::MapValueOrNull,
        map_class: MapClass::KeyValue,
        doc: "Pointer to the value stored under key, or NULL.",
    },
    HelperSig {
        id: 2,
        name: "bpf_map_update_elem",
        c_ret: "long",
        c_params: "void *map, const void *key, const void *value, __u64 flags",
        args: &[A::ConstMapPtr, A::MapKey, A::MapValue, A::Scalar],
        ret: RetKind::Scalar,
        map_class: MapClass::KeyValueWritable,
        doc: "Insert or update (flags: BPF_ANY, BPF_NOEXIST, BPF_EXIST); 0 or a negative errno.",
    },
    HelperSig {
        id: 3,
        name: "bpf_map_delete_elem",
        c_ret: "long",
        c_params: "void *map, const void *key",
        args: &[A::ConstMapPtr, A::MapKey],
        ret: RetKind::Scalar,
        map_class: MapClass::KeyValueWritable,
        doc: "Delete the entry under key; 0 or a negative errno.",
    },
    HelperSig {
        id: 5,
        name: "bpf_ktime_get_ns",
        c_ret: "__u64",
        c_params: "void",
        args: &[],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Monotonic time in nanoseconds.",
    },
    HelperSig {
        id: 6,
        name: "bpf_trace_printk",
        c_ret: "long",
        c_params: "const char *fmt, __u32 fmt_size, ...",
        args: &[A::ReadableMem, A::ConstSize, A::OptScalar, A::OptScalar, A::OptScalar],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Format up to three arguments (%d %u %x %lld %llu %llx %s %p %%) to the trace log.",
    },
    HelperSig {
        id: 7,
        name: "bpf_get_prandom_u32",
        c_ret: "__u32",
        c_params: "void",
        args: &[],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "A pseudo-random 32-bit number.",
    },
    HelperSig {
        id: 14,
        name: "bpf_get_current_pid_tgid",
        c_ret: "__u64",
        c_params: "void",
        args: &[],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Process id in the upper 32 bits, thread id in the lower 32 bits.",
    },
    HelperSig {
        id: 15,
        name: "bpf_get_current_uid_gid",
        c_ret: "__u64",
        c_params: "void",
        args: &[],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Group id in the upper 32 bits, user id in the lower 32 bits.",
    },
    HelperSig {
        id: 16,
        name: "bpf_get_current_comm",
        c_ret: "long",
        c_params: "void *buf, __u32 size_of_buf",
        args: &[A::WritableMem, A::ConstSize],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Copy the NUL-terminated process name into buf.",
    },
    HelperSig {
        id: 112,
        name: "bpf_probe_read_user",
        c_ret: "long",
        c_params: "void *dst, __u32 size, const void *unsafe_ptr",
        args: &[A::WritableMem, A::ConstSizeOrZero, A::UserPtr],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Copy size bytes from an application address; 0 or -EFAULT (dst zeroed).",
    },
    HelperSig {
        id: 114,
        name: "bpf_probe_read_user_str",
        c_ret: "long",
        c_params: "void *dst, __u32 size, const void *unsafe_ptr",
        args: &[A::WritableMem, A::ConstSizeOrZero, A::UserPtr],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Copy a NUL-terminated string from an application address; its length incl. NUL or -EFAULT.",
    },
    HelperSig {
        id: 130,
        name: "bpf_ringbuf_output",
        c_ret: "long",
        c_params: "void *ringbuf, void *data, __u64 size, __u64 flags",
        args: &[A::ConstMapPtr, A::ReadableMem, A::ConstSizeOrZero, A::Scalar],
        ret: RetKind::Scalar,
        map_class: MapClass::Ringbuf,
        doc: "Copy a record into the ring buffer; 0 or -EAGAIN when full (counted as a drop).",
    },
    HelperSig {
        id: 131,
        name: "bpf_ringbuf_reserve",
        c_ret: "void *",
        c_params: "void *ringbuf, __u64 size, __u64 flags",
        args: &[A::ConstMapPtr, A::ConstAllocSize, A::ConstFlags],
        ret: RetKind::RingbufMemOrNull,
        map_class: MapClass::Ringbuf,
        doc: "Reserve size bytes (a constant) in the ring buffer; NULL when full.",
    },
    HelperSig {
        id: 132,
        name: "bpf_ringbuf_submit",
        c_ret: "void",
        c_params: "void *data, __u64 flags",
        args: &[A::RingbufMem, A::Scalar],
        ret: RetKind::Void,
        map_class: MapClass::None,
        doc: "Publish a reserved record.",
    },
    HelperSig {
        id: 133,
        name: "bpf_ringbuf_discard",
        c_ret: "void",
        c_params: "void *data, __u64 flags",
        args: &[A::RingbufMem, A::Scalar],
        ret: RetKind::Void,
        map_class: MapClass::None,
        doc: "Drop a reserved record.",
    },
    HelperSig {
        id: 181,
        name: "bpf_loop",
        c_ret: "long",
        c_params: "__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags",
        args: &[A::Scalar, A::Callback, A::StackOrNull, A::ConstFlags],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Call callback_fn(i, callback_ctx) for i in 0..nr_loops (at most 1<<23) until it returns 1.",
    },
    HelperSig {
        id: GPUBPF_HELPER_BASE,
        name: "gpubpf_get_kernel_name",
        c_ret: "long",
        c_params: "__u64 f, char *buf, __u32 size",
        args: &[A::Scalar, A::WritableMem, A::ConstSize],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Copy the NUL-terminated name of CUfunction f (the driver's cuFuncGetName) into buf, \
              truncated and zero-padded to size; its length incl. NUL, or -ENOENT (no name: \
              not under the shim, or the driver has none) with buf zeroed.",
    },
    HelperSig {
        id: GPUBPF_HELPER_BASE + 1,
        name: "gpubpf_delay_ns",
        c_ret: "long",
        c_params: "__u64 ns",
        args: &[A::Scalar],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Sleep in the calling thread for ns nanoseconds, at most 100 ms a call \
              (GPUBPF_MAX_DELAY_NS); the nanoseconds requested after that bound.",
    },
    HelperSig {
        id: GPUBPF_HELPER_BASE + 2,
        name: "gpubpf_get_caller",
        c_ret: "long",
        c_params: "char *buf, __u32 size",
        args: &[A::WritableMem, A::ConstSize],
        ret: RetKind::Scalar,
        map_class: MapClass::None,
        doc: "Copy where the application called the hooked driver function from, as \
              `module+0xoffset` (the file name of the calling module and the offset of the \
              call in it, for addr2line), NUL-terminated and zero-padded to size; its length \
              incl. NUL, or -ENOENT (unknown: not under the shim) with buf zeroed. Walks \
              the stack: for debugging policies, not for every call.",
    },
];

/// Looks a helper up by id.
pub fn helper_by_id(id: i32) -> Option<&'static HelperSig> {
    HELPERS.iter().find(|h| h.id == id)
}

/// Looks a helper up by C name.
pub fn helper_by_name(name: &str) -> Option<&'static HelperSig> {
    HELPERS.iter().find(|h| h.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sorted_unique_and_at_most_five_args() {
        for w in HELPERS.windows(2) {
            assert!(w[0].id < w[1].id, "{} / {}", w[0].name, w[1].name);
        }
        assert!(HELPERS.iter().all(|h| h.args.len() <= 5));
    }
}
