//! `gpubpf test-run OBJ [--prog P] [--attach API] --ctx FIELD=VALUE … [--repeat N]
//! [--registry] [-j]`: runs one program of an object on a synthetic ctx of its attach point
//! and reports what it did — like `bpftool prog run`, for policy unit tests without a GPU.
//!
//! 1. The program is verified exactly as `gpubpf load` verifies it (same attach point, same
//!    maps, `--set` applied; a rejection exits with the verifier's code and diagnostic), and
//!    its unreached instructions become traps as in every process that runs it.
//! 2. Maps: by default two scratch registries (one per engine) with the object's maps as
//!    `gpubpf load` would create them, optionally seeded with `--map-set MAP KEY VALUE`;
//!    with `--registry`, the real registry's maps (`$GPUBPF_HOME`, as `gpubpf load --name
//!    NAME` bound them), **read and written**: the run changes them as a real call would.
//!    See `world`.
//! 3. The ctx is built from `--ctx` (see `ctx_input`); helpers see a deterministic world
//!    (see `env`).
//! 4. Every run goes through the interpreter (checked mode) and the JIT, each on its own set
//!    of maps; the return value or fault, the ctx afterwards, the map changes and the
//!    `bpf_printk` lines must be identical, or the command fails naming the difference.
//!    `--repeat N` runs N times; map state carries over from run to run.
//!
//! Printed per run: the verdict (entry: 0 = the call proceeds, else the `CUresult` it is
//! refused with) or the result (exit), the ctx fields that changed, the map entries that
//! changed (typed with BTF like `gpubpf maps dump`) and the `bpf_printk` messages.

mod ctx_input;
mod engines;
pub(crate) mod env;
mod world;

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use gpubpf_runtime::attach::{AttachPoint, Phase};
use gpubpf_runtime::dispatch::{CtxBuf, Stack};
use gpubpf_runtime::object::Program;
use gpubpf_runtime::program::{attach_phase, map_defs, plan_attach, resolve_links, verify_at};
use gpubpf_runtime::registry::valid_name;
use gpubpf_verifier::sanitize::sanitize_dead_code;
use serde::Serialize;
use serde_json::{json, Value};

use crate::exit::{self, CliError};
use crate::output::Output;
use engines::{Engine, Fault, Runner};
use world::{MapChange, World};

/// Arguments of `gpubpf test-run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object file (`clang -target bpf` output).
    pub object: PathBuf,
    /// The program to run (needed when the object has several).
    #[arg(long = "prog", value_name = "NAME")]
    pub prog: Option<String>,
    /// The attach point, for a `SEC("cuda")`/`SEC("cudaret")` program or to pick one driver
    /// function of an alias that covers several (another spelling of its section's API).
    #[arg(long, value_name = "API")]
    pub attach: Option<String>,
    /// A ctx field (`args.bytesize=1GiB`, `out.dptr=0x7f0000`, `hdr.pid=42`,
    /// `hdr.result=2`; `hex:…`/`buf:u64=…,…` for memory a pointer argument points to);
    /// repeatable. Unset fields are 0, `hdr.pid`/`hdr.tid` ours.
    #[arg(long = "ctx", value_name = "FIELD=VALUE")]
    pub ctx: Vec<String>,
    /// Run N times; map state carries over from one run to the next.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Run against the real registry's maps ($GPUBPF_HOME), as loaded under `--name`, and
    /// change them (read-write). Default: scratch maps, created for this run and removed.
    #[arg(long)]
    pub registry: bool,
    /// Registry name of the object (default: the file name without `.o`), which names its
    /// private maps (`NAME.MAP`, `NAME.rodata`).
    #[arg(long)]
    pub name: Option<String>,
    /// Set a global first, as `gpubpf load` does (scratch maps only: with --registry the
    /// globals are the loaded ones).
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// Write a map entry before the first run, as `gpubpf maps update MAP --key KEY --value
    /// VALUE` (`--map-set proc_usage 42 bytes=300`); repeatable.
    #[arg(long = "map-set", num_args = 3, value_names = ["MAP", "KEY", "VALUE"])]
    pub map_set: Vec<String>,
    /// The user id `bpf_get_current_uid_gid` reports (default: ours).
    #[arg(long)]
    pub uid: Option<u32>,
    /// The group id `bpf_get_current_uid_gid` reports (default: ours).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Seed of `bpf_get_prandom_u32` (each run: a stream from the seed and the run number).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The name `gpubpf_get_kernel_name` gives every CUfunction (default: none, -ENOENT).
    #[arg(long, value_name = "NAME")]
    pub kernel_name: Option<String>,
}

