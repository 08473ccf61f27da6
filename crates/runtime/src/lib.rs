//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.
//! - [`interp`]: the reference interpreter with checked memory.

pub mod helper_table;
pub mod interp;
