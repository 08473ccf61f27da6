//! `gpubpf prog list|show|dump|unload`: programs recorded in the registry.
//!
//! As in bpftool, `prog show` without a selector lists every program (`prog list`), `prog
//! show id N` one program (or, for an object's id, that object), `prog show name X` the
//! programs named X (function name) or those of the object named X. `prog show NAME` shows
//! one loaded object in detail.

use anyhow::Context as _;
use gpubpf_runtime::registry::{ObjectRecord, Registry};
use serde_json::json;

use crate::cmd::prog_info::{self, ProgInfo};
use crate::exit::{self, CliError};
use crate::output::Output;

/// Subcommands of `gpubpf prog`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List loaded programs: id, object, links, instructions, JIT size, load time, maps,
    /// `--set` globals (the same as `prog show` without a selector).
    List,
    /// Show loaded programs: all (no selector), `id N`, `name X` (programs of that name or
    /// of the object of that name), or NAME: one loaded object in detail.
    Show {
        /// `id N`, `name X`, or a registry name given at load time.
        #[arg(num_args = 0..=2, value_name = "id N | name X | NAME")]
        selector: Vec<String>,
    },
    /// Dump what a loaded program runs: `xlated` (BPF instructions, maps bound) or `jited`
    /// (machine code), built exactly as a process builds it (re-verified, prepared, JIT).
    Dump(crate::cmd::prog_dump::Args),
    /// Unload a program: its links go with it, and so do its maps that no other loaded
    /// program uses, unless pinned (`gpubpf maps pin`, `LIBBPF_PIN_BY_NAME`).
    Unload(UnloadArgs),
}

/// Arguments of `gpubpf prog unload` (also `gpubpf unload`).
#[derive(Debug, clap::Args)]
pub struct UnloadArgs {
    /// Registry name given at load time.
    pub name: String,
    /// Return once every live process running the shim has acknowledged the unload (or
    /// fail after TIMEOUT: `10s`, `500ms`, plain seconds; default 10s), saying how many did.
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "10s")]
    pub wait: Option<String>,
}

/// What `prog show` (and `prog dump`) selects.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    All,
    Id(u64),
    Name(String),
    Object(String),
}

impl Selector {
    /// Whether the selector names program `i` of `o`: `id N` the program of that id (or
    /// every program of the object of that id), `name X` the programs of that function
    /// name or of the object named X, NAME the object's programs, none every program.
    pub(crate) fn selects(&self, o: &ObjectRecord, i: usize) -> bool {
        match self {
            Selector::All => true,
            Selector::Id(id) => o.id == *id || o.program_id(i) == Some(*id),
            Selector::Name(x) => o.name == *x || o.programs.get(i).is_some_and(|p| p.name == *x),
            Selector::Object(n) => o.name == *n,
        }
    }
}

/// Parses `id N`, `name X` or NAME (none: all); `cmd` (`prog show`, `prog dump xlated`)
/// names the command in the usage error.
pub(crate) fn selector(words: &[String], cmd: &str) -> anyhow::Result<Selector> {
    let usage = |message: String| CliError {
        code: exit::USAGE,
        message,
        json: None,
    };
    match words {
        [] => Ok(Selector::All),
        [one] => Ok(Selector::Object(one.clone())),
        [kw, n] if kw == "id" => n.parse().map(Selector::Id).map_err(|_| {
            usage(format!(
                "invalid program id `{n}`: a number, as `prog list` shows"
            ))
            .into()
        }),
        [kw, x] if kw == "name" => Ok(Selector::Name(x.clone())),
        _ => Err(usage(format!(
            "unknown selector `{}`: use {}`{cmd} id N`, `{cmd} name X` or `{cmd} NAME`",
            words.join(" "),
            if cmd == "prog show" {
                "`prog show`, "
            } else {
                ""
            }
        ))
        .into()),
    }
}