/// What one engine did in one run.
#[derive(Debug, Clone, Serialize)]
struct Outcome {
    #[serde(rename = "return")]
    ret: Option<u64>,
    fault: Option<Fault>,
    /// `hdr.result` after the run (exit programs may override it).
    result: u32,
    ctx_changes: Vec<CtxChange>,
    map_changes: Vec<MapChange>,
    printk: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct CtxChange {
    field: String,
    before: u64,
    after: u64,
}

impl Outcome {
    /// The first difference from `other`, if any.
    fn difference(&self, other: &Outcome) -> Option<String> {
        if self.ret != other.ret || self.fault != other.fault {
            return Some(format!(
                "return {} vs {}",
                describe_end(self),
                describe_end(other)
            ));
        }
        if self.ctx_changes != other.ctx_changes {
            return Some(format!(
                "ctx changes {:?} vs {:?}",
                self.ctx_changes, other.ctx_changes
            ));
        }
        if self.map_changes.len() != other.map_changes.len()
            || !self
                .map_changes
                .iter()
                .zip(&other.map_changes)
                .all(|(a, b)| a.same_as(b))
        {
            return Some(format!(
                "map changes {} vs {}",
                json!(self.map_changes),
                json!(other.map_changes)
            ));
        }
        if self.printk != other.printk {
            return Some(format!(
                "bpf_printk output {:?} vs {:?}",
                self.printk, other.printk
            ));
        }
        None
    }
}

fn describe_end(o: &Outcome) -> String {
    match (&o.ret, &o.fault) {
        (Some(r), _) => r.to_string(),
        (None, Some(f)) => format!("fault ({})", f.message),
        (None, None) => "nothing".into(),
    }
}

/// Name of a `CUresult` for the report.
fn cu_name(r: u64) -> &'static str {
    match r {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        800 => "CUDA_ERROR_NOT_PERMITTED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUresult",
    }
}

/// `--name`, else the file name without `.o`.
fn object_name(args: &Args) -> anyhow::Result<String> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .object
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if !valid_name(&name) {
        bail!("invalid object name `{name}`: give one with --name (A-Z a-z 0-9 _ . -)");
    }
    Ok(name)
}

/// The one attach point program `p` runs at.
fn attach_point(p: &Program, attach: Option<&str>) -> anyhow::Result<&'static AttachPoint> {
    let requested: Vec<String> = attach
        .map(|a| format!("{}={a}", p.name))
        .into_iter()
        .collect();
    let plan = plan_attach(std::slice::from_ref(p), &requested)?;
    let links = resolve_links(p, plan.first().map_or(&[][..], Vec::as_slice), 0)
        .with_context(|| format!("program `{}`", p.name))?;
    match links.as_slice() {
        [(point, _)] => Ok(point),
        [] => bail!("program `{}` attaches nowhere", p.name),
        many => {
            let names: Vec<&str> = many.iter().map(|(q, _)| q.name).collect();
            bail!(
                "program `{}` attaches to {} driver functions ({}); choose one with --attach",
                p.name,
                many.len(),
                names.join(", ")
            )
        }
    }
}

