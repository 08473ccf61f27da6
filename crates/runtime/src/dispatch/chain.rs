//! Runnable programs built from the registry, grouped per attach point.

use std::collections::BTreeMap;

use gpubpf_verifier::VerifyStats;

use crate::attach::{AttachPoint, Phase};
use crate::helper_table::{HelperTable, STACK_SIZE};
use crate::jit::{self, CompiledProgram};
use crate::program::PreparedProgram;
use crate::registry::Registry;

use super::build::LoadedObject;
use super::ctx::CtxBuf;
use super::DispatchError;

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

/// One verified, JIT-compiled program attached to one attach point.
#[derive(Debug)]
pub struct AttachedProgram {
    /// Registry name of the object it came from.
    pub object: String,
    /// Program (function) name.
    pub name: String,
    /// Entry or exit.
    pub phase: Phase,
    /// Lower runs first.
    pub priority: i32,
    /// What the verifier reported when this process re-verified it.
    pub stats: VerifyStats,
    compiled: CompiledProgram,
    /// Keeps the maps the code addresses alive as long as the code may run.
    prepared: PreparedProgram,
}

impl AttachedProgram {
    /// Machine-code size in bytes.
    pub fn code_size(&self) -> usize {
        self.compiled.code_size()
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
    pub fn run(&self, ctx: &mut CtxBuf, stack: &mut Stack) -> Result<u64, jit::ExecError> {
        debug_assert_eq!(ctx.phase(), self.phase);
        // SAFETY: the program was accepted by the verifier (in `PolicySet::load`) for the
        // ctx layout of `ctx.point()` in `self.phase`; `CtxBuf` allocates exactly that
        // layout (8-byte aligned, `ctx_size` bytes). The maps it addresses are kept alive by
        // `self.prepared`, and `stack` is a full `STACK_SIZE` frame area.
        unsafe { self.compiled.execute(ctx.as_mut_ptr(), &mut stack.0) }
    }
}

/// Entry and exit programs of one attach point, each sorted by priority.
#[derive(Debug, Default)]
pub struct Chain {
    /// Entry programs.
    pub entry: Vec<AttachedProgram>,
    /// Exit programs.
    pub exit: Vec<AttachedProgram>,
}

/// What happened to one call that went through a [`Chain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    /// The result the caller gets (possibly set by a verdict or overridden on exit).
    pub result: u32,
    /// `(object, program)` whose non-zero verdict skipped the real call, if any.
    pub denied_by: Option<(String, String)>,
    /// Whether the real call ran.
    pub called: bool,
    /// Programs that failed at run time (they count as verdict 0: fail open).
    pub faults: Vec<String>,
}

impl Chain {
    /// Runs a call: entry programs in priority order (the first non-zero verdict wins and
    /// skips `real`), then `real` (which performs the call, fills `out.*` fields and returns
    /// the `CUresult`), then exit programs (they also run after a veto, seeing the verdict as
    /// `hdr.result`, so accounting policies observe refusals). Returns the final result,
    /// which an exit program may have overridden through `hdr.result`.
    pub fn call(
        &self,
        ctx: &mut CtxBuf,
        stack: &mut Stack,
        real: impl FnOnce(&mut CtxBuf) -> u32,
    ) -> CallOutcome {
        let mut outcome = CallOutcome {
            result: 0,
            denied_by: None,
            called: false,
            faults: Vec::new(),
        };
        ctx.set_phase(Phase::Entry);
        for p in &self.entry {
            match p.run(ctx, stack) {
                Ok(0) => {}
                Ok(verdict) => {
                    // The verifier bounds entry verdicts to small CUresult values.
                    outcome.result = u32::try_from(verdict).unwrap_or(u32::MAX);
                    outcome.denied_by = Some((p.object.clone(), p.name.clone()));
                    break;
                }
                Err(e) => {
                    tracing::warn!(program = %p.name, error = %e, "entry program failed; ignored");
                    outcome.faults.push(p.name.clone());
                }
            }
        }
        if outcome.denied_by.is_none() {
            outcome.result = real(ctx);
            outcome.called = true;
        }
        ctx.set_phase(Phase::Exit);
        ctx.set_result(outcome.result);
        for p in &self.exit {
            if let Err(e) = p.run(ctx, stack) {
                tracing::warn!(program = %p.name, error = %e, "exit program failed; ignored");
                outcome.faults.push(p.name.clone());
            }
        }
        outcome.result = ctx.result();
        outcome
    }
}

/// Every program of a registry, re-verified and compiled, by attach point id.
#[derive(Debug, Default)]
pub struct PolicySet {
    /// Registry generation the set was built from.
    pub generation: u64,
    chains: BTreeMap<u32, Chain>,
}

impl PolicySet {
    /// Reads the registry, re-verifies every program at every link (never trusting that the
    /// CLI did), binds the maps the object recorded, prepares and JIT-compiles: for each
    /// object [`LoadedObject::open`], for each link [`LoadedObject::build`].
    pub fn load(reg: &Registry, helpers: &HelperTable) -> Result<Self, DispatchError> {
        let snap = reg.snapshot()?;
        let mut set = PolicySet {
            generation: snap.generation,
            chains: BTreeMap::new(),
        };
        for rec in &snap.objects {
            let loaded = LoadedObject::open(reg, rec)?;
            for prec in &rec.programs {
                // A recorded program missing from the object is an error even without links.
                loaded.program(prec)?;
                for link in &prec.links {
                    let built = loaded.build(prec, link, helpers)?;
                    let attached = AttachedProgram {
                        object: rec.name.clone(),
                        name: prec.name.clone(),
                        phase: built.phase,
                        priority: link.priority,
                        stats: built.stats,
                        compiled: built.compiled,
                        prepared: built.prepared,
                    };
                    let chain = set.chains.entry(built.point.id).or_default();
                    match built.phase {
                        Phase::Entry => chain.entry.push(attached),
                        Phase::Exit => chain.exit.push(attached),
                    }
                }
            }
        }
        for chain in set.chains.values_mut() {
            chain.entry.sort_by_key(|p| p.priority);
            chain.exit.sort_by_key(|p| p.priority);
        }
        Ok(set)
    }

    /// The chain of `point`, if any program is attached to it.
    pub fn chain(&self, point: &AttachPoint) -> Option<&Chain> {
        self.chains.get(&point.id)
    }

    /// Every attached program.
    pub fn programs(&self) -> impl Iterator<Item = &AttachedProgram> {
        self.chains
            .values()
            .flat_map(|c| c.entry.iter().chain(c.exit.iter()))
    }
}
