//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`attach`]: the attach-point catalog (every hookable CUDA driver function) and ctx ABI.
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.
//! - [`helpers`]: the standard helpers and [`helpers::standard_helpers`].
//! - [`interp`]: the reference interpreter with checked memory.
//! - [`maps`]: map types in shared memory.
//! - [`object`]: ELF policy objects: parsing, relocation, maps, globals, BTF line info.
//! - [`program`]: map binding and the prepare step (map references become addresses).
//! - [`registry`]: `$GPUBPF_HOME`, the control block, loaded programs and their links.
//! - [`sdk`]: the restricted-C SDK headers, embedded, and their generation.

pub mod attach;
pub mod dispatch;
pub mod helper_table;
pub mod helpers;
pub mod interp;
pub mod jit;
pub mod maps;
pub mod object;
pub mod program;
pub mod registry;
pub mod sdk;
