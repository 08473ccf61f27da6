//! Runnable programs built from the registry, grouped per attach point.

use std::collections::BTreeMap;

use crate::attach::{self, AttachPoint, Phase};
use crate::helper_table::HelperTable;
use crate::jit::JitError;
use crate::program::verify_cache::VerifyCache;
use crate::registry::{LinkRecord, ObjectRecord, ProgramRecord, Registry};

use super::attached::{AttachedProgram, ProgramParts, Stack, Tier};
use super::build::LoadedObject;
use super::ctx::CtxBuf;
use super::DispatchError;

/// Entry and exit programs of one attach point, each sorted by priority.
///
/// `repr(C, align(64))`: all of it is one cache line (the shim reads it on every policed
/// call; an `Arc`'s counts lie in the line before it and are not touched then).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct Chain {
    /// Entry programs.
    pub entry: Vec<AttachedProgram>,
    /// Exit programs.
    pub exit: Vec<AttachedProgram>,
    /// An object meant for this point could not be built and the process fails closed:
    /// every call is refused with [`FAIL_CLOSED_RESULT`](super::FAIL_CLOSED_RESULT).
    pub broken: bool,
    /// An entry program that fails at run time refuses the call ([`FAIL_CLOSED_RESULT`](super::FAIL_CLOSED_RESULT))
    /// instead of counting as verdict 0.
    pub fail_closed: bool,
    /// Where the process counts this point's calls (the shim's statistics slot).
    pub stats_slot: Option<u32>,
    /// Some program reads `hdr.device` (the shim asks the driver for the current device
    /// only then). [`Chain::compute_reads`] sets it.
    pub reads_device: bool,
    /// Some program reads `hdr.flags` (the shim asks the driver whether the call's stream is
    /// being captured only then). [`Chain::compute_reads`] sets it.
    pub reads_flags: bool,
    /// Some program calls `gpubpf_get_caller` (the shim walks the application's stack for
    /// the caller's address only then). [`Chain::compute_reads`] sets it.
    pub wants_caller: bool,
}

const _: () = assert!(std::mem::size_of::<Chain>() == 64);

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
    /// This chain with every program compiled to native code: same programs, order,
    /// statistics slots and flags. What a process publishes in place of the interpreted
    /// chain its first build made ([`Tier::Interpreted`]).
    pub fn to_native(&self, helpers: &HelperTable) -> Result<Chain, JitError> {
        let native = |ps: &[AttachedProgram]| -> Result<Vec<AttachedProgram>, JitError> {
            ps.iter().map(|p| p.to_native(helpers)).collect()
        };
        Ok(Chain {
            entry: native(&self.entry)?,
            exit: native(&self.exit)?,
            broken: self.broken,
            fail_closed: self.fail_closed,
            stats_slot: self.stats_slot,
            reads_device: self.reads_device,
            reads_flags: self.reads_flags,
            wants_caller: self.wants_caller,
        })
    }

    /// Whether some program of the chain runs on the interpreter.
    pub fn interpreted(&self) -> bool {
        self.entry.iter().chain(&self.exit).any(|p| !p.is_native())
    }

    /// Sets [`Chain::reads_device`] and [`Chain::reads_flags`] from what the verifier saw
    /// the programs read at `point`, and [`Chain::wants_caller`] from their helper calls.
    pub fn compute_reads(&mut self, point: &AttachPoint) {
        let reads = |field: &str| {
            let off = point.field(field).map(|f| f.offset);
            self.entry
                .iter()
                .chain(&self.exit)
                .any(|p| off.is_none_or(|o| p.stats.ctx_fields_read.contains(&o)))
        };
        self.reads_device = reads("hdr.device");
        self.reads_flags = reads("hdr.flags");
        let caller = gpubpf_verifier::helpers::GPUBPF_HELPER_BASE + 2;
        self.wants_caller = self.entry.iter().chain(&self.exit).any(|p| {
            p.insns()
                .iter()
                .any(|i| i.opc == gpubpf_isa::opcode::CALL && i.src == 0 && i.imm == caller)
        });
    }

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
            if p.shadow {
                // Shadow programs run on a copy and decide nothing.
                if let Err(e) = p.run(&mut ctx.clone(), stack) {
                    tracing::warn!(program = %p.name, error = %e, "entry program failed; ignored");
                    outcome.faults.push(p.name.clone());
                }
                continue;
            }
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
            let r = if p.shadow {
                p.run(&mut ctx.clone(), stack)
            } else {
                p.run(ctx, stack)
            };
            if let Err(e) = r {
                tracing::warn!(program = %p.name, error = %e, "exit program failed; ignored");
                outcome.faults.push(p.name.clone());
            }
        }
        outcome.result = ctx.result();
        outcome
    }
}

/// What `AttachedProgram::build` needs besides the code.
fn parts(
    loaded: &LoadedObject,
    prec: &ProgramRecord,
    link: &LinkRecord,
    v: super::build::VerifiedProgram,
) -> ProgramParts {
    ProgramParts {
        object: loaded.record.name.clone(),
        name: prec.name.clone(),
        phase: v.phase,
        priority: link.priority,
        stats: v.stats,
        prepared: v.prepared,
        ctx_size: v.point.ctx_size,
        shadow: loaded.record.shadow,
    }
}

