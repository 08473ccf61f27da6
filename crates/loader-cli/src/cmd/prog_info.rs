//! What `gpubpf prog list` / `prog show` say about each loaded program, as bpftool's `prog
//! show` does: id, name, object, links, phase, instruction count, JIT code size, load time,
//! the maps it references and the object's `--set` globals with their parsed values.
//!
//! The JIT size comes from building the program exactly as `prog dump` and every process
//! do (`dispatch::LoadedObject`: recorded bytes, recorded globals, bound maps,
//! re-verification, prepare, JIT); a program that does not build is listed with the error.

use std::collections::BTreeMap;
use std::fmt;

use gpubpf_isa::opcode::{BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE, LDDW};
use gpubpf_runtime::dispatch::LoadedObject;
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::object::{render_value, Object};
use gpubpf_runtime::registry::{ObjectRecord, Phase, Registry};
use serde::Serialize;
use serde_json::Value;

/// A `--set` global: as given and as parsed into the object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GlobalValue {
    /// Variable name.
    pub name: String,
    /// The text after `=` (`2GiB`).
    pub given: String,
    /// The value the programs see (a JSON number or bool when it is one: `2147483648`).
    pub value: Value,
    /// C type, when BTF says.
    #[serde(rename = "type")]
    pub type_name: Option<String>,
}

impl fmt::Display for GlobalValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match &self.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        write!(
            f,
            "{} = {v} (--set {}={})",
            self.name, self.name, self.given
        )
    }
}

/// `"8589934592"` → `8589934592`, `"true"` → `true`, anything else stays a string.
fn json_scalar(rendered: String) -> Value {
    if let Ok(n) = rendered.parse::<u64>() {
        return Value::from(n);
    }
    if let Ok(n) = rendered.parse::<i64>() {
        return Value::from(n);
    }
    match rendered.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(rendered),
    }
}

/// The `--set` globals of `given` as `obj` (with them applied) holds them.
pub fn set_globals(obj: &Object, given: &BTreeMap<String, String>) -> Vec<GlobalValue> {
    given
        .iter()
        .map(|(name, text)| {
            let g = obj.global(name);
            let value = g
                .and_then(|g| {
                    let bytes = obj.global_value(g)?;
                    Some(json_scalar(render_value(
                        bytes,
                        g.btf_type,
                        obj.btf.as_ref(),
                    )))
                })
                .unwrap_or(Value::Null);
            GlobalValue {
                name: name.clone(),
                given: text.clone(),
                value,
                type_name: g.and_then(|g| g.type_name.clone()),
            }
        })
        .collect()
}

/// One link, as listed.
#[derive(Debug, Clone, Serialize)]
pub struct LinkInfo {
    pub attach_point: String,
    pub requested: String,
    pub phase: Phase,
    pub priority: i32,
}

/// One loaded program, as `prog list -j` gives it.
#[derive(Debug, Clone, Serialize)]
pub struct ProgInfo {
    /// Program id (`None` for objects loaded before ids existed).
    pub id: Option<u64>,
    /// Function name.
    pub name: String,
    /// Registry name of its object.
    pub object: String,
    pub object_id: Option<u64>,
    /// Loaded with `--shadow`: runs, decides nothing (its decisions are audited).
    pub shadow: bool,
    pub section: String,
    /// Entry or exit (of its links).
    pub phase: Option<Phase>,
    pub links: Vec<LinkInfo>,
    /// Instruction slots (`lddw` takes two).
    pub insn_count: usize,
    /// Bytes of machine code, as every process compiles it (`None` when it did not build).
    pub jited_size: Option<usize>,
    /// Load time, seconds since the epoch.
    pub loaded_at: u64,
    /// Registry names of the maps the program references.
    pub maps: Vec<String>,
    /// The object's `--set` globals and their parsed values.
    pub globals: Vec<GlobalValue>,
    /// Why it could not be built (the JIT size is then unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Run statistics summed over the live processes running it, when any were collected
    /// (`gpubpf ps --stats` switches collection on; faults are always counted).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub run_stats: Option<RunStats>,
}

/// A program's run statistics over the live processes, as bpftool prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    /// Runs counted while collection was on.
    pub run_cnt: u64,
    /// Their total run time.
    pub run_time_ns: u64,
    /// Runs that ended in a fault.
    pub faults: u64,
    /// Decisions a shadow program made but did not apply ("would have denied").
    #[serde(skip_serializing_if = "is_zero")]
    pub shadow_denied: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Run statistics of every program (by object and program name) over the live processes
/// of `reg` (their stats files); programs with nothing counted are left out.
pub fn live_run_stats(reg: &Registry) -> BTreeMap<(String, String), RunStats> {
    use gpubpf_runtime::registry::procstats::ProcStats;
    let mut out: BTreeMap<(String, String), RunStats> = BTreeMap::new();
    for p in reg.control().processes() {
        let Ok(file) = ProcStats::open(&reg.stats_path(&p)) else {
            continue;
        };
        let view = file.read();
        if view.pid != p.pid || view.start_time != p.start_time {
            continue;
        }
        for q in view.programs {
            if q.runs == 0 && q.faults == 0 && q.shadow_denied == 0 {
                continue;
            }
            let e = out.entry((q.object, q.name)).or_default();
            e.run_cnt += q.runs;
            e.run_time_ns += q.run_time_ns;
            e.faults += q.faults;
            e.shadow_denied += q.shadow_denied;
        }
    }
    out
}

