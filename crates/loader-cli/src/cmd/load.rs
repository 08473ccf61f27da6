//! `gpubpf load OBJ [--attach API|PROG=API[,…]] [--name N] [--set VAR=VALUE] [--priority P]
//! [--replace OLD] [--recreate-maps] [--wait[=T]]`: parse, relocate and verify an object,
//! bind or create its maps, and record its programs and links in the registry (no running
//! application needed; live processes pick the change up through the registry's generation
//! word). With `--replace OLD` (or a name that is loaded already) the new object takes the
//! old one's place in one generation and keeps its maps by name, with their contents.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use gpubpf_runtime::attach::AttachPoint;
use gpubpf_runtime::object::{Object, Program};
use gpubpf_runtime::program::verify_cache::{self, VerifyCache};
use gpubpf_runtime::program::{
    bind_maps_with, map_defs, plan_attach, prepare, resolve_links, verify_at, verify_at_with,
    verify_key, BindOptions, BoundMap,
};
use gpubpf_runtime::registry::{
    sha256_hex, Access, Mode, ObjectRecord, ProgramRecord, Registry, RegistryError, Replaced,
    Writer, RECORD_FORMAT,
};
use gpubpf_verifier::VerifyStats;
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
    /// Registry name (default: OLD with --replace, else the file name without `.o`).
    /// Loading a loaded name again replaces that object as --replace does.
    #[arg(long)]
    pub name: Option<String>,
    /// Swap loaded object OLD for this one in one registry generation (a process sees the
    /// old object or the new one, never neither nor both). Maps are kept by name with their
    /// contents (quota's `proc_usage`, pinned by name, keeps its counters when `--set`
    /// changes a limit); under a new --name OLD's own maps (`OLD.m`) become NEW's (`NEW.m`);
    /// OLD's maps the new object does not use go unless pinned. Fails when OLD is not
    /// loaded.
    #[arg(long, value_name = "OLD")]
    pub replace: Option<String>,
    /// When a kept map's definition changed (type, key/value size, max_entries, flags):
    /// create it anew, empty, instead of refusing. Not for a map other objects share.
    #[arg(long)]
    pub recreate_maps: bool,
    /// Set a global before loading (`--set limit_bytes=8GiB`); repeatable.
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// Order among programs on the same attach point: lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Run the programs without enforcing them: entry verdicts and exit result or
    /// out-value changes are counted and written to the audit ring (`gpubpf audit`), never
    /// applied.
    #[arg(long)]
    pub shadow: bool,
    /// Return once every live process running the shim has acknowledged the change (or
    /// fail after TIMEOUT: `10s`, `500ms`, plain seconds; default 10s), saying how many did.
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "10s")]
    pub wait: Option<String>,
    /// In a system registry: what applications (processes of other users than the owner)
    /// may do with map MAP (its name in the object or the registry): `rw` (the default,
    /// what a policy that counts needs), `ro` (the default for `.rodata`; programs that
    /// write it are rejected in those processes) or `none`. Repeatable.
    #[arg(long = "map-access", value_name = "MAP=rw|ro|none")]
    pub map_access: Vec<String>,
}

impl Args {
    /// What `gpubpf run`, `record`, `replay` and `demo` load for a `--policy OBJ[:attach]`:
    /// `object` attached as `attach` says, with the `--set` values, every other option at
    /// its default.
    pub fn policy(object: PathBuf, attach: Vec<String>, set: Vec<String>) -> Self {
        Args {
            object,
            attach,
            name: None,
            replace: None,
            recreate_maps: false,
            set,
            priority: 0,
            shadow: false,
            wait: None,
            map_access: Vec::new(),
        }
    }
}

/// `MAP=rw|ro|none` pairs of `--map-access`.
fn parse_map_access(
    pairs: &[String],
) -> anyhow::Result<Vec<(String, gpubpf_runtime::registry::Access)>> {
    pairs
        .iter()
        .map(|p| {
            let (name, a) = p
                .split_once('=')
                .with_context(|| format!("--map-access `{p}`: expected MAP=rw|ro|none"))?;
            let a = a
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--map-access `{p}`: {e}"))?;
            Ok((name.to_string(), a))
        })
        .collect()
}

