//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.
//! - [`helpers`]: the standard helpers and [`helpers::standard_helpers`].
//! - [`maps`]: map types in shared memory.
//! - [`program`]: map binding and the prepare step (map references become addresses).
//! - [`registry`]: `$GPUBPF_HOME`, the control block, loaded programs and their links.

pub mod helper_table;
pub mod helpers;
pub mod maps;
pub mod program;
pub mod registry;