/// `2024-05-01T12:00:00Z`.
pub fn human_time(unix: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Every program of `rec`, built as a process builds it, with the run statistics of the
/// live processes.
pub fn object_programs(reg: &Registry, rec: &ObjectRecord) -> Vec<ProgInfo> {
    let stats = live_run_stats(reg);
    let loaded = LoadedObject::open(reg, rec);
    let helpers = standard_helpers();
    let globals = match &loaded {
        Ok(l) => set_globals(&l.object, &rec.globals),
        Err(_) => rec
            .globals
            .iter()
            .map(|(k, v)| GlobalValue {
                name: k.clone(),
                given: v.clone(),
                value: Value::Null,
                type_name: None,
            })
            .collect(),
    };
    rec.programs
        .iter()
        .enumerate()
        .map(|(i, prec)| {
            let mut maps = Vec::new();
            let built = loaded.as_ref().map_err(|e| e.to_string()).and_then(|l| {
                let p = l.program(prec).map_err(|e| e.to_string())?;
                for insn in p.insns.iter().filter(|i| {
                    i.opc == LDDW && matches!(i.src, BPF_PSEUDO_MAP_IDX | BPF_PSEUDO_MAP_IDX_VALUE)
                }) {
                    let name = usize::try_from(insn.imm)
                        .ok()
                        .and_then(|i| rec.maps.iter().find(|b| b.index == i))
                        .map(|b| b.registry_name.clone());
                    if let Some(n) = name.filter(|n| !maps.contains(n)) {
                        maps.push(n);
                    }
                }
                if prec.links.is_empty() {
                    return Ok(None);
                }
                super::prog_dump::build(l, prec, &helpers)
                    .map(|b| Some(b.compiled.code_size()))
                    .map_err(|e| format!("{e:#}"))
            });
            let (jited_size, error) = match built {
                Ok(size) => (size, None),
                Err(e) => (None, Some(e)),
            };
            ProgInfo {
                id: rec.program_id(i),
                name: prec.name.clone(),
                object: rec.name.clone(),
                object_id: (rec.id != 0).then_some(rec.id),
                shadow: rec.shadow,
                section: prec.section.clone(),
                phase: prec.links.first().map(|l| l.phase),
                links: prec
                    .links
                    .iter()
                    .map(|l| LinkInfo {
                        attach_point: l.attach_point.clone(),
                        requested: l.requested.clone(),
                        phase: l.phase,
                        priority: l.priority,
                    })
                    .collect(),
                insn_count: prec.insn_count,
                jited_size,
                loaded_at: rec.loaded_at_unix,
                maps,
                globals: globals.clone(),
                error,
                run_stats: stats.get(&(rec.name.clone(), prec.name.clone())).copied(),
            }
        })
        .collect()
}

/// bpftool-style text of one program.
pub fn render(p: &ProgInfo) -> String {
    use std::fmt::Write as _;
    let id = p.id.map_or_else(|| "-".to_string(), |i| i.to_string());
    let mut s = format!("{id}: {}  object {}", p.name, p.object);
    if let Some(oid) = p.object_id {
        let _ = write!(s, " (id {oid})");
    }
    let _ = writeln!(
        s,
        "  {}{}",
        p.section,
        if p.shadow { "  shadow" } else { "" }
    );
    for l in &p.links {
        let _ = write!(
            s,
            "\t{} {} priority {}",
            l.attach_point, l.phase, l.priority
        );
        if l.requested != l.attach_point {
            let _ = write!(s, " (requested as {})", l.requested);
        }
        s.push('\n');
    }
    let jited = p
        .jited_size
        .map_or_else(|| "-".to_string(), |n| format!("{n}B"));
    let _ = writeln!(
        s,
        "\tloaded_at {} ({})  insns {}  jited {jited}",
        human_time(p.loaded_at),
        p.loaded_at,
        p.insn_count
    );
    if !p.maps.is_empty() {
        let _ = writeln!(s, "\tmaps {}", p.maps.join(","));
    }
    for g in &p.globals {
        let _ = writeln!(s, "\tglobal {g}");
    }
    if let Some(r) = &p.run_stats {
        let _ = writeln!(
            s,
            "\trun_time_ns {}  run_cnt {}  faults {}",
            r.run_time_ns, r.run_cnt, r.faults
        );
        if r.shadow_denied > 0 {
            let _ = writeln!(s, "\tshadow_denied {}", r.shadow_denied);
        }
    }
    if let Some(e) = &p.error {
        let _ = writeln!(s, "\terror: {e}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_become_json_numbers_and_bools() {
        assert_eq!(json_scalar("2147483648".into()), Value::from(2147483648u64));
        assert_eq!(json_scalar("-3".into()), Value::from(-3));
        assert_eq!(json_scalar("true".into()), Value::Bool(true));
        assert_eq!(json_scalar("\"x\"".into()), Value::from("\"x\""));
        assert_eq!(human_time(86400), "1970-01-02T00:00:00Z");
    }
}