/// `10s`, `500ms`, `2m` or plain seconds.
pub fn parse_timeout(s: &str) -> anyhow::Result<std::time::Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid timeout `{s}`: use e.g. `10s`, `500ms`, `2m`"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => anyhow::bail!("invalid timeout unit in `{s}`: use ms, s or m"),
    };
    anyhow::ensure!(secs.is_finite() && secs >= 0.0, "invalid timeout `{s}`");
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Waits until every live registered process has acknowledged `generation` or `timeout`
/// passes: the number of processes that acknowledged, or an error naming those that did not.
pub fn wait_acked(
    reg: &Registry,
    generation: u64,
    timeout: std::time::Duration,
) -> anyhow::Result<usize> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let procs = reg.control().processes();
        let pending: Vec<u32> = procs
            .iter()
            .filter(|p| p.acked_generation < generation)
            .map(|p| p.pid)
            .collect();
        if pending.is_empty() {
            return Ok(procs.len());
        }
        if std::time::Instant::now() >= deadline {
            let pids: Vec<String> = pending.iter().map(u32::to_string).collect();
            anyhow::bail!(
                "{} of {} process(es) acknowledged generation {generation} within {timeout:?};                  still waiting for pid {}",
                procs.len() - pending.len(),
                procs.len(),
                pids.join(", ")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
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

/// What a load did.
#[derive(Debug)]
pub struct Report {
    /// The new record.
    pub record: ObjectRecord,
    /// The registry generation that includes it.
    pub generation: u64,
    /// The maps bound, with what binding did.
    pub bound: Vec<BoundMap>,
    /// Maps of the replaced object that nothing uses any more, removed.
    pub removed: Vec<String>,
    /// The replaced object (`--replace`, or the same name loaded again).
    pub replaced: Option<ObjectRecord>,
    /// `--set` globals with their parsed values.
    pub globals: Vec<super::prog_info::GlobalValue>,
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let timeout = args.wait.as_deref().map(parse_timeout).transpose()?;
    let report = load_report(&args)?;
    let Report {
        record,
        generation,
        removed,
        ..
    } = &report;
    let generation = *generation;
    let acked = match timeout {
        Some(t) => {
            let reg = Registry::open_default().context("cannot open the registry")?;
            Some(wait_acked(&reg, generation, t)?)
        }
        None => None,
    };
    if out.json() {
        let mut v = serde_json::to_value(record)?;
        v["generation"] = json!(generation);
        v["maps_removed"] = json!(removed);
        v["maps_taken_over"] = report
            .bound
            .iter()
            .filter_map(|b| {
                let from = b.taken_over.as_ref()?;
                Some(json!({"from": from, "to": b.binding.registry_name}))
            })
            .collect();
        v["maps_recreated"] = report
            .bound
            .iter()
            .filter(|b| b.recreated)
            .map(|b| b.binding.registry_name.clone())
            .collect();
        v["globals_parsed"] = serde_json::to_value(&report.globals)?;
        v["shadow"] = json!(record.shadow);
        if let Some(n) = acked {
            v["acknowledged_by"] = json!(n);
        }
        return out.print_json(&v);
    }
    match &report.replaced {
        Some(old) => println!(
            "replaced {} (id {}) with {} (id {}, generation {generation})",
            old.name, old.id, record.name, record.id
        ),
        None => println!(
            "loaded {} (id {}, generation {generation})",
            record.name, record.id
        ),
    }
    if let Some(n) = acked {
        println!("  acknowledged by {n} process(es)");
    }
    if record.shadow {
        println!("  shadow: its decisions are audited (`gpubpf audit`), not enforced");
    }
    for p in &record.programs {
        for l in &p.links {
            println!(
                "  {} -> {} ({}, priority {})",
                p.name, l.attach_point, l.phase, l.priority
            );
        }
    }
    for b in &report.bound {
        let how = match (&b.taken_over, b.recreated, b.binding.created) {
            (Some(from), _, _) => format!("kept from {from}"),
            (None, true, _) => "recreated, empty: its definition changed".into(),
            (None, false, true) => "created".into(),
            (None, false, false) => "existing".into(),
        };
        println!(
            "  map {} ({}, {how})",
            b.binding.registry_name, b.binding.spec
        );
    }
    for g in &report.globals {
        println!("  global {g}");
    }
    // A map taken over under a new name is listed as kept above.
    let renamed = |m: &String| {
        report
            .bound
            .iter()
            .any(|b| b.taken_over.as_ref() == Some(m))
    };
    for m in removed.iter().filter(|m| !renamed(m)) {
        println!("  map {m} removed (the new version does not use it)");
    }
    Ok(())
}

/// Verifies the object of `args` and records it in the default registry (`GPUBPF_HOME`):
/// the record, the registry generation that now includes it, and the maps of a replaced
/// version that were removed because nothing uses them any more.
pub fn load(args: &Args) -> anyhow::Result<(ObjectRecord, u64, Vec<String>)> {
    let r = load_report(args)?;
    Ok((r.record, r.generation, r.removed))
}

/// The loaded object `old` that `--replace` names, or an error that lists what is loaded.
fn replaced_object(reg: &Registry, old: &str) -> anyhow::Result<ObjectRecord> {
    match reg.object(old) {
        Ok(r) => Ok(r),
        Err(RegistryError::NoSuchProgram { .. } | RegistryError::InvalidName { .. }) => {
            let loaded: Vec<String> = reg
                .snapshot()
                .context("cannot read the registry")?
                .objects
                .into_iter()
                .map(|o| o.name)
                .collect();
            anyhow::bail!(
                "cannot replace `{old}`: no loaded program has that name ({})",
                if loaded.is_empty() {
                    "nothing is loaded; use `gpubpf load` without --replace".to_string()
                } else {
                    format!("loaded: {}", loaded.join(", "))
                }
            )
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read program `{old}`"))),
    }
}

/// [`load`], with everything it did.
pub fn load_report(args: &Args) -> anyhow::Result<Report> {
    let path = &args.object;
    let (bytes, mut obj) = super::inspect::read_object(path)?;
    obj.apply_sets(&args.set)
        .with_context(|| format!("`{}`: --set", path.display()))?;
    let name = args
        .name
        .clone()
        .or_else(|| args.replace.clone())
        .unwrap_or_else(|| default_name(path));
    if !gpubpf_runtime::registry::valid_name(&name) {
        anyhow::bail!(
            "invalid program name `{name}`: use A-Z a-z 0-9 _ . - (not starting with `.`)"
        );
    }

    // Resolve attach points and verify every program where it will run.
    let plan = plan_attach(&obj.programs, &args.attach)
        .with_context(|| format!("`{}`", path.display()))?;
    let mut programs = Vec::new();
    // What was accepted, for the registry's verification cache (recorded once loaded).
    let mut verified = Vec::new();
    for (p, attach) in obj.programs.iter().zip(&plan) {
        let links = resolve_links(p, attach, args.priority)
            .with_context(|| format!("program `{}`", p.name))?;
        for (point, link) in &links {
            let stats = verify_at(&obj, p, point).map_err(|e| CliError {
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
            verified.push((p, *point, stats));
        }
        programs.push(ProgramRecord {
            name: p.name.clone(),
            section: p.section.clone(),
            insn_count: p.insns.len(),
            links: links.into_iter().map(|(_, l)| l).collect(),
        });
    }

    let home = gpubpf_runtime::registry::default_home();
    let created = !home.join("control").exists();
    let reg = Registry::open(&home).context("cannot open the registry")?;
    if created {
        super::registry::note_if_on_disk(&home);
    }
    let accesses = parse_map_access(&args.map_access)?;
    let mut writer = reg.writer().context("cannot lock the registry")?;
    // Read under the lock: what is replaced cannot change before this load is published.
    let previous = match &args.replace {
        Some(old) => {
            let prev = replaced_object(&reg, old)?;
            if name != *old && reg.object(&name).is_ok() {
                anyhow::bail!(
                    "cannot replace `{old}` with `{name}`: `{name}` is loaded too; unload it, \
                     or choose another --name"
                );
            }
            Some(prev)
        }
        None => reg.object(&name).ok(),
    };
    let first_id = writer
        .allocate_ids(ObjectRecord::ids_needed(programs.len()))
        .context("cannot allocate an id")?;
    let opts = BindOptions {
        replacing: previous.as_ref(),
        recreate_changed: args.recreate_maps,
    };
    let bound = bind_maps_with(&mut writer, &name, &map_defs(&obj), &opts)
        .with_context(|| format!("`{}`", path.display()))?;
    for (m, access) in &accesses {
        let Some(b) = bound
            .iter()
            .find(|b| &b.binding.object_name == m || &b.binding.registry_name == m)
        else {
            forget_new_maps(&mut writer, &bound);
            anyhow::bail!("--map-access: the object has no map `{m}`");
        };
        if let Err(e) = writer.set_map_access(&b.binding.registry_name, *access) {
            forget_new_maps(&mut writer, &bound);
            return Err(anyhow::Error::new(e).context(format!("--map-access `{m}`")));
        }
    }
    // The prepare step must succeed here exactly as it will in every process.
    let maps: Vec<_> = bound.iter().map(|b| b.map.clone()).collect();
    for p in &obj.programs {
        if let Err(e) = prepare(&p.insns, &maps) {
            forget_new_maps(&mut writer, &bound);
            return Err(anyhow::Error::new(e).context(format!("program `{}`", p.name)));
        }
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
        id: first_id,
        replaced: previous.as_ref().map(|p| Replaced {
            id: p.id,
            name: p.name.clone(),
        }),
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
        shadow: args.shadow,
    };
    // A loaded name loaded again is replaced the same way as with --replace.
    let published = match &previous {
        Some(old) => writer
            .replace_object(&old.name, &record, &bytes)
            .map(|_| ()),
        None => writer.publish_object(&record, &bytes),
    };
    if let Err(e) = published {
        forget_new_maps(&mut writer, &bound);
        return Err(anyhow::Error::new(e).context(format!("cannot record program `{name}`")));
    }
    // Maps of the replaced version that this one no longer binds go, unless used or pinned.
    let dropped: Vec<String> = previous
        .iter()
        .flat_map(|o| o.maps.iter().map(|m| m.registry_name.clone()))
        .filter(|m| !record.maps.iter().any(|b| &b.registry_name == m))
        .collect();
    let removed = writer
        .remove_unused_maps(&dropped)
        .with_context(|| format!("loaded `{name}`, but removing maps it no longer uses failed"))?;
    let generation = writer.commit();
    record_verified(&reg, &obj, &verified, &bound);
    let globals = super::prog_info::set_globals(&obj, &record.globals);
    Ok(Report {
        record,
        generation,
        bound,
        removed,
        replaced: previous,
        globals,
    })
}

/// Records what this load verified in the registry's verification cache
/// (`program::verify_cache`): processes that see the object as it was verified need not
/// verify it again. In a system registry (root's: others have no cache) other users'
/// processes see the maps they may only read as read-only to programs, a different input:
/// that view is verified here too and recorded when accepted (a program that writes such a
/// map is rejected in those processes, as before; the load itself does not fail).
fn record_verified(
    reg: &Registry,
    obj: &Object,
    verified: &[(&Program, &'static AttachPoint, VerifyStats)],
    bound: &[BoundMap],
) {
    let Some(cache) = VerifyCache::of(reg, verify_cache::enabled_by_env()) else {
        return;
    };
    for (p, point, stats) in verified {
        cache.put(&verify_key(obj, p, point, &[]), stats);
    }
    if let Mode::System { .. } = reg.mode() {
        let app_read_only: Vec<bool> = bound
            .iter()
            .map(|b| {
                reg.map_access(&b.binding.registry_name)
                    .map_or(true, |a| a != Access::Rw)
            })
            .collect();
        for (p, point, _) in verified {
            if let Err(e) = verify_at_with(obj, p, point, &app_read_only, Some(&cache)) {
                tracing::debug!(program = %p.name, error = %e, "rejected as applications see its maps; not cached");
            }
        }
    }
    cache.prune(verify_cache::KEEP_ENTRIES);
}

/// After a failed load: the maps this load created or took over go again (nothing binds
/// them); maps it recreated cannot come back.
fn forget_new_maps(writer: &mut Writer<'_>, bound: &[BoundMap]) {
    let new: Vec<String> = bound
        .iter()
        .filter(|b| (b.binding.created && !b.recreated) || b.taken_over.is_some())
        .map(|b| b.binding.registry_name.clone())
        .collect();
    if let Err(e) = writer.remove_unused_maps(&new) {
        tracing::warn!(error = %e, "cannot remove the maps of a failed load");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_with_units() {
        use std::time::Duration;
        assert_eq!(parse_timeout("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_timeout("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_timeout("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_timeout("3").unwrap(), Duration::from_secs(3));
        assert!(parse_timeout("3h").is_err());
        assert!(parse_timeout("x").is_err());
    }

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
