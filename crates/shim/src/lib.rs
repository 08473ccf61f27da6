//! `libgpubpf.so`: the `LD_PRELOAD` shim that runs gpubpf policies at CUDA driver entry
//! points, inside unmodified CUDA processes.
//!
//! - [`generated`]: one exported `extern "C"` wrapper per exported driver symbol of the
//!   attach catalog (all `_v2`/`_ptsz`/`_ptds` variants, each with its exact C ABI),
//!   written by [`codegen`](../src/gpubpf/codegen.rs.html) from the catalog; a test fails
//!   when it is stale.
//! - [`hot`]: what every wrapper does — one atomic load when nothing is attached; the ctx
//!   on the stack, entry programs, the real call, exit programs otherwise.
//! - [`route`]: the exported `dlsym` (tail jump to the real one for everything but the
//!   driver's catalogued symbols) and the `cuGetProcAddress` routing by returned pointer.
//! - [`driver`]: the real driver library (`libcuda.so.1`, `GPUBPF_CUDA_LIBRARY`), its
//!   symbols, and the address → exported symbol map.
//! - [`init`]: lazy initialisation on the first driver call, the registry, the watcher
//!   thread that republishes on every registry change.
//!
//! Nothing panics or unwinds into the application: policy runs and initialisation are
//! entered through `catch_unwind`, and every failure leaves calls going to the driver
//! (fail open).

pub mod abi_types;
mod caller;
#[cfg(test)]
mod codegen;
pub mod driver;
#[rustfmt::skip] // written by codegen.rs; kept byte-identical to its output
pub mod generated;
pub mod hot;
pub mod init;
mod native;
pub mod record;
pub mod route;
