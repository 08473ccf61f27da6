//! The Cranelift JIT: verified BPF → native code in W^X memory.
//!
//! - [`JitCompiler`] owns the host ISA and the reused Cranelift contexts; [`compile`] is a
//!   one-shot shortcut.
//! - [`CompiledProgram`] owns the code pages (read + execute, unmapped on drop), is
//!   `Send + Sync` and meant to be shared as `Arc<CompiledProgram>`.
//! - The translation itself, and the reasoning behind it, is in [`translate`]; the control
//!   flow pre-pass in [`analysis`]; code memory and relocation in [`code_memory`].
//!
//! ```no_run
//! use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
//! use gpubpf_runtime::jit::compile;
//! # let slots: Vec<gpubpf_isa::Insn> = vec![];
//! let prog = compile(&slots, &HelperTable::new()).expect("compiles");
//! let mut stack = [0u8; STACK_SIZE];
//! let mut ctx = [0u8; 64];
//! // SAFETY: the program was verified against a 64-byte ctx.
//! let r0 = unsafe { prog.execute(ctx.as_mut_ptr(), &mut stack) };
//! ```

pub(crate) mod analysis;
pub(crate) mod code_memory;
mod compiler;
#[cfg(test)]
mod tests;
pub mod translate;

use std::fmt;
use std::ops::Range;

use gpubpf_isa::{DecodeError, LddwKind};

pub use compiler::{compile, compile_with_maps, JitCompiler, LARGE_FUNCTION_INSNS};

use crate::helper_table::STACK_SIZE;
use crate::helper_table::STACK_SIZE_PER_FRAME;
use code_memory::ExecutableCode;
use translate::{
    STATUS_BAD_CALLBACK, STATUS_BAD_CALLX, STATUS_CALL_DEPTH, STATUS_DEAD_CODE,
    STATUS_ITERATION_BUDGET,
};

/// An array map whose `bpf_map_lookup_elem` calls the compiler may inline (as Linux's
/// `map_gen_lookup` does for arrays): where the map argument of a lookup is this `handle`
/// as a constant, the call becomes a bounds check of the `u32` key and an address
/// computation in the generated code, with no helper call.
///
/// The caller guarantees that the handle names this map and that its values stay mapped
/// at `data` for as long as the compiled code may run (a prepared program keeps its maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineArray {
    /// The map's handle (the value a prepared `lddw` loads).
    pub handle: u64,
    /// Address of the value of index 0.
    pub data: u64,
    /// Number of values.
    pub max_entries: u32,
    /// Bytes from one value to the next.
    pub stride: u32,
}

/// A hash map (not LRU) with 4- or 8-byte keys whose `bpf_map_lookup_elem` calls the
/// compiler may inline: where the map argument of a lookup is this `handle` as a constant,
/// the first probe of the map's lock-free lookup runs in the generated code (the key's
/// hash, the bucket's first link: its own end is a miss, the entry holding the key a hit),
/// and only the rest of a chain goes through the helper (`jit/translate/inline_maps.rs`).
/// Only the layout is needed: hash maps of the file format (`maps::layout`) whose lookups
/// take no lock and stamp nothing.
///
/// The caller guarantees that the handle names this map and that its buckets and entries
/// stay mapped at these addresses for as long as the compiled code may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineHash {
    /// The map's handle (the value a prepared `lddw` loads).
    pub handle: u64,
    /// Address of bucket 0.
    pub buckets: u64,
    /// Address of entry 0.
    pub entries: u64,
    /// Number of buckets (a power of two).
    pub nbuckets: u32,
    /// Number of entries.
    pub max_entries: u32,
    /// Bytes from one entry to the next.
    pub stride: u32,
    /// Bytes of a key: 4 or 8.
    pub key_size: u32,
    /// Offset of the value in an entry.
    pub value_offset: u32,
    /// The map's hash seed.
    pub seed: u64,
}

/// A map whose lookups the compiler may inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineMap {
    Array(InlineArray),
    Hash(InlineHash),
}

impl InlineMap {
    /// The handle of the map.
    pub fn handle(&self) -> u64 {
        match self {
            InlineMap::Array(a) => a.handle,
            InlineMap::Hash(h) => h.handle,
        }
    }
}

