//! `gpubpf prog list|show|dump|unload`: programs recorded in the registry.

use anyhow::Context as _;
use gpubpf_runtime::registry::ObjectRecord;
use serde_json::json;

use crate::output::Output;

/// Subcommands of `gpubpf prog`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List loaded programs with their links.
    List,
    /// Show one loaded program: object, programs, links, maps, globals.
    Show {
        /// Registry name given at load time.
        name: String,
    },
    /// Dump what a loaded program runs: `xlated` (BPF instructions, maps bound) or `jited`
    /// (machine code), built exactly as a process builds it (re-verified, prepared, JIT).
    Dump(crate::cmd::prog_dump::Args),
    /// Unload a program: its links go with it, and so do its maps that no other loaded
    /// program uses, unless pinned (`gpubpf maps pin`, `LIBBPF_PIN_BY_NAME`).
    Unload {
        /// Registry name given at load time.
        name: String,
    },
}

fn summary(o: &ObjectRecord) -> serde_json::Value {
    json!({
        "name": o.name,
        "programs": o.programs.iter().map(|p| &p.name).collect::<Vec<_>>(),
        "links": o.programs.iter().flat_map(|p| p.links.iter().map(move |l| json!({
            "program": p.name,
            "attach_point": l.attach_point,
            "phase": l.phase,
            "priority": l.priority,
        }))).collect::<Vec<_>>(),
        "maps": o.maps.iter().map(|m| &m.registry_name).collect::<Vec<_>>(),
        "object_sha256": o.object_sha256,
        "loaded_at_unix": o.loaded_at_unix,
    })
}

/// `prog list`: every link of every loaded object.
fn list(objects: &[ObjectRecord], out: &Output) -> anyhow::Result<()> {
    if out.json() {
        let v: Vec<_> = objects.iter().map(summary).collect();
        return out.print_json(&v);
    }
    println!(
        "{:<20} {:<24} {:<28} {:>5} {:>8}",
        "NAME", "PROGRAM", "ATTACH", "PHASE", "PRIORITY"
    );
    for o in objects {
        for p in &o.programs {
            for l in &p.links {
                println!(
                    "{:<20} {:<24} {:<28} {:>5} {:>8}",
                    o.name,
                    p.name,
                    l.attach_point,
                    l.phase.to_string(),
                    l.priority
                );
            }
        }
    }
    Ok(())
}

pub fn run(cmd: Command, out: &Output) -> anyhow::Result<()> {
    // Reading never creates a registry: without one, nothing is loaded.
    let Some(reg) = super::existing_registry()? else {
        return match cmd {
            Command::List => list(&[], out),
            _ => Err(super::no_registry()),
        };
    };
    match cmd {
        Command::List => {
            let snap = reg.snapshot().context("cannot read the registry")?;
            for (name, why) in &snap.problems {
                tracing::warn!(program = %name, "skipped: {why}");
            }
            list(&snap.objects, out)
        }
        Command::Show { name } => {
            let o = reg
                .object(&name)
                .with_context(|| format!("cannot read program `{name}`"))?;
            if out.json() {
                return out.print_json(&o);
            }
            println!(
                "{}: sha256 {} ({} bytes)",
                o.name, o.object_sha256, o.object_size
            );
            if let Some(src) = &o.source_path {
                println!("  loaded from {src}");
            }
            for p in &o.programs {
                println!(
                    "  program {} ({}, {} insns)",
                    p.name, p.section, p.insn_count
                );
                for l in &p.links {
                    println!(
                        "    -> {} ({}, priority {}, requested as {})",
                        l.attach_point, l.phase, l.priority, l.requested
                    );
                }
            }
            for m in &o.maps {
                println!("  map {} = {} ({})", m.object_name, m.registry_name, m.spec);
            }
            for (k, v) in &o.globals {
                println!("  global {k} = {v}");
            }
            Ok(())
        }
        Command::Unload { name } => {
            let mut w = reg.writer().context("cannot lock the registry")?;
            let o = w
                .remove_object(&name)
                .with_context(|| format!("cannot unload `{name}`"))?;
            let bound: Vec<String> = o.maps.iter().map(|m| m.registry_name.clone()).collect();
            let removed = w
                .remove_unused_maps(&bound)
                .with_context(|| format!("unloaded `{name}`, but removing its maps failed"))?;
            drop(w);
            let kept: Vec<&String> = bound.iter().filter(|m| !removed.contains(m)).collect();
            if out.json() {
                return out.print_json(&json!({
                    "status": "unloaded",
                    "name": o.name,
                    "maps_removed": removed,
                    "maps_kept": kept,
                }));
            }
            println!("unloaded {name}");
            if !removed.is_empty() {
                println!("  maps removed: {}", removed.join(", "));
            }
            if !kept.is_empty() {
                let kept: Vec<&str> = kept.iter().map(|s| s.as_str()).collect();
                println!(
                    "  maps kept (pinned or used by other programs): {}",
                    kept.join(", ")
                );
            }
            Ok(())
        }
        Command::Dump(args) => crate::cmd::prog_dump::run(&reg, args, out),
    }
}
