//! Static verifier for gpubpf policy programs.
//!
//! A JIT-compiled policy runs inside the user's CUDA process without runtime checks, so every
//! program this verifier accepts must be memory-safe and terminate. The design follows the
//! Linux verifier:
//!
//! 1. [`cfg`](mod@cfg): strict decoding (reserved fields zero, valid registers), jump targets inside
//!    the program, inside the same subprogram and never into the second slot of `lddw`; no
//!    unreachable instruction; every subprogram ends in `exit` or `ja`; no writes to r10;
//!    no recursion (bpf-to-bpf calls and `bpf_loop` callbacks) and call chains of at most 8
//!    frames; a backward register-liveness analysis used by pruning.
//! 2. [`engine`]: depth-first exploration of every path over abstract states ([`state`]):
//!    per register uninitialised / scalar ([`scalar`]: s64/u64/s32/u32 ranges and known
//!    bits, [`tnum`]) / pointer to ctx, stack (per frame), map value, map value or NULL, map
//!    handle, ring-buffer record (or NULL), function, each with a fixed and a variable
//!    offset; per stack byte uninitialised / data / zero / spilled register (full state).
//!    States are stored at jump targets (at most 64 finished ones per point, the worst
//!    evicted, so the cost stays linear); a state covered by a finished one is pruned; a
//!    state *equal* to one still on the current path is an infinite loop; exploration stops
//!    at a processed-instruction budget (default 1 000 000) and 8 192 pending branches.
//!    Coverage ([`equiv`]) maps pointer and reference ids one to one between the stored and
//!    the current state, 0 only to 0: an id names an object, and what the stored state
//!    proved about "these two registers point into one object" must hold of the current
//!    one. Instructions no path executed are listed in [`VerifyStats::unreached`] and become
//!    traps before preparation ([`sanitize`]).
//! 3. [`mem`]: every load, store, atomic and helper memory argument is checked against its
//!    region (stack frame `[-512, 0)`, map value size, ring-buffer record size, ctx fields
//!    with per-field read/write permission from [`ctx::ProgramContext`]), with natural
//!    alignment on the stack, ctx and atomics; stack reads only of initialised bytes;
//!    variable offsets only when bounded; pointers spilled only as whole 8-byte slots.
//! 4. [`exec`], [`scalar_alu`]: ALU transfer functions; pointers allow only `+`/`-` of a
//!    bounded scalar (64-bit), never on map handles, or-NULL pointers or functions, never
//!    pointer ± pointer; a 32-bit copy of a pointer is a leak. The direct-value `lddw`
//!    form is accepted only on single-entry arrays (globals), as in Linux.
//! 5. [`branch`]: comparisons refine both operands on both branches (64- and 32-bit,
//!    signed and unsigned, `jset`), propagate to copies sharing a scalar id (registers and
//!    spills), prune impossible branches; a NULL check turns every copy of an or-NULL
//!    pointer into a pointer (or NULL, releasing a ring-buffer reference); other pointer
//!    comparisons are rejected unless both are known to point into the same object
//!    ([`branch::same_object`]: copies of one lookup or reservation, the ctx, one frame's
//!    stack, or a global's value) at constant offsets, which decides them statically.
//! 6. [`call`]: helper arguments against [`helpers::HELPERS`] (map helpers that write refuse
//!    read-only maps), r1–r5 clobbered, return
//!    types; ring-buffer records tracked as references that must be submitted or discarded
//!    on every path; bpf-to-bpf frames; `bpf_loop` callbacks re-entered until a fixpoint,
//!    scalars that keep changing between rounds widened to unknown ([`widen`]);
//!    return rules at program exit; no pointer in r0.
//! 7. [`error`], [`print`](mod@print): errors as data with a bpftool-style listing, C lines, register
//!    states and a hint; a kernel-style verbose log; [`VerifyStats`].
//!
//! ```no_run
//! use gpubpf_verifier::{ctx::*, Verifier, VerifierConfig, VerifyInput};
//! # let insns = vec![];
//! let ctx = ProgramContext { description: "test".into(), ctx: CtxLayout::default(), ret: ReturnRule::Any };
//! let stats = Verifier::new(&VerifierConfig::default())
//!     .verify(&VerifyInput { insns: &insns, maps: &[], ctx: &ctx, line_info: None });
//! ```

pub mod branch;
pub mod call;
pub mod cfg;
pub mod ctx;
pub mod engine;
pub mod equiv;
pub mod error;
pub mod exec;
pub mod helpers;
pub mod linux_helpers;
pub mod mem;
pub mod print;
pub mod sanitize;
pub mod scalar;
pub mod scalar_alu;
pub mod state;
pub mod tnum;
pub mod widen;

use std::time::Duration;

use gpubpf_isa::Insn;
use serde::Serialize;

