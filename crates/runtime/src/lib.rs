//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.

pub mod helper_table;
pub mod helpers;
pub mod maps;
pub mod registry;
