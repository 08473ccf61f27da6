//! The program prepared for each world and run on its engine: the reference interpreter in
//! checked mode (every access must fall in the ctx, the stack or a map's memory) on one
//! world, the JIT (what the shim runs) on the other.

use gpubpf_isa::Insn;
use gpubpf_runtime::dispatch::{CtxBuf, Stack};
use gpubpf_runtime::helper_table::HelperTable;
use gpubpf_runtime::interp::{self, Interpreter, Memory, Perm};
use gpubpf_runtime::jit::{self, CompiledProgram};
use gpubpf_runtime::program::{prepare, PreparedProgram};
use serde::Serialize;

use super::world::World;

/// How a run ended when it did not return: the same kind at the same instruction in both
/// engines is agreement.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// `iteration_budget`, `dead_code`, `call_depth`, `bad_call_target` or `other`.
    pub kind: &'static str,
    /// The instruction, when the engine says.
    pub pc: Option<usize>,
    /// The engine's message.
    #[serde(skip)]
    pub message: String,
}

/// Faults compare by kind and instruction: the engines word their messages differently.
impl PartialEq for Fault {
    fn eq(&self, other: &Fault) -> bool {
        (self.kind, self.pc) == (other.kind, other.pc)
    }
}

pub(super) fn interp_fault(e: &interp::ExecError) -> Fault {
    use interp::ExecError as E;
    let (kind, pc) = match e {
        E::IterationBudget { pc, .. } => ("iteration_budget", Some(*pc)),
        E::DeadCode { pc } => ("dead_code", Some(*pc)),
        E::CallDepthExceeded { pc, .. } => ("call_depth", Some(*pc)),
        E::BadCallback { pc, .. } => ("bad_call_target", Some(*pc)),
        E::OutOfBounds { pc, .. }
        | E::PermissionDenied { pc, .. }
        | E::MisalignedAtomic { pc, .. }
        | E::FramePointerWrite { pc }
        | E::BadJumpTarget { pc, .. }
        | E::FellOffEnd { pc }
        | E::UnknownHelper { pc, .. }
        | E::KfuncCall { pc, .. }
        | E::UnresolvedLddw { pc, .. } => ("other", Some(*pc)),
        _ => ("other", None),
    };
    Fault {
        kind,
        pc,
        message: e.to_string(),
    }
}

pub(super) fn jit_fault(e: &jit::ExecError) -> Fault {
    use jit::ExecError as E;
    let (kind, pc) = match e {
        E::IterationBudget { pc, .. } => ("iteration_budget", Some(*pc)),
        E::DeadCode { pc } => ("dead_code", Some(*pc)),
        E::CallDepthExceeded { pc } => ("call_depth", Some(*pc)),
        E::InvalidCallxTarget { pc } | E::InvalidLoopCallback { pc } => {
            ("bad_call_target", Some(*pc))
        }
        E::UnknownStatus { .. } => ("other", None),
    };
    Fault {
        kind,
        pc,
        message: e.to_string(),
    }
}

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Interpreter,
    Jit,
}

/// The program ready to run on one engine against one world's maps.
pub enum Runner {
    Interpreter {
        vm: Interpreter,
        /// Keeps the maps the rewritten instructions address alive.
        prepared: PreparedProgram,
    },
    Jit {
        code: CompiledProgram,
        /// Keeps the maps the compiled code addresses alive.
        _prepared: PreparedProgram,
    },
}

impl Runner {
    /// Prepares `insns` (verified and sanitised) against `world`'s maps for `engine`.
    pub fn new(
        engine: Engine,
        insns: &[Insn],
        world: &World,
        helpers: &HelperTable,
    ) -> anyhow::Result<Runner> {
        let prepared = prepare(insns, &world.maps)?;
        Ok(match engine {
            Engine::Interpreter => Runner::Interpreter {
                vm: Interpreter::new(
                    interp::Program::from_insns(&prepared.insns)?,
                    helpers.clone(),
                ),
                prepared,
            },
            Engine::Jit => Runner::Jit {
                code: jit::compile(&prepared.insns, helpers)?,
                _prepared: prepared,
            },
        })
    }

    /// Runs once on `ctx` (verified for its attach point and phase): `r0` or the fault.
    pub fn run(&self, ctx: &mut CtxBuf, stack: &mut Stack) -> Result<u64, Fault> {
        match self {
            Runner::Interpreter { vm, prepared } => {
                let mut mem = Memory::new();
                // SAFETY: the ctx buffer and every map's mapping stay alive and are not
                // accessed through Rust references while the program runs (the maps are
                // kept by `prepared`, the ctx is borrowed mutably for the call).
                unsafe {
                    mem.add_raw("ctx", ctx.as_mut_ptr() as u64, ctx.size(), Perm::ReadWrite);
                    for m in prepared.maps() {
                        let (start, len) = m.memory_range();
                        mem.add_raw("map", start, len, Perm::ReadWrite);
                    }
                }
                vm.execute(&[ctx.as_mut_ptr() as u64], &mut stack.0, &mem)
                    .map_err(|e| interp_fault(&e))
            }
            Runner::Jit { code, .. } => {
                // SAFETY: the program was accepted by the verifier for the layout of
                // `ctx.point()` in its phase, which `CtxBuf` allocates exactly; the maps it
                // addresses are kept alive by `prepared`; `stack` is a full frame area.
                unsafe { code.execute(ctx.as_mut_ptr(), &mut stack.0) }.map_err(|e| jit_fault(&e))
            }
        }
    }
}
