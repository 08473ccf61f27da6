//! The reference interpreter: exact RFC 9669 (+ ISA v4) semantics, checked memory.
//!
//! ```ignore
//! let program = Program::from_insns(&insns)?;          // strict decode, once
//! let vm = Interpreter::new(program, helpers);          // helpers: HelperTable
//! let mut stack = vec![0u8; STACK_SIZE];
//! let mut memory = Memory::new();
//! let ctx = memory.add_mut("ctx", &mut ctx_bytes);      // allowed regions
//! let r0 = vm.execute(&[ctx, ctx_len], &mut stack, &memory)?;
//! ```
//!
//! Semantics (RFC 9669 §4): 32-bit ALU results are zero-extended; unsigned division by zero
//! gives 0 and modulo by zero leaves `dst` unchanged (its low 32 bits for 32-bit ops);
//! signed `INT_MIN / -1` gives `INT_MIN` and `INT_MIN % -1` gives 0; shift counts are
//! masked to 5 or 6 bits; immediates are sign-extended to 64 bits; 32-bit jumps compare the
//! low halves; `ldxs*` and `movsx` sign-extend; 32-bit atomics zero-extend the fetched
//! value. Writes to `r10` are errors.
//!
//! Conventions shared with the JIT (docs/design-decisions.md): `STACK_SIZE` bytes of stack
//! per execution, frame `k` has `r10 = stack_base + STACK_SIZE - 512 * k`; local calls save
//! and restore r6–r9 (and r10); at most `MAX_CALL_FRAMES` frames. Registers the verifier
//! considers uninitialised hold 0: r0 and r6–r9 at every function entry, r1–r5 after every
//! call. `lddw` of kind `Func`
//! yields the target slot index, only meaningful to `bpf_loop` (helper 181), which the
//! interpreter implements itself: the callback runs in the next frame with `(index, ctx)`
//! for `index` in `0..min(nr_loops, 1 << 23)` until it returns non-zero; the result is the
//! number of callback invocations (`flags` is ignored). `callx` treats its register as a
//! helper id, as bpf_conformance expects.
//!
//! Every run has a budget of iterations (default [`RUN_ITERATION_BUDGET`]), shared with the
//! JIT: each backward jump taken (to a slot at or before the jump) and each `bpf_loop`
//! callback invocation uses one, in every frame; when none is left the run ends with
//! [`ExecError::IterationBudget`] at that instruction. The instruction limit is a second,
//! interpreter-only guard.
//!
//! In checked mode ([`Interpreter::execute`]) every load, store and atomic must lie inside
//! the stack or a region of [`Memory`] with the needed permission; atomics must be
//! naturally aligned. Every violation, unknown helper, bad jump and exhausted instruction
//! budget is an [`ExecError`] naming the instruction.
#![deny(clippy::arithmetic_side_effects)]

mod alu;
mod error;
mod exec;
mod memory;

pub use error::{AccessKind, ExecError};
pub use memory::{Memory, Perm, Region};

use gpubpf_isa::{decode_program, slots_from_bytes, Insn, Instruction};

use crate::helper_table::{HelperTable, RUN_ITERATION_BUDGET, STACK_SIZE};

/// Id of `bpf_loop`, implemented by the engines themselves.
pub const BPF_LOOP_HELPER_ID: i32 = 181;
/// Most iterations `bpf_loop` performs.
pub const BPF_LOOP_MAX_ITERATIONS: u64 = 1 << 23;
/// Default bound on executed instructions per execution.
pub const DEFAULT_INSTRUCTION_LIMIT: u64 = 50_000_000;

/// One 8-byte slot of a decoded program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The first (or only) slot of an instruction.
    Ins(Instruction),
    /// The second slot of `lddw`: never a jump target.
    LddwTail,
}

/// A strictly decoded program, ready to execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    slots: Vec<Slot>,
}

