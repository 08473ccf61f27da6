//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`attach`]: the attach-point catalog (every hookable CUDA driver function) and ctx ABI.
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.

pub mod attach;
pub mod helper_table;
