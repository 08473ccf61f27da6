//! `gpubpf load OBJ [--attach API|PROG=API[,…]] [--name N] [--set VAR=VALUE] [--priority P]`:
//! parse, relocate and verify an object, bind or create its maps, and record its programs
//! and links in the registry (no running application needed; live processes pick the
//! change up through the registry's generation word).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use gpubpf_runtime::object::{Object, ObjectError};
use gpubpf_runtime::program::{
    bind_maps, map_defs, plan_attach, prepare, resolve_links, verify_at,
};
use gpubpf_runtime::registry::{sha256_hex, ObjectRecord, ProgramRecord, Registry, RECORD_FORMAT};
use serde_json::json;

use crate::exit::{self, CliError};
use crate::output::Output;

/// Arguments of `gpubpf load`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object file (`clang -target bpf` output).
    pub object: PathBuf,
    /// Where programs attach (comma-separated or repeated), each in its section's phase:
    /// `PROG=API` for one program (`API` another spelling of its section's API, or any API
    /// for a `SEC("cuda")`/`SEC("cudaret")` program); `API` alone for the programs whose
    /// section names no API, or for every program when they all name one API. Programs
    /// written for different APIs need `PROG=API`.
    #[arg(long, value_delimiter = ',', value_name = "API|PROG=API")]
    pub attach: Vec<String>,
    /// Registry name (default: the file name without `.o`). Loading a name again replaces
    /// that program atomically; its maps (`NAME.MAP`, private to it) keep their contents.
    #[arg(long)]
    pub name: Option<String>,
    /// Set a global before loading (`--set limit_bytes=8GiB`); repeatable.
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// Order among programs on the same attach point: lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
}

fn default_name(path: &std::path::Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.').to_string();
    if clean.is_empty() {
        "policy".into()
    } else {
        clean
    }
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let path = &args.object;
    let bytes = std::fs::read(path).map_err(|e| CliError {
        code: exit::BAD_OBJECT,
        message: format!("cannot read `{}`: {e}", path.display()),
        json: Some(json!({ "path": path.display().to_string(), "kind": "io" })),
    })?;
    let mut obj = Object::parse(&bytes).map_err(|e: ObjectError| CliError {
        code: exit::BAD_OBJECT,
        message: format!("`{}`: {e}", path.display()),
        json: Some(json!({ "path": path.display().to_string(), "kind": "object", "message": e.to_string() })),
    })?;
    obj.apply_sets(&args.set)
        .with_context(|| format!("`{}`: --set", path.display()))?;
    let name = args.name.clone().unwrap_or_else(|| default_name(path));
    if !gpubpf_runtime::registry::valid_name(&name) {
        anyhow::bail!(
            "invalid program name `{name}`: use A-Z a-z 0-9 _ . - (not starting with `.`)"
        );
    }

    // Resolve attach points and verify every program where it will run.
    let plan = plan_attach(&obj.programs, &args.attach)
        .with_context(|| format!("`{}`", path.display()))?;
    let mut programs = Vec::new();
    for (p, attach) in obj.programs.iter().zip(&plan) {
        let links = resolve_links(p, attach, args.priority)
            .with_context(|| format!("program `{}`", p.name))?;
        for (point, link) in &links {
            verify_at(&obj, p, point).map_err(|e| CliError {
                code: exit::VERIFIER_REJECTED,
                message: format!(
                    "program `{}` ({} at {} {}) rejected by the verifier: {e}\n{}",
                    p.name,
                    p.section,
                    link.attach_point,
                    link.phase,
                    e.render().trim_end()
                ),
                json: Some(json!({
                    "program": p.name,
                    "attach_point": link.attach_point,
                    "phase": link.phase,
                    "verifier": e.diagnostic(),
                })),
            })?;
        }
        programs.push(ProgramRecord {
            name: p.name.clone(),
            section: p.section.clone(),
            insn_count: p.insns.len(),
            links: links.into_iter().map(|(_, l)| l).collect(),
        });
    }

    let reg = Registry::open_default().context("cannot open the registry")?;
    let mut writer = reg.writer().context("cannot lock the registry")?;
    let bound = bind_maps(&mut writer, &name, &map_defs(&obj))?;
    // The prepare step must succeed here exactly as it will in every process.
    let maps: Vec<_> = bound.iter().map(|b| b.map.clone()).collect();
    for p in &obj.programs {
        prepare(&p.insns, &maps).with_context(|| format!("program `{}`", p.name))?;
    }
    let globals: BTreeMap<String, String> = args
        .set
        .iter()
        .filter_map(|s| s.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .collect();
    let record = ObjectRecord {
        format: RECORD_FORMAT,
        name: name.clone(),
        object_file: "object.o".into(),
        object_sha256: sha256_hex(&bytes),
        object_size: bytes.len() as u64,
        source_path: std::fs::canonicalize(path)
            .ok()
            .map(|p| p.display().to_string()),
        loaded_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        globals,
        maps: bound.iter().map(|b| b.binding.clone()).collect(),
        programs,
    };
    let previous = reg.object(&name).ok();
    writer
        .publish_object(&record, &bytes)
        .with_context(|| format!("cannot record program `{name}`"))?;
    // Maps of the replaced version that this one no longer binds go, unless used or pinned.
    let dropped: Vec<String> = previous
        .iter()
        .flat_map(|o| o.maps.iter().map(|m| m.registry_name.clone()))
        .filter(|m| !record.maps.iter().any(|b| &b.registry_name == m))
        .collect();
    let removed = writer
        .remove_unused_maps(&dropped)
        .with_context(|| format!("loaded `{name}`, but removing maps it no longer uses failed"))?;
    drop(writer);
    let generation = reg.generation();
    if out.json() {
        let mut v = serde_json::to_value(&record)?;
        v["generation"] = json!(generation);
        v["maps_removed"] = json!(removed);
        return out.print_json(&v);
    }
    println!("loaded {name} (generation {generation})");
    for p in &record.programs {
        for l in &p.links {
            println!(
                "  {} -> {} ({}, priority {})",
                p.name, l.attach_point, l.phase, l.priority
            );
        }
    }
    for b in &record.maps {
        println!(
            "  map {} ({}, {})",
            b.registry_name,
            b.spec,
            if b.created { "created" } else { "existing" }
        );
    }
    for m in &removed {
        println!("  map {m} removed (the new version does not use it)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_registry_safe() {
        assert_eq!(
            default_name(std::path::Path::new("/x/mem cap.o")),
            "mem_cap"
        );
        assert_eq!(default_name(std::path::Path::new("/")), "policy");
        assert_eq!(default_name(std::path::Path::new("...")), "policy");
        assert_eq!(default_name(std::path::Path::new("a/..b.o")), "b");
    }
}