pub use error::{Diagnostic, ErrorKind, RegNote, VerifierError};

/// Kinds of maps, as far as the verifier cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum MapKind {
    /// Array (also the one-entry arrays backing `.rodata/.data/.bss`).
    Array,
    /// Hash map.
    Hash,
    /// LRU hash map.
    LruHash,
    /// Ring buffer (events); no keys or values.
    Ringbuf,
}

/// One map a program may reference by index (`lddw` with `MapIdx`/`MapIdxValue`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MapInfo {
    /// Map name (used in diagnostics).
    pub name: String,
    pub kind: MapKind,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    /// Programs may not store into its values or write it through helpers (a frozen
    /// `.rodata`, or a map the process may only read).
    pub read_only: bool,
}

impl MapInfo {
    /// A writable map.
    pub fn new(
        name: &str,
        kind: MapKind,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> Self {
        MapInfo {
            name: name.to_string(),
            kind,
            key_size,
            value_size,
            max_entries,
            read_only: false,
        }
    }
}

/// C source line of an instruction (from BTF line info).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LineInfo {
    /// First instruction slot this line covers (until the next entry).
    pub pc: usize,
    /// Source file name.
    pub file: std::sync::Arc<str>,
    /// 1-based line number.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The source text of the line.
    pub source: std::sync::Arc<str>,
}

/// SHA-256 (hex) of this verifier's and the ISA crate's sources, computed by the build
/// script: two builds with the same value decide every input identically. Caches of
/// verification results key their entries with it (`gpubpf_runtime::program::verify_cache`).
pub const SOURCE_HASH: &str = env!("GPUBPF_VERIFIER_SOURCE_HASH");

/// How much the verifier writes to its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// No log (errors still carry a listing and hint).
    #[default]
    Off,
    /// Branches, prunes and the final statistics.
    Basic,
    /// Every processed instruction with the registers it wrote (kernel log level 2).
    Verbose,
}

/// Verifier settings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VerifierConfig {
    /// Maximum number of instructions processed over all paths before giving up.
    pub budget: u64,
    /// Log detail.
    pub log_level: LogLevel,
    /// Maximum log size in bytes; the log is truncated (with a note) beyond it.
    pub log_limit: usize,
    /// Maximum program length in slots.
    pub max_insns: usize,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        VerifierConfig {
            budget: 1_000_000,
            log_level: LogLevel::Off,
            log_limit: 16 << 20,
            max_insns: 1_000_000,
        }
    }
}

/// What to verify.
#[derive(Clone, Copy, Debug)]
pub struct VerifyInput<'a> {
    /// The program (entry at slot 0, subprograms after it).
    pub insns: &'a [Insn],
    /// Maps referenced by `lddw` map indices.
    pub maps: &'a [MapInfo],
    /// Where the program runs: ctx layout and return rule.
    pub ctx: &'a ctx::ProgramContext,
    /// C source lines, sorted by `pc`, for diagnostics.
    pub line_info: Option<&'a [LineInfo]>,
}

/// Statistics of one verification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyStats {
    /// Instructions processed over all explored paths.
    pub insns_processed: u64,
    /// States stored for pruning.
    pub states_stored: u64,
    /// Largest number of stored states alive at once.
    pub peak_states: u64,
    /// Paths cut short because a stored state covered them.
    pub states_pruned: u64,
    /// Stack depth in bytes per subprogram (in order of their first slot).
    pub stack_depth: Vec<u32>,
    /// Instructions (first slots) that no explored path executes: code behind branches
    /// the verifier decided statically. [`sanitize::sanitize_dead_code`] turns them into
    /// traps before a program is prepared, so that a wrong decision or prune can never run
    /// unchecked code.
    pub unreached: Vec<usize>,
    /// Offsets of the ctx fields the program reads on some path (every read of the ctx is
    /// a load at a constant offset the verifier checks, and no helper takes the ctx), so a
    /// caller may skip filling a field nobody reads, e.g. `hdr.device`, which costs the shim
    /// a driver call.
    pub ctx_fields_read: Vec<u32>,
    /// Wall-clock time spent.
    #[serde(serialize_with = "ser_duration")]
    pub duration: Duration,
    /// The log (empty unless a log level was chosen).
    pub log: String,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// The verifier.
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    config: VerifierConfig,
}

impl Verifier {
    pub fn new(config: &VerifierConfig) -> Self {
        Verifier {
            config: config.clone(),
        }
    }

    /// Verifies one program. `Ok` means it is memory-safe and terminates.
    pub fn verify(&self, input: &VerifyInput<'_>) -> Result<VerifyStats, Box<VerifierError>> {
        engine::run(&self.config, input)
    }
}

/// Verifies with the default configuration.
pub fn verify(input: &VerifyInput<'_>) -> Result<VerifyStats, Box<VerifierError>> {
    Verifier::default().verify(input)
}
