//! One verified program attached to one attach point, and how it executes: native code
//! from the JIT, or — for the first calls of a process, until the JIT has caught up — the
//! reference interpreter ([`Tier`]).

use gpubpf_verifier::VerifyStats;

use crate::attach::Phase;
use crate::helper_table::{HelperTable, STACK_SIZE};
use crate::interp::{self, Interpreter};
use crate::jit::{self, CompiledProgram, JitError, RawEntry};
use crate::program::PreparedProgram;

use super::ctx::CtxBuf;

/// The stack area of one execution: `STACK_SIZE` bytes, 16-byte aligned so that stack
/// atomics never straddle a cache line. Allocate one per thread and reuse it for every call.
#[derive(Debug)]
#[repr(C, align(16))]
pub struct Stack(pub [u8; STACK_SIZE]);

impl Stack {
    /// A zeroed stack on the heap.
    pub fn new_boxed() -> Box<Stack> {
        Box::new(Stack([0; STACK_SIZE]))
    }
}

/// How the programs of a [`super::PolicySet`] are built to execute.
///
/// Re-verification is the same for both; only the last step differs. A process starts on
/// [`Tier::Interpreted`] (verification alone is what its first driver call waits for) and
/// swaps each chain for its native twin ([`super::Chain::to_native`]) off the hot path;
/// both engines pass the same conformance suite and differential tests, so the swap
/// changes speed, never behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// JIT-compiled to native code.
    Native,
    /// Run by the reference interpreter (memory unchecked: the program is verified).
    Interpreted,
}

/// The executable form of an attached program. `repr(C, u8)`: the tag, then the variant,
/// so that a native program's entry point follows the tag (see [`AttachedProgram`]).
#[derive(Debug)]
#[repr(C, u8)]
enum Code {
    Native(CompiledProgram),
    Interpreted(Box<Interpreter>),
}