fn real_ids() -> (u32, u32) {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if args.registry && !args.set.is_empty() {
        bail!(
            "--set applies to scratch maps only: with --registry the program reads the globals \
             the object was loaded with (`gpubpf load OBJ --set …` changes them)"
        );
    }
    let (_, mut obj) = super::inspect::read_object(&args.object)?;
    obj.apply_sets(&args.set)
        .with_context(|| format!("`{}`: --set", args.object.display()))?;
    let owner = args.object.display().to_string();
    let selected = super::select_programs(
        &obj.programs,
        |p| p.name.as_str(),
        args.prog.as_deref(),
        &owner,
    )?;
    let p = match selected.as_slice() {
        [p] => *p,
        many => {
            let names: Vec<&str> = many.iter().map(|p| p.name.as_str()).collect();
            bail!(
                "`{owner}` has {} programs ({}): choose one with --prog",
                many.len(),
                names.join(", ")
            );
        }
    };
    let point = attach_point(p, args.attach.as_deref()).with_context(|| format!("`{owner}`"))?;
    let phase = attach_phase(p.phase);
    let stats = verify_at(&obj, p, point).map_err(|e| CliError {
        code: exit::VERIFIER_REJECTED,
        message: format!(
            "program `{}` ({} at {} {}) rejected by the verifier: {e}\n{}",
            p.name,
            p.section,
            point.name,
            phase,
            e.render().trim_end()
        ),
        json: Some(json!({
            "program": p.name,
            "attach_point": point.name,
            "phase": phase.as_str(),
            "verifier": e.diagnostic(),
        })),
    })?;
    let insns = sanitize_dead_code(&p.insns, &stats.unreached);

    // One world per engine.
    let name = object_name(&args)?;
    let defs = map_defs(&obj);
    let sets: Vec<(&str, &str, &str)> = args
        .map_set
        .chunks_exact(3)
        .map(|c| (c[0].as_str(), c[1].as_str(), c[2].as_str()))
        .collect();
    let (jit_world, interp_world) = if args.registry {
        let reg = super::existing_registry()?.ok_or_else(super::no_registry)?;
        let real = World::registry(reg, &name, &defs)?;
        for (m, k, v) in &sets {
            real.set_entry(&defs, m, k, v)?;
        }
        let copy = real.copy()?;
        (real, copy)
    } else {
        let (a, b) = (World::scratch(&name, &defs)?, World::scratch(&name, &defs)?);
        for (m, k, v) in &sets {
            a.set_entry(&defs, m, k, v)?;
            b.set_entry(&defs, m, k, v)?;
        }
        (a, b)
    };
    if let Some(name) = &args.kernel_name {
        env::set_kernel_name(name).map_err(|message| CliError {
            code: exit::USAGE,
            message,
            json: None,
        })?;
    }
    let helpers = env::helpers();
    let interp = Runner::new(Engine::Interpreter, &insns, &interp_world, &helpers)?;
    let jit = Runner::new(Engine::Jit, &insns, &jit_world, &helpers)?;

    let mut buffers = ctx_input::Buffers::default();
    let template = ctx_input::build(point, phase, &args.ctx, &mut buffers)?;
    let (real_uid, real_gid) = real_ids();
    let mut stack = Stack::new_boxed();
    let mut runs = Vec::with_capacity(args.repeat as usize);
    for run in 1..=u64::from(args.repeat) {
        let env = env::RunEnv {
            pid: template.get("hdr.pid").unwrap_or(0) as u32,
            tid: template.get("hdr.tid").unwrap_or(0) as u32,
            uid: args.uid.unwrap_or(real_uid),
            gid: args.gid.unwrap_or(real_gid),
            run,
            seed: args.seed,
        };
        let a = run_once(&interp, &interp_world, &template, &env, &mut stack)?;
        let b = run_once(&jit, &jit_world, &template, &env, &mut stack)?;
        if let Some(diff) = a.difference(&b) {
            return Err(CliError {
                code: exit::ERROR,
                message: format!(
                    "the interpreter and the JIT disagree on run {run} of `{}`: {diff} \
                     (an engine bug: please report it with the object and this command)",
                    p.name
                ),
                json: Some(json!({ "run": run, "interpreter": a, "jit": b })),
            }
            .into());
        }
        // The JIT's is the production outcome; ring records come from the world that could
        // consume them.
        let mut o = b;
        for (mine, theirs) in o.map_changes.iter_mut().zip(a.map_changes) {
            if let (
                MapChange::Ring {
                    records: r @ None, ..
                },
                MapChange::Ring {
                    records: Some(t), ..
                },
            ) = (mine, theirs)
            {
                *r = Some(t);
            }
        }
        runs.push(o);
    }
    report(
        out,
        &Report {
            program: &p.name,
            section: &p.section,
            point,
            phase,
            insns_processed: stats.insns_processed,
            maps: if args.registry {
                jit_world.reg.home().display().to_string()
            } else {
                "scratch".into()
            },
            runs: &runs,
        },
    )
}

