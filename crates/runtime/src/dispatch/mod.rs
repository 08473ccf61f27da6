//! Running policies at an attach point: what the shim does on every hooked call.
//!
//! - [`PolicySet::load`] reads the registry, **re-verifies** every program at every link (a
//!   process never trusts that the CLI verified), binds the recorded maps, prepares and
//!   JIT-compiles (or, for a process's first build, leaves the programs to the
//!   interpreter until [`Chain::to_native`] catches up: [`Tier`]), and groups the programs per attach point into [`Chain`]s sorted by
//!   priority. The per-object and per-link steps are [`LoadedObject::open`] and
//!   [`LoadedObject::build`], which `gpubpf prog dump` also uses.
//! - [`CtxBuf`] is the ctx of one call, laid out as `attach` describes (header, argument
//!   slots, out-values).
//! - [`Chain::call`] runs entry programs (first non-zero verdict wins and skips the real
//!   call), the real call, then exit programs (which may override `hdr.result`);
//!   [`Chain::entry_words`] and [`Chain::exit_words`] do the same on a ctx of words without
//!   allocating, around the shim's own real call.
//!
//! The `gpubpf demo` command drives a mock CUDA driver through this module; the shim's
//! wrappers will do the same around the real driver.

mod attached;
mod build;
mod chain;
mod ctx;
mod parallel;
mod summary;
mod words;

pub use attached::{AttachedProgram, LeanProgram, RunError, Stack, Tier, WordsError};
pub use build::{BuiltProgram, LoadedObject, VerifiedProgram};
pub use chain::{CallOutcome, Chain, FailedObject, PolicySet};
pub use ctx::CtxBuf;
pub use summary::ChainSummary;
pub use words::{Decision, EntryVerdict, NoRecorder, RunRecorder, FAIL_CLOSED_RESULT};

/// Errors building or running policies.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("attach point `{point}` has no ctx field `{field}`")]
    NoSuchField { point: &'static str, field: String },
    #[error("registry")]
    Registry(#[from] crate::registry::RegistryError),
    #[error("loaded object `{object}`: {message}")]
    Object { object: String, message: String },
    #[error("loaded object `{object}`: map `{map}` no longer matches the recorded definition")]
    MapChanged { object: String, map: String },
    #[error("program `{program}` of `{object}` was rejected when re-verified: {message}")]
    Rejected {
        object: String,
        program: String,
        message: String,
    },
    #[error("attach point")]
    Attach(#[from] crate::attach::AttachError),
    #[error("prepare")]
    Prepare(#[from] crate::program::PrepareError),
    #[error("jit")]
    Jit(#[from] crate::jit::JitError),
    #[error("interpreter")]
    Interpret {
        #[source]
        source: crate::interp::ExecError,
    },
}
