//! Resolving where an object's programs attach and verifying them there: shared by
//! `gpubpf load` and by the shim, which re-verifies every program it runs from the
//! registry's record rather than trusting the CLI.

use gpubpf_verifier::{MapInfo, MapKind, VerifierConfig, VerifyInput, VerifyStats};

use super::verify_cache::{self, CacheKey, VerifyCache};

use crate::attach::{self, AttachError, AttachPoint, Phase};
use crate::maps::{MapType, BPF_F_RDONLY_PROG};
use crate::object::{self, Object, Program};
use crate::registry::{LinkRecord, Phase as RecordPhase};

/// The verifier's view of the object's maps (same order as `Object::maps`).
pub fn map_infos(obj: &Object) -> Vec<MapInfo> {
    obj.maps
        .iter()
        .map(|m| MapInfo {
            name: m.name.clone(),
            kind: match super::map_type(m.kind) {
                MapType::Array => MapKind::Array,
                MapType::Hash => MapKind::Hash,
                MapType::LruHash => MapKind::LruHash,
                MapType::RingBuf => MapKind::Ringbuf,
            },
            key_size: m.key_size,
            value_size: m.value_size,
            max_entries: m.max_entries,
            read_only: m.flags & BPF_F_RDONLY_PROG != 0,
        })
        .collect()
}

/// The program's C line info in the verifier's form.
pub fn line_infos(p: &Program) -> Vec<gpubpf_verifier::LineInfo> {
    p.line_info
        .iter()
        .map(|l| gpubpf_verifier::LineInfo {
            pc: l.pc,
            file: l.file.clone(),
            line: l.line,
            column: l.column,
            source: l.source.clone(),
        })
        .collect()
}

/// The registry's phase of an attach phase.
pub fn record_phase(p: Phase) -> RecordPhase {
    match p {
        Phase::Entry => RecordPhase::Entry,
        Phase::Exit => RecordPhase::Exit,
    }
}

/// The attach phase of a program section's phase.
pub fn attach_phase(p: object::Phase) -> Phase {
    match p {
        object::Phase::Entry => Phase::Entry,
        object::Phase::Exit => Phase::Exit,
    }
}

/// Where a program attaches: the section's API, or each of `overrides` (`--attach`), in
/// the program's phase. A runtime alias that covers several driver functions attaches to
/// each of them.
pub fn resolve_links(
    p: &Program,
    overrides: &[String],
    priority: i32,
) -> Result<Vec<(&'static AttachPoint, LinkRecord)>, AttachError> {
    let phase = attach_phase(p.phase);
    let requested: Vec<&str> = if overrides.is_empty() {
        // The name as written in the section (`cudaMalloc`), else the loader's.
        let written = attach::split_section(&p.section)
            .map(|(_, n)| n)
            .filter(|n| !n.is_empty());
        vec![written.unwrap_or(p.attach.as_str())]
    } else {
        overrides.iter().map(String::as_str).collect()
    };
    let mut out: Vec<(&'static AttachPoint, LinkRecord)> = Vec::new();
    for name in requested {
        for point in attach::resolve_alias_targets(name)? {
            if out.iter().any(|(q, _)| q.name == point.name) {
                continue;
            }
            out.push((
                point,
                LinkRecord {
                    attach_point: point.name.to_string(),
                    requested: name.to_string(),
                    phase: record_phase(phase),
                    priority,
                },
            ));
        }
    }
    Ok(out)
}

/// Verifies program `p` of `obj` for `point` in the program's phase.
pub fn verify_at(
    obj: &Object,
    p: &Program,
    point: &AttachPoint,
) -> Result<VerifyStats, Box<gpubpf_verifier::VerifierError>> {
    verify_at_with(obj, p, point, &[], None)
}

/// [`verify_at`], with the maps whose index `read_only` marks `true` read-only to the
/// program besides those the object declares so: the maps this process could map for
/// reading only (a system registry's maps the operator declared read-only for
/// applications). A program that writes one is rejected instead of faulting. With a
/// `cache`, an input it holds is not verified again and an accepted one is recorded
/// ([`super::verify_cache`]).
pub fn verify_at_with(
    obj: &Object,
    p: &Program,
    point: &AttachPoint,
    read_only: &[bool],
    cache: Option<&VerifyCache>,
) -> Result<VerifyStats, Box<gpubpf_verifier::VerifierError>> {
    let maps = verifier_maps(obj, read_only);
    let ctx = point.program_context(attach_phase(p.phase));
    let input = VerifyInput {
        insns: &p.insns,
        maps: &maps,
        ctx: &ctx,
        line_info: None,
    };
    verify_cache::verify(cache, &input, || line_infos(p))
}

/// The verification cache's key of program `p` of `obj` at `point`, with the maps
/// `read_only` marks read-only ([`verify_at_with`]): what `gpubpf load` records after
/// verifying, before it has opened the registry.
pub fn verify_key(obj: &Object, p: &Program, point: &AttachPoint, read_only: &[bool]) -> CacheKey {
    let maps = verifier_maps(obj, read_only);
    let ctx = point.program_context(attach_phase(p.phase));
    verify_cache::key(
        &VerifierConfig::default(),
        &VerifyInput {
            insns: &p.insns,
            maps: &maps,
            ctx: &ctx,
            line_info: None,
        },
    )
}

/// [`map_infos`] with the maps `read_only` marks made read-only.
fn verifier_maps(obj: &Object, read_only: &[bool]) -> Vec<MapInfo> {
    let mut maps = map_infos(obj);
    for (m, ro) in maps.iter_mut().zip(read_only) {
        m.read_only |= *ro;
    }
    maps
}