/// An error compiling a program. `pc` is the slot index of the offending instruction.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error("the program is empty")]
    EmptyProgram,
    #[error("cannot decode the program")]
    Decode {
        #[source]
        source: DecodeError,
    },
    #[error("instruction {pc}: call or function reference to slot offset {offset} does not name an instruction")]
    BadCallTarget { pc: usize, offset: i64 },
    #[error(
        "instruction {pc}: jump offset {offset} leaves the function or lands inside an instruction"
    )]
    BadJumpTarget { pc: usize, offset: i64 },
    #[error("instruction {pc}: control falls off the end of the function")]
    FallsOffEnd { pc: usize },
    #[error("instruction {pc}: writes the read-only frame pointer `r10`")]
    FramePointerWrite { pc: usize },
    #[error("instruction {pc}: `lddw` of kind {kind:?} must be rewritten before execution (only `Imm` and `Func` execute)")]
    UnsupportedLddw { pc: usize, kind: LddwKind },
    #[error("instruction {pc}: helper {id} is not in the helper table")]
    UnknownHelper { pc: usize, id: i32 },
    #[error("instruction {pc}: kernel function calls (btf id {id}) are not supported")]
    Kfunc { pc: usize, id: i32 },
    #[error("the program has too many functions or instructions for the JIT")]
    TooManyFunctions,
    #[error("code generation failed for function {func}: {message}")]
    Codegen { func: usize, message: String },
    #[error("the host ISA is not supported: {message}")]
    HostIsa { message: String },
    #[error("unsupported or out-of-range relocation {kind} at code offset {offset}")]
    Relocation { kind: String, offset: usize },
    #[error("generated code of {bytes} bytes is too large")]
    CodeTooLarge { bytes: usize },
    #[error("code memory `{op}` failed")]
    Memory {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the program calls or takes the address of its entry function (function 0), which the JIT enters with a signature of its own; the verifier rejects such recursion")]
    EntryCalled,
    #[error("internal JIT invariant violated: {what}")]
    Internal { what: &'static str },
}

/// An error raised while a compiled program runs. The program stopped at instruction `pc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("instruction {pc}: call depth exceeds the maximum number of frames")]
    CallDepthExceeded { pc: usize },
    #[error("instruction {pc}: `callx` target is not a function of the program")]
    InvalidCallxTarget { pc: usize },
    #[error("instruction {pc}: `bpf_loop` callback is not a function of the program")]
    InvalidLoopCallback { pc: usize },
    #[error("instruction {pc}: run-time budget of {budget} iterations (backward jumps and `bpf_loop` callbacks) exhausted")]
    IterationBudget { pc: usize, budget: u64 },
    #[error("instruction {pc}: reached code the verifier proved unreachable (a dead-code trap)")]
    DeadCode { pc: usize },
    #[error("unknown status {status:#x} returned by compiled code")]
    UnknownStatus { status: u64 },
}

impl ExecError {
    /// The error of `status` (`kind | pc << 8`) in a run with `budget`.
    #[cold]
    #[inline(never)]
    fn from_status(status: u64, budget: u64) -> Self {
        let pc = usize::try_from(status >> 8).unwrap_or(usize::MAX);
        match (status & 0xff) as i64 {
            STATUS_CALL_DEPTH => ExecError::CallDepthExceeded { pc },
            STATUS_BAD_CALLX => ExecError::InvalidCallxTarget { pc },
            STATUS_BAD_CALLBACK => ExecError::InvalidLoopCallback { pc },
            STATUS_ITERATION_BUDGET => ExecError::IterationBudget { pc, budget },
            STATUS_DEAD_CODE => ExecError::DeadCode { pc },
            _ => ExecError::UnknownStatus { status },
        }
    }
}

/// A program's entry point: its function 0 itself, whose signature `(r1, r2, fp, run) ->
/// (r0, status)` (`translate::entry_signature`, the host's default calling convention) is
/// this C signature: on x86-64 System V the four arguments in `rdi`, `rsi`, `rdx`, `rcx`,
/// `r0` and `status` in `rax` and `rdx`, as C returns a struct of two `u64`; on AArch64 in
/// `x0`–`x3` and `x0`–`x1`. No trampoline between the caller and the program, and no
/// argument on the stack; `r3`–`r5` start at 0 inside function 0.
type EntryFn = unsafe extern "C" fn(u64, u64, u64, *mut RunState) -> EntryResult;

/// What function 0 returns: `r0` and the run's status (0, or `kind | pc << 8`).
#[repr(C)]
struct EntryResult {
    r0: u64,
    status: u64,
}

