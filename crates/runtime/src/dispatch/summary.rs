//! What a policed call reads of its chain, in one copyable line the shim keeps beside its
//! own thread state.
//!
//! In a real CUDA application the driver's work between two calls evicts what a call
//! touched, and a policed call's loads depend on each other: the attach point's chain
//! pointer, then the chain's line (its flags, the address of its programs), then the
//! program's line (its entry point), then the code, then the map value the code updates.
//! Each step is a cache miss that cannot start before the one before it has ended. A
//! [`ChainSummary`] holds what the chain's and its programs' lines answer for the common
//! case — the flags, the statistics slot and, when a phase has exactly one native program
//! that is not a shadow, that program's entry point — so that a thread which keeps it
//! (with the chain it was taken from, alive) goes from the chain pointer straight to the
//! code: two dependent misses fewer per call (docs/shim.md, "The chain's summary").

use super::attached::LeanProgram;
use super::chain::Chain;

/// See the module's notes. Taken with [`Chain::summary`]; valid while that chain lives.
/// 64 bytes, one cache line where its holder aligns it (the shim's thread state does); not
/// `align(64)` itself, which would make every stack frame holding one realign its stack.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct ChainSummary {
    /// The only entry program, when it is native and not a shadow (and the chain is not
    /// broken).
    pub(super) entry: Option<LeanProgram>,
    /// The only exit program, likewise.
    pub(super) exit: Option<LeanProgram>,
    /// [`Chain::stats_slot`].
    pub stats_slot: Option<u32>,
    bits: u8,
}

const _: () = assert!(std::mem::size_of::<ChainSummary>() <= 64);

impl ChainSummary {
    /// The summary of no chain: nothing to run, nothing read (a `const` initial value for
    /// a thread-local; never used for a call before [`Chain::summary`] replaced it).
    pub const EMPTY: ChainSummary = ChainSummary {
        entry: None,
        exit: None,
        stats_slot: None,
        bits: ENTRY_EMPTY | EXIT_EMPTY,
    };
}

const ENTRY_EMPTY: u8 = 1;
const EXIT_EMPTY: u8 = 1 << 1;
const BROKEN: u8 = 1 << 2;
const READS_DEVICE: u8 = 1 << 3;
const READS_FLAGS: u8 = 1 << 4;
const WANTS_CALLER: u8 = 1 << 5;
const INTERPRETED: u8 = 1 << 6;

impl ChainSummary {
    #[inline(always)]
    fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }

    /// [`Chain::reads_device`].
    #[inline(always)]
    pub fn reads_device(&self) -> bool {
        self.has(READS_DEVICE)
    }

    /// [`Chain::reads_flags`].
    #[inline(always)]
    pub fn reads_flags(&self) -> bool {
        self.has(READS_FLAGS)
    }

    /// [`Chain::wants_caller`].
    #[inline(always)]
    pub fn wants_caller(&self) -> bool {
        self.has(WANTS_CALLER)
    }

    /// Whether some program of the chain needs an answer that costs a driver call or a
    /// stack walk: it reads `hdr.device` or `hdr.flags`, or asks for its caller (one test
    /// for the three, which a call's common path makes instead of three).
    #[inline(always)]
    pub fn asks(&self) -> bool {
        self.has(READS_DEVICE | READS_FLAGS | WANTS_CALLER)
    }

    /// [`Chain::interpreted`]: some program of the chain runs on the interpreter (a host
    /// that compiles chains as they are called asks for this one).
    #[inline(always)]
    pub fn interpreted(&self) -> bool {
        self.has(INTERPRETED)
    }

    /// Whether [`Chain::entry_words`] has nothing to run: no entry program, and the chain
    /// is not [`Chain::broken`].
    #[inline(always)]
    pub fn entry_is_idle(&self) -> bool {
        self.has(ENTRY_EMPTY) && !self.has(BROKEN)
    }

    /// Whether the chain has no exit program.
    #[inline(always)]
    pub fn exit_is_empty(&self) -> bool {
        self.has(EXIT_EMPTY)
    }

    /// Whether the summary runs the chain's entry program itself (its only one, native, not
    /// a shadow, and the chain not broken).
    pub fn has_lean_entry(&self) -> bool {
        self.entry.is_some()
    }

    /// Whether the summary runs the chain's exit program itself.
    pub fn has_lean_exit(&self) -> bool {
        self.exit.is_some()
    }
}

/// The lean form of a phase's programs: the program when there is exactly one and it can
/// run lean.
fn only_lean(programs: &[super::AttachedProgram]) -> Option<LeanProgram> {
    match programs {
        [p] => p.lean(),
        _ => None,
    }
}

impl Chain {
    /// This chain's [`ChainSummary`].
    pub fn summary(&self) -> ChainSummary {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        ChainSummary {
            entry: if self.broken {
                None
            } else {
                only_lean(&self.entry)
            },
            exit: only_lean(&self.exit),
            stats_slot: self.stats_slot,
            bits: bit(self.entry.is_empty(), ENTRY_EMPTY)
                | bit(self.exit.is_empty(), EXIT_EMPTY)
                | bit(self.broken, BROKEN)
                | bit(self.reads_device, READS_DEVICE)
                | bit(self.reads_flags, READS_FLAGS)
                | bit(self.wants_caller, WANTS_CALLER)
                | bit(self.interpreted(), INTERPRETED),
        }
    }
}
