//! The gpubpf runtime: ELF loading, maps, helpers, interpreter, JIT, attach-point catalog,
//! registry.