/// A compiled program's entry point and iteration budget, copied out of its
/// [`CompiledProgram`] ([`CompiledProgram::raw_entry`]): what a run needs, in 16 bytes a
/// caller can keep in its own cache line instead of reading the program's. It runs the
/// code of that program, so it is valid only while the program lives.
#[derive(Clone, Copy, Debug)]
pub struct RawEntry {
    entry: EntryFn,
    iteration_budget: u64,
}

impl RawEntry {
    /// [`CompiledProgram::execute_raw`] of the program this entry was taken from.
    ///
    /// # Safety
    /// That program is still alive, and the contract of [`CompiledProgram::execute`] holds.
    #[inline(always)]
    pub unsafe fn execute_raw(self, args: [u64; 2], stack: &mut [u8; STACK_SIZE]) -> (u64, u64) {
        let fp = stack.as_mut_ptr().wrapping_add(STACK_SIZE) as u64;
        let mut run = RunState {
            budget: self.iteration_budget,
            fp_floor: stack.as_mut_ptr().wrapping_add(STACK_SIZE_PER_FRAME) as u64,
        };
        let [r1, r2] = args;
        // SAFETY: `entry` is function 0 of a program that is alive (the caller's contract),
        // compiled with the signature `EntryFn` spells in C (see there); `run` outlives the
        // call. Memory safety of the program itself is the caller's contract.
        let r = unsafe { (self.entry)(r1, r2, fp, &mut run) };
        (r.r0, r.status)
    }
}

/// State of one run, shared by all its frames: every compiled function receives its
/// address (offsets `translate::RUN_*`).
#[repr(C)]
struct RunState {
    /// Iterations (backward jumps taken, `bpf_loop` callback invocations) still allowed.
    budget: u64,
    /// `r10` of the last frame (`MAX_CALL_FRAMES - 1`): a function whose `fp` is not above
    /// it cannot call.
    fp_floor: u64,
}

// The offsets the translator uses.
const _: () = {
    assert!(std::mem::offset_of!(RunState, budget) == translate::RUN_BUDGET as usize);
    assert!(std::mem::offset_of!(RunState, fp_floor) == translate::RUN_FP_FLOOR as usize);
};

/// A compiled program: owns its read + execute code pages and frees them on drop.
///
/// `repr(C)` with what a run reads first: a run touches `entry` and `iteration_budget`
/// only, and a caller that embeds the program at the start of a cache line (the
/// dispatcher's `AttachedProgram`) keeps them in that line.
#[repr(C)]
pub struct CompiledProgram {
    entry: EntryFn,
    /// Iterations per run (see [`CompiledProgram::with_iteration_budget`]).
    iteration_budget: u64,
    code: ExecutableCode,
    code_size: usize,
    functions: usize,
    /// Code offsets of each BPF function (alignment padding in between belongs to none).
    function_ranges: Vec<Range<u32>>,
    /// `(code offset, pc)` at which each BPF instruction's code starts, sorted by offset.
    pc_map: Vec<(u32, u32)>,
    explicit_trap_sites: usize,
}

impl fmt::Debug for CompiledProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledProgram")
            .field("code_addr", &self.code.addr(0))
            .field("code_size", &self.code_size)
            .field("functions", &self.functions)
            .field("iteration_budget", &self.iteration_budget)
            .finish()
    }
}

// `CompiledProgram` is `Send + Sync` because `ExecutableCode` is (immutable RX pages) and the
// entry point is a plain function pointer into them; checked at compile time here.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledProgram>();
};

impl CompiledProgram {
    /// Sets the bound on iterations per run: backward jumps taken plus `bpf_loop` callback
    /// invocations, over all frames (default
    /// [`RUN_ITERATION_BUDGET`](crate::helper_table::RUN_ITERATION_BUDGET), the interpreter's
    /// rule too). A run that would exceed it ends with [`ExecError::IterationBudget`].
    pub fn with_iteration_budget(mut self, budget: u64) -> Self {
        self.iteration_budget = budget;
        self
    }

    /// The bound on iterations per run.
    pub fn iteration_budget(&self) -> u64 {
        self.iteration_budget
    }

