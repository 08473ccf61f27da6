//! Implementations of the standard helpers listed in `gpubpf_verifier::helpers::HELPERS`
//! (all but `bpf_loop`, which both engines implement themselves), and
//! [`standard_helpers`], which builds the [`HelperTable`] with all of them.
//!
//! Helpers trust what the verifier proved about their arguments: a map argument is the
//! address of a live [`crate::maps::Map`] (the handle the prepare step put into `lddw`), a
//! key/value pointer has the map's key/value size readable, a memory argument has the size
//! given in the next argument. Application pointers (`probe_read_user*`) are never
//! dereferenced directly: they are read with `process_vm_readv` on our own process, which
//! fails cleanly (`-EFAULT`) on an unmapped address.

pub mod caller;
mod clock;
pub mod kernel;
mod kernel_cache;
pub(crate) mod map_ops;
mod misc;
mod probe;
pub mod text;
pub mod trace;

use crate::helper_table::{HelperFn, HelperTable};
use gpubpf_verifier::helpers::{helper_by_id, HELPERS};

pub use kernel::set_kernel_name_resolver;
pub use probe::{read_user, read_user_str};

/// Id of `bpf_loop`, implemented by the engines rather than through the table.
pub const BPF_LOOP_ID: i32 = 181;

/// `(id, implementation)` of every helper this module implements.
pub const IMPLEMENTATIONS: &[(i32, HelperFn)] = &[
    (1, map_ops::map_lookup_elem),
    (2, map_ops::map_update_elem),
    (3, map_ops::map_delete_elem),
    (5, misc::ktime_get_ns),
    (6, trace::trace_printk),
    (7, misc::get_prandom_u32),
    (14, misc::get_current_pid_tgid),
    (15, misc::get_current_uid_gid),
    (16, misc::get_current_comm),
    (112, probe::probe_read_user),
    (114, probe::probe_read_user_str),
    (130, map_ops::ringbuf_output),
    (131, map_ops::ringbuf_reserve),
    (132, map_ops::ringbuf_submit),
    (133, map_ops::ringbuf_discard),
    (
        gpubpf_verifier::helpers::GPUBPF_HELPER_BASE,
        kernel::get_kernel_name,
    ),
    (
        gpubpf_verifier::helpers::GPUBPF_HELPER_BASE + 1,
        misc::delay_ns,
    ),
    (
        gpubpf_verifier::helpers::GPUBPF_HELPER_BASE + 2,
        caller::get_caller,
    ),
];

/// A helper table with every standard helper registered under its `HELPERS` name.
pub fn standard_helpers() -> HelperTable {
    let mut t = HelperTable::new();
    for &(id, f) in IMPLEMENTATIONS {
        match helper_by_id(id) {
            Some(sig) => {
                let args = u8::try_from(sig.args.len()).unwrap_or(5);
                t.register_with_args(id, sig.name, f, args)
            }
            None => tracing::error!(id, "helper implementation without a signature in HELPERS"),
        }
    }
    t
}

/// Ids listed in `HELPERS` that no implementation covers (besides `bpf_loop`).
pub fn missing_implementations() -> Vec<i32> {
    HELPERS
        .iter()
        .map(|h| h.id)
        .filter(|id| *id != BPF_LOOP_ID && !IMPLEMENTATIONS.iter().any(|(i, _)| i == id))
        .collect()
}

/// The calling process's pid, without a system call (cached for the process, refreshed
/// after `fork`).
pub fn current_pid() -> u32 {
    misc::pid()
}

/// A negative errno as helpers return it in `r0`.
pub(crate) fn neg_errno(e: i32) -> u64 {
    (-i64::from(e)) as u64
}

#[cfg(test)]
mod tests;