fn loaded_objects(reg: &Registry) -> anyhow::Result<Vec<ObjectRecord>> {
    let snap = reg.snapshot().context("cannot read the registry")?;
    for (name, why) in &snap.problems {
        tracing::warn!(program = %name, "skipped: {why}");
    }
    let mut objects = snap.objects;
    objects.sort_by(|a, b| (a.id, &a.name).cmp(&(b.id, &b.name)));
    Ok(objects)
}

/// Prints programs as `prog list` does, by id as bpftool does.
fn print_programs(progs: &mut [ProgInfo], out: &Output) -> anyhow::Result<()> {
    progs.sort_by(|a, b| (a.id, &a.object).cmp(&(b.id, &b.object)));
    if out.json() {
        return out.print_json(&progs);
    }
    for p in progs {
        print!("{}", prog_info::render(p));
    }
    Ok(())
}

/// `loaded: a (ids 1-3), b (…)`, for errors.
fn loaded_list(objects: &[ObjectRecord]) -> String {
    if objects.is_empty() {
        return "nothing is loaded".into();
    }
    let names: Vec<String> = objects
        .iter()
        .map(|o| match o.program_id(o.programs.len().saturating_sub(1)) {
            Some(last) => format!("{} (ids {}-{last})", o.name, o.id),
            None => o.name.clone(),
        })
        .collect();
    format!("loaded: {}", names.join(", "))
}

fn show(reg: &Registry, sel: Selector, out: &Output) -> anyhow::Result<()> {
    let objects = loaded_objects(reg)?;
    match sel {
        Selector::All => {
            let mut progs: Vec<ProgInfo> = objects
                .iter()
                .flat_map(|o| prog_info::object_programs(reg, o))
                .collect();
            print_programs(&mut progs, out)
        }
        Selector::Object(name) => show_object(reg, &name, out),
        Selector::Id(id) => {
            if let Some(o) = objects.iter().find(|o| o.id == id) {
                return show_object(reg, &o.name, out);
            }
            let found = objects.iter().find_map(|o| {
                (0..o.programs.len())
                    .position(|i| o.program_id(i) == Some(id))
                    .map(|i| (o, i))
            });
            let Some((o, i)) = found else {
                anyhow::bail!("no loaded program has id {id} ({})", loaded_list(&objects));
            };
            let p = prog_info::object_programs(reg, o).swap_remove(i);
            if out.json() {
                return out.print_json(&p);
            }
            print!("{}", prog_info::render(&p));
            Ok(())
        }
        Selector::Name(ref name) => {
            let mut progs: Vec<ProgInfo> = objects
                .iter()
                .filter(|o| (0..o.programs.len()).any(|i| sel.selects(o, i)))
                .flat_map(|o| {
                    let info = prog_info::object_programs(reg, o);
                    info.into_iter()
                        .enumerate()
                        .filter(|(i, _)| sel.selects(o, *i))
                        .map(|(_, p)| p)
                        .collect::<Vec<_>>()
                })
                .collect();
            if progs.is_empty() {
                anyhow::bail!(
                    "no loaded program or object named `{name}` ({})",
                    loaded_list(&objects)
                );
            }
            print_programs(&mut progs, out)
        }
    }
}