/// One run on one engine: a fresh copy of the input ctx, the helpers' world reset.
fn run_once(
    runner: &Runner,
    world: &World,
    template: &CtxBuf,
    env: &env::RunEnv,
    stack: &mut Stack,
) -> anyhow::Result<Outcome> {
    let mut ctx = template.clone();
    stack.0.fill(0);
    env.install();
    let before = world.snapshot()?;
    let r = runner.run(&mut ctx, stack);
    let printk = env::take_printk();
    let map_changes = world.changes(&before)?;
    let ctx_changes = template
        .point()
        .fields()
        .iter()
        .filter_map(|f| {
            let (b, a) = (template.get(&f.name).ok()?, ctx.get(&f.name).ok()?);
            (b != a).then(|| CtxChange {
                field: f.name.clone(),
                before: b,
                after: a,
            })
        })
        .collect();
    let (ret, fault) = match r {
        Ok(v) => (Some(v), None),
        Err(f) => (None, Some(f)),
    };
    Ok(Outcome {
        ret,
        fault,
        result: ctx.result(),
        ctx_changes,
        map_changes,
        printk,
    })
}

struct Report<'a> {
    program: &'a str,
    section: &'a str,
    point: &'static AttachPoint,
    phase: Phase,
    insns_processed: u64,
    maps: String,
    runs: &'a [Outcome],
}

