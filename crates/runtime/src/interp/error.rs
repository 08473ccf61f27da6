//! Execution errors of the interpreter.

use gpubpf_isa::{DecodeError, LddwKind};

/// Whether a memory access reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
    /// An atomic read-modify-write (needs read and write permission).
    ReadWrite,
}

impl std::fmt::Display for AccessKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::ReadWrite => "atomic read-modify-write",
        })
    }
}

/// An error executing a program. `pc` is the slot index of the faulting instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("program is empty")]
    EmptyProgram,
    #[error("instruction {pc}: {access} of {size} bytes at {addr:#x} is outside every allowed memory region")]
    OutOfBounds {
        pc: usize,
        addr: u64,
        size: u32,
        access: AccessKind,
    },
    #[error("instruction {pc}: {access} of {size} bytes at {addr:#x} is not permitted in region `{region}`")]
    PermissionDenied {
        pc: usize,
        addr: u64,
        size: u32,
        access: AccessKind,
        region: &'static str,
    },
    #[error(
        "instruction {pc}: atomic access of {size} bytes at {addr:#x} is not naturally aligned"
    )]
    MisalignedAtomic { pc: usize, addr: u64, size: u32 },
    #[error("instruction {pc}: write to the read-only frame pointer r10")]
    FramePointerWrite { pc: usize },
    #[error("instruction {pc}: jump to {target}, which is not the start of an instruction")]
    BadJumpTarget { pc: usize, target: i64 },
    #[error("instruction {pc}: execution ran past the end of the program")]
    FellOffEnd { pc: usize },
    #[error("instruction {pc}: call of helper {id}, which is not registered")]
    UnknownHelper { pc: usize, id: i64 },
    #[error("instruction {pc}: kernel function calls (id {id}) are not supported")]
    KfuncCall { pc: usize, id: i32 },
    #[error("instruction {pc}: call depth exceeds {max} frames")]
    CallDepthExceeded { pc: usize, max: usize },
    #[error("instruction {pc}: `lddw` of kind {kind:?} must be resolved before execution")]
    UnresolvedLddw { pc: usize, kind: LddwKind },
    #[error("instruction {pc}: bpf_loop callback {target:#x} is not a function of this program")]
    BadCallback { pc: usize, target: u64 },
    #[error("instruction {pc}: run-time budget of {budget} iterations (backward jumps and `bpf_loop` callbacks) exhausted")]
    IterationBudget { pc: usize, budget: u64 },
    #[error("instruction {pc}: reached code the verifier proved unreachable (a dead-code trap)")]
    DeadCode { pc: usize },
    #[error("instruction limit of {limit} exceeded")]
    InstructionLimit { limit: u64 },
    #[error("{count} arguments given, at most 5 (r1..r5) are passed")]
    TooManyArguments { count: usize },
    #[error("stack buffer has {len} bytes, {needed} needed")]
    StackTooSmall { len: usize, needed: usize },
}