/// `prog show NAME`: one object in detail.
fn show_object(reg: &Registry, name: &str, out: &Output) -> anyhow::Result<()> {
    let o = reg
        .object(name)
        .with_context(|| format!("cannot read program `{name}`"))?;
    let progs = prog_info::object_programs(reg, &o);
    if out.json() {
        let mut v = serde_json::to_value(&o)?;
        if let Some(list) = v["programs"].as_array_mut() {
            for (p, info) in list.iter_mut().zip(&progs) {
                p["id"] = json!(info.id);
                p["jited_size"] = json!(info.jited_size);
            }
        }
        v["globals_parsed"] = serde_json::to_value(progs.first().map(|p| &p.globals))?;
        return out.print_json(&v);
    }
    let id = if o.id == 0 {
        String::new()
    } else {
        format!(" (id {})", o.id)
    };
    println!(
        "{}{id}: sha256 {} ({} bytes)",
        o.name, o.object_sha256, o.object_size
    );
    if let Some(src) = &o.source_path {
        println!("  loaded from {src}");
    }
    println!(
        "  loaded_at {} ({})",
        prog_info::human_time(o.loaded_at_unix),
        o.loaded_at_unix
    );
    if let Some(r) = &o.replaced {
        println!("  replaced {} (id {})", r.name, r.id);
    }
    for (p, info) in o.programs.iter().zip(&progs) {
        let id = info.id.map(|i| format!("id {i}, ")).unwrap_or_default();
        let jited = info
            .jited_size
            .map(|n| format!(", jited {n}B"))
            .unwrap_or_default();
        println!(
            "  program {} ({id}{}, {} insns{jited})",
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
    for g in progs.first().map(|p| p.globals.as_slice()).unwrap_or(&[]) {
        println!("  global {g}");
    }
    Ok(())
}

/// `prog unload NAME [--wait[=T]]`.
pub fn unload(reg: &Registry, args: UnloadArgs, out: &Output) -> anyhow::Result<()> {
    let timeout = args
        .wait
        .as_deref()
        .map(super::load::parse_timeout)
        .transpose()?;
    let name = args.name;
    let mut w = reg.writer().context("cannot lock the registry")?;
    let o = w
        .remove_object(&name)
        .with_context(|| format!("cannot unload `{name}`"))?;
    let bound: Vec<String> = o.maps.iter().map(|m| m.registry_name.clone()).collect();
    let removed = w
        .remove_unused_maps(&bound)
        .with_context(|| format!("unloaded `{name}`, but removing its maps failed"))?;
    let generation = w.commit();
    let acked = timeout
        .map(|t| super::load::wait_acked(reg, generation, t))
        .transpose()?;
    let kept: Vec<&String> = bound.iter().filter(|m| !removed.contains(m)).collect();
    if out.json() {
        let mut v = json!({
            "status": "unloaded",
            "name": o.name,
            "generation": generation,
            "maps_removed": removed,
            "maps_kept": kept,
        });
        if let Some(n) = acked {
            v["acknowledged_by"] = json!(n);
        }
        return out.print_json(&v);
    }
    println!("unloaded {name} (generation {generation})");
    if let Some(n) = acked {
        println!("  acknowledged by {n} process(es)");
    }
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

pub fn run(cmd: Command, out: &Output) -> anyhow::Result<()> {
    let sel = match &cmd {
        Command::Show { selector: words } => Some(selector(words, "prog show")?),
        _ => None,
    };
    // Reading never creates a registry: without one, nothing is loaded.
    let Some(reg) = super::existing_registry()? else {
        return match (cmd, sel) {
            (Command::List, _) | (_, Some(Selector::All)) => print_programs(&mut [], out),
            _ => Err(super::no_registry()),
        };
    };
    match cmd {
        Command::List => show(&reg, Selector::All, out),
        Command::Show { .. } => show(&reg, sel.unwrap_or(Selector::All), out),
        Command::Unload(args) => unload(&reg, args, out),
        Command::Dump(args) => crate::cmd::prog_dump::run(&reg, args, out),
    }
}

/// `gpubpf unload NAME [--wait[=T]]`, the same as `gpubpf prog unload`.
pub fn run_unload(args: UnloadArgs, out: &Output) -> anyhow::Result<()> {
    let Some(reg) = super::existing_registry()? else {
        return Err(super::no_registry());
    };
    unload(&reg, args, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn selectors_read_like_bpftool() {
        assert_eq!(selector(&words(""), "prog show").unwrap(), Selector::All);
        assert_eq!(
            selector(&words("id 7"), "prog show").unwrap(),
            Selector::Id(7)
        );
        assert_eq!(
            selector(&words("name quota_alloc"), "prog show").unwrap(),
            Selector::Name("quota_alloc".into())
        );
        assert_eq!(
            selector(&words("quota"), "prog show").unwrap(),
            Selector::Object("quota".into())
        );
        assert!(selector(&words("id x"), "prog show").is_err());
        assert!(selector(&words("tag 7"), "prog show").is_err());
    }
}