/// An object [`PolicySet::load_each`] left out.
#[derive(Debug)]
pub struct FailedObject {
    /// Registry name.
    pub name: String,
    /// Why.
    pub error: DispatchError,
    /// Ids of the attach points its links name (deduplicated, sorted).
    pub points: std::collections::BTreeSet<u32>,
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
            set.add_object(reg, rec, helpers)?;
        }
        set.sort();
        Ok(set)
    }

    /// Like [`PolicySet::load`], but an object that fails (corrupt, re-verification
    /// rejected, maps changed, …) is left out on its own while every other object is kept:
    /// returns the set and, per failed object, its name, the error and the attach points
    /// its links name. Only a registry that cannot be read at all is an error.
    pub fn load_each(
        reg: &Registry,
        helpers: &HelperTable,
    ) -> Result<(Self, Vec<FailedObject>), DispatchError> {
        Self::load_each_in(reg, helpers, Tier::Native, None)
    }

    /// [`PolicySet::load_each`] with the programs built for `tier`: a process's first build
    /// is [`Tier::Interpreted`] (re-verification only), its chains are then replaced by
    /// their [`Chain::to_native`] twins. With a `cache`, inputs verified before in a
    /// process of the registry's user are taken from it (`program::verify_cache`).
    pub fn load_each_in(
        reg: &Registry,
        helpers: &HelperTable,
        tier: Tier,
        cache: Option<&VerifyCache>,
    ) -> Result<(Self, Vec<FailedObject>), DispatchError> {
        let snap = reg.snapshot()?;
        let mut set = PolicySet {
            generation: snap.generation,
            chains: BTreeMap::new(),
        };
        // Every link of every program is built once its object is open, on several threads
        // (re-verification and JIT compilation dominate start-up): the largest programs
        // first (the recorded length orders the work, nothing else), and one object's
        // programs while another object is still being parsed.
        let items: Vec<(usize, (&ProgramRecord, &LinkRecord))> = snap
            .objects
            .iter()
            .enumerate()
            .flat_map(|(i, rec)| {
                rec.programs
                    .iter()
                    .flat_map(move |prec| prec.links.iter().map(move |link| (i, (prec, link))))
            })
            .collect();
        let (opened, built) = super::parallel::par_groups(
            &snap.objects,
            &items,
            |(prec, _)| prec.insn_count,
            |rec| {
                let loaded = LoadedObject::open(reg, rec)?;
                for prec in &rec.programs {
                    // A recorded program missing from the object is an error even without
                    // links.
                    loaded.program(prec)?;
                }
                Ok::<_, DispatchError>(loaded)
            },
            |loaded, (prec, link)| {
                let v = loaded.verify(prec, link, cache)?;
                let id = v.point.id;
                let parts = parts(loaded, prec, link, v);
                Ok::<_, DispatchError>((id, AttachedProgram::build(parts, tier, helpers)?))
            },
        );
        // Per object: every program, or the first error (in link order) and none of them.
        let mut per_object: Vec<Result<Vec<(u32, AttachedProgram)>, DispatchError>> =
            opened.into_iter().map(|o| o.map(|_| Vec::new())).collect();
        for ((i, _), b) in items.iter().zip(built) {
            let Some(b) = b else {
                continue; // its object did not open
            };
            if let Some(slot @ Ok(_)) = per_object.get_mut(*i) {
                match (b, slot) {
                    (Ok(p), Ok(progs)) => progs.push(p),
                    (Err(e), slot) => *slot = Err(e),
                    (Ok(_), Err(_)) => {}
                }
            }
        }
        let mut failed = Vec::new();
        for (rec, result) in snap.objects.iter().zip(per_object) {
            match result {
                Ok(progs) => {
                    for (id, p) in progs {
                        let chain = set.chains.entry(id).or_default();
                        match p.phase {
                            Phase::Entry => chain.entry.push(p),
                            Phase::Exit => chain.exit.push(p),
                        }
                    }
                }
                Err(error) => failed.push(FailedObject {
                    name: rec.name.clone(),
                    points: rec
                        .programs
                        .iter()
                        .flat_map(|p| &p.links)
                        .filter_map(|l| attach::resolve(&l.attach_point).ok())
                        .map(|p| p.id)
                        .collect(),
                    error,
                }),
            }
        }
        set.sort();
        Ok((set, failed))
    }

    /// Builds every link of every program of `rec` into this set's chains (unsorted).
    fn add_object(
        &mut self,
        reg: &Registry,
        rec: &ObjectRecord,
        helpers: &HelperTable,
    ) -> Result<(), DispatchError> {
        let loaded = LoadedObject::open(reg, rec)?;
        for prec in &rec.programs {
            // A recorded program missing from the object is an error even without links.
            loaded.program(prec)?;
            for link in &prec.links {
                let v = loaded.verify(prec, link, None)?;
                let (id, phase) = (v.point.id, v.phase);
                let attached =
                    AttachedProgram::build(parts(&loaded, prec, link, v), Tier::Native, helpers)?;
                let chain = self.chains.entry(id).or_default();
                match phase {
                    Phase::Entry => chain.entry.push(attached),
                    Phase::Exit => chain.exit.push(attached),
                }
            }
        }
        Ok(())
    }

    fn sort(&mut self) {
        for chain in self.chains.values_mut() {
            chain.entry.sort_by_key(|p| p.priority);
            chain.exit.sort_by_key(|p| p.priority);
        }
    }

    /// The chains by attach-point id, taken out of the set (the shim publishes each on its
    /// own).
    pub fn into_chains(self) -> BTreeMap<u32, Chain> {
        self.chains
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
