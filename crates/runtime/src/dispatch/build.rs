//! From a registry record to runnable code: the steps every process takes for each loaded
//! object and each link of its programs. [`super::PolicySet::load`] runs them for the whole
//! registry; `gpubpf prog dump` runs them for one object to show exactly what would execute.

use std::sync::Arc;

use gpubpf_verifier::sanitize::sanitize_dead_code;
use gpubpf_verifier::VerifyStats;

use crate::attach::{self, AttachPoint, Phase};
use crate::helper_table::HelperTable;
use crate::jit::{self, CompiledProgram};
use crate::maps::Map;
use crate::object::{Object, Program};
use crate::program::verify_cache::VerifyCache;
use crate::program::{attach_phase, prepare, verify_at_with, PreparedProgram};
use crate::registry::{LinkRecord, ObjectRecord, Phase as RecordPhase, ProgramRecord, Registry};

use super::DispatchError;

/// A loaded object re-read from the registry: its recorded bytes parsed, the globals
/// recorded at load time (`--set`) applied, and the maps it was bound to opened and checked
/// against their recorded definitions.
#[derive(Debug)]
pub struct LoadedObject {
    /// The registry record it was opened from.
    pub record: ObjectRecord,
    /// The parsed object, globals applied.
    pub object: Object,
    /// The bound maps, indexed like `object.maps`.
    maps: Vec<Arc<Map>>,
}

/// One program verified for one link and prepared against the bound maps, not yet
/// compiled.
#[derive(Debug)]
pub struct VerifiedProgram {
    /// Where it runs.
    pub point: &'static AttachPoint,
    /// Entry or exit.
    pub phase: Phase,
    /// What the verifier reported in this process.
    pub stats: VerifyStats,
    /// The instructions that run (map references rewritten to addresses, unreached code
    /// replaced by traps); keeps the maps alive.
    pub prepared: PreparedProgram,
}

/// One program built for one link: re-verified at the link's attach point, prepared
/// against the bound maps and JIT-compiled.
#[derive(Debug)]
pub struct BuiltProgram {
    /// Where it runs.
    pub point: &'static AttachPoint,
    /// Entry or exit.
    pub phase: Phase,
    /// What the verifier reported in this process.
    pub stats: VerifyStats,
    /// The instructions that run (map references rewritten to addresses); keeps the maps
    /// alive.
    pub prepared: PreparedProgram,
    /// The machine code of `prepared`.
    pub compiled: CompiledProgram,
}

impl LoadedObject {
    /// Parses the recorded bytes of `rec`, applies its recorded globals and opens its maps.
    pub fn open(reg: &Registry, rec: &ObjectRecord) -> Result<Self, DispatchError> {
        let object_err = |message: String| DispatchError::Object {
            object: rec.name.clone(),
            message,
        };
        let bytes = reg.object_bytes(&rec.name)?;
        let mut object = Object::parse(&bytes).map_err(|e| object_err(e.to_string()))?;
        let sets: Vec<String> = rec
            .globals
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        object
            .apply_sets(&sets)
            .map_err(|e| object_err(e.to_string()))?;
        let mut maps: Vec<Arc<Map>> = Vec::with_capacity(rec.maps.len());
        for b in &rec.maps {
            let map = reg.open_map(&b.registry_name)?;
            if map.spec() != &b.spec {
                return Err(DispatchError::MapChanged {
                    object: rec.name.clone(),
                    map: b.registry_name.clone(),
                });
            }
            maps.push(map);
        }
        Ok(Self {
            record: rec.clone(),
            object,
            maps,
        })
    }

    /// The bound maps, indexed like the object's maps.
    pub fn maps(&self) -> &[Arc<Map>] {
        &self.maps
    }

    /// The object's program that `prec` records.
    pub fn program(&self, prec: &ProgramRecord) -> Result<&Program, DispatchError> {
        self.object
            .programs
            .iter()
            .find(|p| p.name == prec.name)
            .ok_or_else(|| DispatchError::Object {
                object: self.record.name.clone(),
                message: format!("program `{}` is missing from the object", prec.name),
            })
    }

    /// Re-verifies program `prec` at `link`'s attach point (never trusting that the CLI
    /// did), turns the code no verified path reaches into traps, prepares it against the
    /// bound maps and checks that its phase is still the recorded one: everything but
    /// code generation. With a `cache`, an input verified before in a process of the
    /// registry's user is taken from it (`program::verify_cache`).
    pub fn verify(
        &self,
        prec: &ProgramRecord,
        link: &LinkRecord,
        cache: Option<&VerifyCache>,
    ) -> Result<VerifiedProgram, DispatchError> {
        let p = self.program(prec)?;
        let point = attach::resolve(&link.attach_point)?;
        // Maps this process could only map for reading are read-only to the program.
        let read_only: Vec<bool> = self.maps.iter().map(|m| !m.is_writable()).collect();
        let stats = verify_at_with(&self.object, p, point, &read_only, cache).map_err(|e| {
            DispatchError::Rejected {
                object: self.record.name.clone(),
                program: p.name.clone(),
                message: e.to_string(),
            }
        })?;
        // Code no verified path reaches becomes traps (docs/design-decisions.md, Verifier).
        let insns = sanitize_dead_code(&p.insns, &stats.unreached);
        let prepared = prepare(&insns, &self.maps)?;
        let phase = attach_phase(p.phase);
        let expected = match link.phase {
            RecordPhase::Entry => Phase::Entry,
            RecordPhase::Exit => Phase::Exit,
        };
        if phase != expected {
            return Err(DispatchError::Object {
                object: self.record.name.clone(),
                message: format!("program `{}` changed phase since it was loaded", p.name),
            });
        }
        Ok(VerifiedProgram {
            point,
            phase,
            stats,
            prepared,
        })
    }

    /// [`LoadedObject::verify`], then JIT-compiles the program.
    pub fn build(
        &self,
        prec: &ProgramRecord,
        link: &LinkRecord,
        helpers: &HelperTable,
    ) -> Result<BuiltProgram, DispatchError> {
        let v = self.verify(prec, link, None)?;
        // Map lookups are inlined: `BuiltProgram` (and the `AttachedProgram` made of it)
        // keeps `prepared`, and with it the maps, alive as long as `compiled`.
        let compiled =
            jit::compile_with_maps(&v.prepared.insns, helpers, &v.prepared.inline_maps())?;
        Ok(BuiltProgram {
            point: v.point,
            phase: v.phase,
            stats: v.stats,
            prepared: v.prepared,
            compiled,
        })
    }
}