    /// Runs the program with `r1 = ctx` and `stack` as its frames; returns `r0`.
    ///
    /// # Safety
    /// The program must have been accepted by the verifier for a context that `ctx` points
    /// to (with the helpers and maps it was verified against still alive): compiled code
    /// dereferences `ctx`, the stack and map values without further checks.
    #[inline]
    pub unsafe fn execute(
        &self,
        ctx: *mut u8,
        stack: &mut [u8; STACK_SIZE],
    ) -> Result<u64, ExecError> {
        // SAFETY: forwarded contract.
        unsafe { self.execute_with_args([ctx as u64, 0], stack) }
    }

    /// Runs the program with `r1, r2 = args` (`r3`–`r5` are 0); returns `r0`.
    ///
    /// # Safety
    /// As for [`CompiledProgram::execute`]: every memory access the program makes with
    /// these register values must be valid.
    #[inline]
    pub unsafe fn execute_with_args(
        &self,
        args: [u64; 2],
        stack: &mut [u8; STACK_SIZE],
    ) -> Result<u64, ExecError> {
        // SAFETY: forwarded contract.
        let (r0, status) = unsafe { self.execute_raw(args, stack) };
        if status == 0 {
            Ok(r0)
        } else {
            Err(self.status_error(status))
        }
    }

    /// Runs the program with `r1, r2 = args`; returns `r0` and the run's status: 0, or
    /// what [`CompiledProgram::status_error`] turns into the error (the form the shim's
    /// common path tests without building a `Result`).
    ///
    /// # Safety
    /// As for [`CompiledProgram::execute`].
    #[inline(always)]
    pub unsafe fn execute_raw(&self, args: [u64; 2], stack: &mut [u8; STACK_SIZE]) -> (u64, u64) {
        // SAFETY: the entry point of `self`, which is alive for the call; the rest is the
        // caller's contract.
        unsafe { self.raw_entry().execute_raw(args, stack) }
    }

    /// This program's entry point and iteration budget, to be kept beside a caller's own
    /// state ([`RawEntry`]).
    #[inline(always)]
    pub fn raw_entry(&self) -> RawEntry {
        RawEntry {
            entry: self.entry,
            iteration_budget: self.iteration_budget,
        }
    }

    /// The error of a run that ended with non-zero `status` ([`CompiledProgram::execute_raw`]).
    #[cold]
    #[inline(never)]
    pub fn status_error(&self, status: u64) -> ExecError {
        ExecError::from_status(status, self.iteration_budget)
    }

    /// Bytes of machine code (all functions).
    pub fn code_size(&self) -> usize {
        self.code_size
    }

    /// Number of BPF functions (entry program and subprograms).
    pub fn function_count(&self) -> usize {
        self.functions
    }

    /// Number of instructions in the code that can raise a CPU exception other than the
    /// guarded `div` instructions (whose divisor is never zero). Always 0; exposed for tests.
    pub fn explicit_trap_sites(&self) -> usize {
        self.explicit_trap_sites
    }

    /// The BPF instruction (slot index) whose code contains `addr`, if `addr` lies in the
    /// code of a BPF function: the pc map built from `set_srcloc`. `None` in alignment
    /// padding and in a function's prologue before the code of its first instruction.
    pub fn pc_for_address(&self, addr: usize) -> Option<usize> {
        let base = self.code.addr(0) as usize;
        let off = u32::try_from(addr.checked_sub(base)?).ok()?;
        let func = self
            .function_ranges
            .get(..self.functions)?
            .iter()
            .find(|r| r.contains(&off))?;
        let i = self.pc_map.partition_point(|(o, _)| *o <= off);
        let (start, pc) = self.pc_map.get(i.checked_sub(1)?)?;
        // An entry before the function's start belongs to the previous function.
        (*start >= func.start).then_some(*pc as usize)
    }

    /// Code offsets (relative to [`CompiledProgram::code_address`]) of each BPF function,
    /// entry function first, subprograms in slot order.
    pub fn function_ranges(&self) -> impl ExactSizeIterator<Item = Range<usize>> + '_ {
        self.function_ranges
            .iter()
            .take(self.functions)
            .map(|r| r.start as usize..r.end as usize)
    }

    /// The machine code (diagnostics, disassembly).
    pub fn code(&self) -> &[u8] {
        self.code.bytes().get(..self.code_size).unwrap_or(&[])
    }

    /// Address of the first byte of code (diagnostics).
    pub fn code_address(&self) -> usize {
        self.code.addr(0) as usize
    }
}