impl Program {
    /// Decodes `insns` (strictly, see [`gpubpf_isa::Instruction::decode`]).
    pub fn from_insns(insns: &[Insn]) -> Result<Self, ExecError> {
        if insns.is_empty() {
            return Err(ExecError::EmptyProgram);
        }
        let mut slots = Vec::with_capacity(insns.len());
        for (_, ins) in decode_program(insns)? {
            slots.push(Slot::Ins(ins));
            if ins.slots() == 2 {
                slots.push(Slot::LddwTail);
            }
        }
        Ok(Self { slots })
    }

    /// Decodes a program from its bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ExecError> {
        Self::from_insns(&slots_from_bytes(bytes)?)
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the program has no slots (never true for a constructed program).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// The interpreter: a program with its helpers, an iteration budget and an instruction
/// budget.
#[derive(Clone, Debug)]
pub struct Interpreter {
    program: Program,
    helpers: HelperTable,
    iteration_budget: u64,
    instruction_limit: u64,
}

impl Interpreter {
    /// An interpreter for `program` calling helpers through `helpers`.
    pub fn new(program: Program, helpers: HelperTable) -> Self {
        Self {
            program,
            helpers,
            iteration_budget: RUN_ITERATION_BUDGET,
            instruction_limit: DEFAULT_INSTRUCTION_LIMIT,
        }
    }

    /// Sets the bound on iterations per execution (backward jumps taken plus `bpf_loop`
    /// callback invocations, over all frames; default [`RUN_ITERATION_BUDGET`]). The JIT
    /// has the same bound ([`crate::jit::CompiledProgram::with_iteration_budget`]).
    pub fn with_iteration_budget(mut self, budget: u64) -> Self {
        self.iteration_budget = budget;
        self
    }

    /// Sets the bound on executed instructions per execution (including callbacks).
    pub fn with_instruction_limit(mut self, limit: u64) -> Self {
        self.instruction_limit = limit;
        self
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Runs the program with `args` in r1.. (at most 5), `stack` as its stack (at least
    /// `STACK_SIZE` bytes) and `memory` as the other allowed regions. Returns `r0`.
    pub fn execute(
        &self,
        args: &[u64],
        stack: &mut [u8],
        memory: &Memory<'_>,
    ) -> Result<u64, ExecError> {
        self.run(args, stack, memory.regions(), true)
    }

    /// Runs the program without checking memory accesses against regions.
    ///
    /// # Safety
    /// Every load, store and atomic the program performs must access valid memory (a
    /// verified program whose context and map pointers are valid); otherwise this is
    /// undefined behaviour. Jumps, calls and the instruction budget are still checked.
    pub unsafe fn execute_unchecked(
        &self,
        args: &[u64],
        stack: &mut [u8],
    ) -> Result<u64, ExecError> {
        self.run(args, stack, &[], false)
    }

    fn run(
        &self,
        args: &[u64],
        stack: &mut [u8],
        regions: &[Region],
        checked: bool,
    ) -> Result<u64, ExecError> {
        if stack.len() < STACK_SIZE {
            return Err(ExecError::StackTooSmall {
                len: stack.len(),
                needed: STACK_SIZE,
            });
        }
        if args.len() > 5 {
            return Err(ExecError::TooManyArguments { count: args.len() });
        }
        let base = stack.as_mut_ptr() as u64;
        let mut run = exec::Run {
            slots: &self.program.slots,
            helpers: &self.helpers,
            mem: memory::Checker {
                stack: Region {
                    name: "stack",
                    start: base,
                    len: STACK_SIZE as u64,
                    perm: Perm::ReadWrite,
                },
                regions,
                checked,
            },
            stack_top: base.wrapping_add(STACK_SIZE as u64),
            budget: self.instruction_limit,
            limit: self.instruction_limit,
            iterations_left: self.iteration_budget,
            iteration_budget: self.iteration_budget,
        };
        let mut regs = [0u64; 11];
        for (r, a) in regs.iter_mut().skip(1).zip(args) {
            *r = *a;
        }
        regs[10] = run.frame_pointer(0);
        run.function(0, &mut regs, 0)
    }
}

#[cfg(test)]
mod tests;