fn value_text(v: &Option<Value>) -> String {
    match v {
        None => "(none)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn report(out: &Output, r: &Report<'_>) -> anyhow::Result<()> {
    if out.json() {
        let runs: Vec<Value> = r
            .runs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut v = json!(o);
                v["run"] = json!(i + 1);
                if r.phase == Phase::Entry {
                    v["verdict"] = json!(o.ret);
                }
                v
            })
            .collect();
        return out.print_json(&json!({
            "program": r.program,
            "section": r.section,
            "attach_point": r.point.name,
            "phase": r.phase.as_str(),
            "insns_processed": r.insns_processed,
            "maps": r.maps,
            "engines": ["interpreter", "jit"],
            "engines_agree": true,
            "runs": runs,
        }));
    }
    println!(
        "{} ({} at {}, {}): verified, {} instructions processed; maps: {}",
        r.program, r.section, r.point.name, r.phase, r.insns_processed, r.maps
    );
    for (i, o) in r.runs.iter().enumerate() {
        let head = match (&o.ret, &o.fault, r.phase) {
            (_, Some(f), _) => format!(
                "fault: {} (counts as verdict 0: the call proceeds unpoliced)",
                f.message
            ),
            (Some(0), _, Phase::Entry) => "verdict 0 (the call proceeds)".into(),
            (Some(v), _, Phase::Entry) => {
                format!("verdict {v} {} (the call is refused with it)", cu_name(*v))
            }
            (Some(v), _, Phase::Exit) => format!(
                "returned {v}, result {} {}",
                o.result,
                cu_name(u64::from(o.result))
            ),
            (None, None, _) => "no result".into(),
        };
        println!("run {}: {head}", i + 1);
        for c in &o.ctx_changes {
            println!("  ctx {}: {} -> {}", c.field, c.before, c.after);
        }
        for c in &o.map_changes {
            match c {
                MapChange::Entry {
                    map,
                    key,
                    before,
                    after,
                } => println!(
                    "  map {map}[{}]: {} -> {}",
                    value_text(&Some(key.clone())),
                    value_text(before),
                    after
                        .as_ref()
                        .map_or_else(|| "(deleted)".into(), |a| value_text(&Some(a.clone())))
                ),
                MapChange::Ring {
                    map,
                    produced_bytes,
                    records,
                } => {
                    println!("  ring {map}: {produced_bytes} bytes produced");
                    for rec in records.iter().flatten() {
                        println!("    {}", value_text(&Some(rec.clone())));
                    }
                }
            }
        }
        for line in &o.printk {
            println!("  bpf_printk: {line}");
        }
    }
    println!(
        "interpreter and JIT agree on {} run{}",
        r.runs.len(),
        if r.runs.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        Outcome {
            ret: Some(0),
            fault: None,
            result: 0,
            ctx_changes: Vec::new(),
            map_changes: vec![MapChange::Ring {
                map: "events".into(),
                produced_bytes: 48,
                records: None,
            }],
            printk: vec!["hello".into()],
        }
    }

    #[test]
    fn every_kind_of_difference_between_the_engines_is_found() {
        let a = outcome();
        assert_eq!(a.difference(&outcome()), None);
        // Ring records are compared only where both sides consumed them.
        let mut b = outcome();
        if let MapChange::Ring { records, .. } = &mut b.map_changes[0] {
            *records = Some(vec![json!("00")]);
        }
        assert_eq!(a.difference(&b), None);
        let mut b = outcome();
        b.ret = Some(2);
        assert!(a.difference(&b).unwrap().starts_with("return 0 vs 2"));
        let mut b = outcome();
        b.ret = None;
        b.fault = Some(Fault {
            kind: "iteration_budget",
            pc: Some(3),
            message: "budget".into(),
        });
        assert!(a.difference(&b).unwrap().contains("fault (budget)"));
        let mut b = outcome();
        b.ctx_changes.push(CtxChange {
            field: "out.free".into(),
            before: 1,
            after: 2,
        });
        assert!(a.difference(&b).unwrap().starts_with("ctx changes"));
        let mut b = outcome();
        if let MapChange::Ring { produced_bytes, .. } = &mut b.map_changes[0] {
            *produced_bytes = 96;
        }
        assert!(a.difference(&b).unwrap().starts_with("map changes"));
        let mut b = outcome();
        b.map_changes.clear();
        assert!(a.difference(&b).unwrap().starts_with("map changes"));
        let mut b = outcome();
        b.printk.clear();
        assert!(a.difference(&b).unwrap().starts_with("bpf_printk"));
    }

    #[test]
    fn faults_of_the_two_engines_compare_by_kind_and_instruction() {
        let i = engines::interp_fault(&gpubpf_runtime::interp::ExecError::IterationBudget {
            pc: 7,
            budget: 8,
        });
        let j = engines::jit_fault(&gpubpf_runtime::jit::ExecError::IterationBudget {
            pc: 7,
            budget: 8,
        });
        assert_eq!(i, j);
        let j = engines::jit_fault(&gpubpf_runtime::jit::ExecError::DeadCode { pc: 7 });
        assert_ne!(i, j);
        let i = engines::interp_fault(&gpubpf_runtime::interp::ExecError::CallDepthExceeded {
            pc: 9,
            max: 8,
        });
        let j = engines::jit_fault(&gpubpf_runtime::jit::ExecError::CallDepthExceeded { pc: 9 });
        assert_ne!(i.message, j.message);
        assert_eq!(
            i, j,
            "same kind at the same instruction, worded differently"
        );
    }
}
