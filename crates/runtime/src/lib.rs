//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
//!
//! - [`helper_table`]: helper implementations by id, shared by the interpreter and the JIT.
//! - [`interp`]: the reference interpreter with checked memory.
//! - [`object`]: ELF policy objects: parsing, relocation, maps, globals, BTF line info.
//! - [`sdk`]: the restricted-C SDK headers, embedded, and their generation.

pub mod helper_table;

pub mod interp;
pub mod jit;
pub mod maps;
pub mod object;
pub mod registry;
pub mod sdk;