/// A program fault at run time, from whichever engine ran it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Raised by JIT-compiled code.
    #[error(transparent)]
    Native(#[from] jit::ExecError),
    /// Raised by the interpreter.
    #[error(transparent)]
    Interpreted(#[from] interp::ExecError),
}

/// One verified program attached to one attach point.
///
/// `repr(C, align(64))`, with everything a run reads first: the ctx size, statistics slot,
/// shadow flag, then the code (its tag, and a native program's entry point and iteration
/// budget) all lie in the program's first cache line. A policed call in a real CUDA
/// application finds few of its lines still cached after the driver's own work, so each
/// line a call touches costs (docs/shim.md, "Cache lines of a policed call").
#[derive(Debug)]
#[repr(C, align(64))]
pub struct AttachedProgram {
    /// Size of the ctx the program was verified against (its attach point's `ctx_size`).
    ctx_size: u32,
    /// Where the process counts this program's runs (the shim's statistics slot); `None`
    /// when not counted.
    pub stats_slot: Option<u32>,
    /// Loaded with `load --shadow`: runs on a copy of the ctx, its decisions are reported
    /// ([`super::RunRecorder::decision`]) but never applied.
    pub shadow: bool,
    /// Entry or exit.
    pub phase: Phase,
    code: Code,
    /// Lower runs first.
    pub priority: i32,
    /// Registry name of the object it came from.
    pub object: String,
    /// Program (function) name.
    pub name: String,
    /// What the verifier reported when this process re-verified it.
    pub stats: VerifyStats,
    /// Keeps the maps the code addresses alive as long as the code may run.
    prepared: PreparedProgram,
}

// A run's fields, the code's tag and a native program's entry point and iteration budget
// (the first two fields of `CompiledProgram`, after the tag's 8 bytes) fit the first line.
const _: () = assert!(std::mem::offset_of!(AttachedProgram, code) + 8 + 16 <= 64);

/// A native program's entry point, iteration budget and ctx size, copied out of its
/// [`AttachedProgram`]: what [`AttachedProgram::native_words`] runs, and (not a shadow,
/// [`AttachedProgram::lean`]) what a [`super::ChainSummary`] keeps.
/// It runs that program's code, so it is valid only while the program lives.
#[derive(Debug, Clone, Copy)]
pub struct LeanProgram {
    pub(super) entry: RawEntry,
    pub(super) ctx_size: u32,
}

impl LeanProgram {
    /// Runs the program this was taken from on a ctx of words: its return value and run
    /// status ([`CompiledProgram::execute_raw`]); `None`, without running, when `ctx` is
    /// shorter than its layout. What [`AttachedProgram::native_words`] runs.
    ///
    /// # Safety
    /// That program is still alive.
    #[inline(always)]
    pub(super) unsafe fn run_words(self, ctx: &mut [u64], stack: &mut Stack) -> Option<(u64, u64)> {
        if ctx.len().saturating_mul(8) < self.ctx_size as usize {
            return None;
        }
        // SAFETY: as in `AttachedProgram::run_words`: the program (alive, the caller's
        // contract, with the maps its `prepared` keeps) was verified against the layout of
        // its attach point, which spans `ctx_size` bytes, and `ctx` (8-byte aligned) is at
        // least that long; `stack` is a full `STACK_SIZE` area.
        Some(unsafe {
            self.entry
                .execute_raw([ctx.as_mut_ptr() as u64, 0], &mut stack.0)
        })
    }
}

/// The parts of an [`AttachedProgram`] besides its code, as the build produced them.
#[derive(Debug)]
pub(super) struct ProgramParts {
    pub object: String,
    pub name: String,
    pub phase: Phase,
    pub priority: i32,
    pub stats: VerifyStats,
    pub prepared: PreparedProgram,
    pub ctx_size: u32,
    pub shadow: bool,
}

impl AttachedProgram {
    /// A program that runs `parts.prepared` in `tier`.
    pub(super) fn build(
        parts: ProgramParts,
        tier: Tier,
        helpers: &HelperTable,
    ) -> Result<Self, super::DispatchError> {
        let code = make_code(&parts.prepared, tier, helpers)?;
        Ok(Self::assemble(parts, code))
    }

    fn assemble(parts: ProgramParts, code: Code) -> Self {
        Self {
            object: parts.object,
            name: parts.name,
            phase: parts.phase,
            priority: parts.priority,
            stats: parts.stats,
            code,
            prepared: parts.prepared,
            ctx_size: parts.ctx_size,
            stats_slot: None,
            shadow: parts.shadow,
        }
    }

    /// The same program compiled to native code (statistics slot included); a program that
    /// already is native is compiled again.
    pub fn to_native(&self, helpers: &HelperTable) -> Result<Self, JitError> {
        let compiled =
            jit::compile_with_maps(&self.prepared.insns, helpers, &self.prepared.inline_maps())?;
        Ok(Self {
            object: self.object.clone(),
            name: self.name.clone(),
            phase: self.phase,
            priority: self.priority,
            stats: self.stats.clone(),
            code: Code::Native(compiled),
            prepared: self.prepared.clone(),
            ctx_size: self.ctx_size,
            stats_slot: self.stats_slot,
            shadow: self.shadow,
        })
    }

    /// What the lean path needs to run it ([`LeanProgram`]): `None` for a shadow program
    /// or one on the interpreter, which take the general path.
    pub fn lean(&self) -> Option<LeanProgram> {
        self.native().filter(|_| !self.shadow)
    }

    /// Whether it runs as native code (rather than on the interpreter).
    pub fn is_native(&self) -> bool {
        matches!(self.code, Code::Native(_))
    }

    /// Machine-code size in bytes (0 while interpreted).
    pub fn code_size(&self) -> usize {
        match &self.code {
            Code::Native(c) => c.code_size(),
            Code::Interpreted(_) => 0,
        }
    }

    /// Number of instruction slots executed by the engines.
    pub fn insn_count(&self) -> usize {
        self.prepared.insns.len()
    }

    /// The instruction slots the code was compiled from: map references rewritten to
    /// addresses, never-reached instructions replaced by dead-code traps.
    pub fn insns(&self) -> &[gpubpf_isa::Insn] {
        &self.prepared.insns
    }

    /// Runs the program on `ctx`.
    pub fn run(&self, ctx: &mut CtxBuf, stack: &mut Stack) -> Result<u64, RunError> {
        debug_assert_eq!(ctx.phase(), self.phase);
        // SAFETY: the program was accepted by the verifier (in `PolicySet::load`) for the
        // ctx layout of `ctx.point()` in `self.phase`; `CtxBuf` allocates exactly that
        // layout (8-byte aligned, `ctx_size` bytes). The maps it addresses are kept alive by
        // `self.prepared`, and `stack` is a full `STACK_SIZE` frame area.
        unsafe { self.execute(ctx.as_mut_ptr(), stack) }
    }

    /// Runs the program on a ctx held in 64-bit words (the shim's stack array), laid out
    /// as the attach catalog says for the program's attach point. A ctx shorter than that
    /// layout is refused with [`WordsError::CtxTooSmall`] instead of running.
    #[inline]
    pub fn run_words(&self, ctx: &mut [u64], stack: &mut Stack) -> Result<u64, WordsError> {
        let have = ctx.len().saturating_mul(8);
        if have < self.ctx_size as usize {
            return Err(WordsError::CtxTooSmall {
                have,
                need: self.ctx_size,
            });
        }
        // SAFETY: as in `run`: the program was verified against the layout of its attach
        // point, which spans `ctx_size` bytes; `ctx` is 8-byte aligned and at least that
        // long (checked above). `self.prepared` keeps the maps alive.
        unsafe {
            self.execute(ctx.as_mut_ptr().cast(), stack)
                .map_err(WordsError::Exec)
        }
    }

    /// Runs a native program on a ctx of words: its return value and run status
    /// ([`CompiledProgram::execute_raw`]); `None`, without running, when the program runs
    /// on the interpreter or `ctx` is shorter than its layout (which
    /// [`AttachedProgram::run_words`] handles).
    #[inline(always)]
    pub fn native_words(&self, ctx: &mut [u64], stack: &mut Stack) -> Option<(u64, u64)> {
        // SAFETY: the program is `self`, alive for the call.
        unsafe { self.native()?.run_words(ctx, stack) }
    }

    /// Its native code's entry point and ctx size, shadow or not; `None` on the interpreter.
    #[inline(always)]
    fn native(&self) -> Option<LeanProgram> {
        match &self.code {
            Code::Native(c) => Some(LeanProgram {
                entry: c.raw_entry(),
                ctx_size: self.ctx_size,
            }),
            Code::Interpreted(_) => None,
        }
    }

    /// What [`AttachedProgram::run_words`] returns for a native run that ended with
    /// `value` and `status` ([`AttachedProgram::native_words`]).
    #[cold]
    #[inline(never)]
    pub fn native_result(&self, value: u64, status: u64) -> Result<u64, WordsError> {
        match &self.code {
            Code::Native(c) if status != 0 => {
                Err(WordsError::Exec(RunError::Native(c.status_error(status))))
            }
            _ => Ok(value),
        }
    }

    /// # Safety
    /// `ctx` points to `ctx_size` writable, 8-byte aligned bytes laid out as the program's
    /// attach point says.
    #[inline]
    unsafe fn execute(&self, ctx: *mut u8, stack: &mut Stack) -> Result<u64, RunError> {
        match &self.code {
            // SAFETY: the caller's guarantee is `execute`'s precondition; the code was
            // compiled from `self.prepared`, verified for that layout.
            Code::Native(c) => unsafe { c.execute(ctx, &mut stack.0) }.map_err(RunError::Native),
            // SAFETY: the program was verified for the ctx the caller passes; its map
            // pointers stay valid (`self.prepared` holds the maps) and the stack is a full
            // `STACK_SIZE` area, so every access it makes is to valid memory.
            Code::Interpreted(i) => unsafe { i.execute_unchecked(&[ctx as u64], &mut stack.0) }
                .map_err(RunError::Interpreted),
        }
    }
}

/// The code of `prepared` for `tier`.
fn make_code(
    prepared: &PreparedProgram,
    tier: Tier,
    helpers: &HelperTable,
) -> Result<Code, super::DispatchError> {
    Ok(match tier {
        // Map lookups are inlined: the program keeps `prepared`, and with it the maps,
        // alive as long as the code.
        Tier::Native => Code::Native(jit::compile_with_maps(
            &prepared.insns,
            helpers,
            &prepared.inline_maps(),
        )?),
        Tier::Interpreted => {
            let program = interp::Program::from_insns(&prepared.insns)
                .map_err(|e| super::DispatchError::Interpret { source: e })?;
            // No instruction limit beyond the JIT's: the iteration budget, shared by both
            // engines, bounds every run.
            Code::Interpreted(Box::new(
                Interpreter::new(program, helpers.clone()).with_instruction_limit(u64::MAX),
            ))
        }
    })
}

/// Why [`AttachedProgram::run_words`] did not produce a return value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    /// The ctx is shorter than the layout the program was verified against.
    #[error("ctx of {have} bytes is shorter than the {need} bytes of the attach point's layout")]
    CtxTooSmall { have: usize, need: u32 },
    /// The program stopped with a run-time error.
    #[error("program fault")]
    Exec(#[source] RunError),
}
