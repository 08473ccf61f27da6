//! The attach-point catalog: every hookable CUDA driver function, one source of truth.
//!
//! - [`generated`] (written by `tools/gen-catalog/gen_catalog.py` from NVIDIA's
//!   `cudaTypedefs.h`/`cuda.h`): base names, exported symbols per variant (`_v2`, `_ptsz`, …),
//!   the CUDA version each appeared in, parameter names, C types and classification.
//! - [`enrich`]: hand-written writability and launch blocks for the functions users hook most.
//! - [`aliases`]: runtime-API names (`cudaMalloc` → `cuMemAlloc`).
//! - [`abi`]: the ctx ABI (header, argument slots, launch block, out-values), and the
//!   [`ProgramContext`](gpubpf_verifier::ctx::ProgramContext) handed to the verifier.
//! - [`header`]: generator of `policies/include/gpubpf_ctx.h`.
//!
//! Typical use:
//!
//! ```
//! use gpubpf_runtime::attach::{self, Phase};
//! let (point, phase) = attach::parse_section("cudaret/cuMemGetInfo").unwrap();
//! assert_eq!((point.name, phase), ("cuMemGetInfo", Phase::Exit));
//! let pc = point.program_context(phase); // for the verifier
//! assert!(pc.ctx.fields.iter().any(|f| f.name == "out.free" && f.writable));
//! assert_eq!(attach::resolve("cudaMalloc").unwrap().name, "cuMemAlloc");
//! ```

pub mod abi;
pub mod aliases;
mod catalog;
pub mod enrich;
#[rustfmt::skip] // written by tools/gen-catalog/gen_catalog.py; kept byte-identical to its output
pub mod generated;
pub mod header;
mod resolve;

pub use abi::{Access, CtxFieldInfo, Section};
pub use aliases::Alias;
pub use catalog::{
    aliases as all_aliases, all, by_id, cuda_headers_version, AttachPoint, Param, ParamClass,
    PerThread, Variant,
};
pub use enrich::{Category, Enrichment, LaunchSource};
pub use resolve::{
    lookup, parse_section, resolve, resolve_alias_targets, split_section, Resolved, Via,
};

/// When a program runs relative to the hooked call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Before the real call (`SEC("cuda/<name>")`): may rewrite writable arguments and
    /// return a `CUresult` verdict to skip the call.
    Entry,
    /// After the real call (`SEC("cudaret/<name>")`): sees the result and out-values, may
    /// override `hdr.result` and writable out-values.
    Exit,
}

impl Phase {
    /// Section prefix including the slash: `cuda/` or `cudaret/`.
    pub fn section_prefix(self) -> &'static str {
        match self {
            Phase::Entry => "cuda/",
            Phase::Exit => "cudaret/",
        }
    }

    /// `"entry"` or `"exit"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Entry => "entry",
            Phase::Exit => "exit",
        }
    }

    /// Value of `hdr.phase`.
    pub fn ctx_value(self) -> u32 {
        match self {
            Phase::Entry => abi::PHASE_ENTRY,
            Phase::Exit => abi::PHASE_EXIT,
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verifier's view of a program in `section` (`cuda/<name>` or `cudaret/<name>`):
/// shorthand for [`parse_section`] then [`AttachPoint::program_context`].
pub fn program_context_for_section(
    section: &str,
) -> Result<gpubpf_verifier::ctx::ProgramContext, AttachError> {
    parse_section(section).map(|(point, phase)| point.program_context(phase))
}

/// Errors of attach-point resolution.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttachError {
    /// The name is neither a driver base name, an exported symbol nor a runtime alias.
    #[error("unknown attach point `{name}`{}", suggestion_text(.suggestion))]
    UnknownName {
        /// The name as given.
        name: String,
        /// The closest known name, if one is close enough.
        suggestion: Option<String>,
    },
    /// The section name does not have an attach-point form.
    #[error(
        "section `{section}` is not an attach point: expected `cuda/<name>` (entry) or \
         `cudaret/<name>` (exit), where <name> is a driver function (`cuMemAlloc`), an \
         exported symbol (`cuMemAlloc_v2`) or a runtime alias (`cudaMalloc`)"
    )]
    BadSection {
        /// The section name as given.
        section: String,
    },
}

fn suggestion_text(s: &Option<String>) -> String {
    match s {
        Some(s) => format!("; did you mean `{s}`?"),
        None => "; run `gpubpf attach-points` for the list".to_string(),
    }
}

#[cfg(test)]
mod tests;
