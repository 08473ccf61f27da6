//! `gpubpf replay CALLS.jsonl --policy OBJ[:API,…]… [--set VAR=VALUE]… [--all] [-j]`:
//! runs policies offline (no CUDA, no shim) over the calls `gpubpf record` wrote and
//! reports what they would have decided, and the maps they left.
//!
//! 1. The policies are loaded as `gpubpf load` loads them, into a scratch registry (removed
//!    at the end), and built into chains as a process builds them, with the deterministic
//!    helpers of `test-run` (`test_run::env`): `bpf_get_current_pid_tgid` is the recorded
//!    call's pid and tid, `bpf_ktime_get_ns` the recorded entry (entry programs) or exit
//!    (exit programs) timestamp, `bpf_get_prandom_u32` a stream per call from `--seed`.
//! 2. Per recorded call, in file order: the ctx of its attach point is built from the
//!    recorded words, with the out-values and `hdr.result` cleared, and the entry programs
//!    run. A refusal (verdict ≠ 0) is the result the exit programs see, as live; otherwise
//!    the recorded result is, with the recorded out-values (valid when the live call
//!    succeeded). The exit programs may override it.
//! 3. Reported per call: the live outcome (refused, result, returned) beside the replayed
//!    one, and whether they agree; then a summary and every map of the scratch registry,
//!    typed like `gpubpf maps dump`.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::PathBuf;

use anyhow::Context as _;
use gpubpf_runtime::attach::abi::{Section, FLAG_OUT_VALID};
use gpubpf_runtime::attach::{self, AttachPoint};
use gpubpf_runtime::dispatch::{AttachedProgram, Chain, PolicySet, RunRecorder, Stack};
use gpubpf_runtime::helper_table::STACK_SIZE;
use gpubpf_runtime::registry::{self, Registry};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::cmd::test_run::env::{self, RunEnv};
use crate::cmd::{load, maps};
use crate::output::Output;

/// Arguments of `gpubpf replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The calls, as `gpubpf record` wrote them (JSON lines).
    pub calls: PathBuf,
    /// A policy object, optionally with the APIs to attach it to; repeatable.
    #[arg(long = "policy", value_name = "OBJ[:API,…]", required = true)]
    pub policy: Vec<String>,
    /// Set a global of every policy before loading; repeatable.
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// List every call (default: only the calls where a policy decided something or the
    /// outcome differs from the live one).
    #[arg(long)]
    pub all: bool,
    /// Seed of `bpf_get_prandom_u32`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One line of a record file (`crates/shim/src/record.rs`).
#[derive(Debug, Clone, Deserialize)]
pub struct Recorded {
    pub api: String,
    pub api_id: u32,
    pub symbol: String,
    pub pid: u32,
    pub tid: u32,
    pub t_entry: u64,
    pub t_exit: u64,
    pub result: u32,
    pub returned: u32,
    pub refused: bool,
    pub out_valid: bool,
    pub ctx: Vec<u64>,
}

/// What the policies decided for one call in replay.
#[derive(Debug, Clone, Serialize)]
struct Replayed {
    index: usize,
    api: String,
    symbol: String,
    pid: u32,
    tid: u32,
    policed: bool,
    live: Value,
    verdict: u32,
    denied_by: Option<String>,
    /// The result the exit programs were given.
    result: u32,
    returned: u32,
    overridden_by: Vec<String>,
    faults: u32,
    same_as_live: bool,
    printk: Vec<String>,
}

/// Collects exit overrides (non-shadow decisions with a previous result).
#[derive(Default)]
struct Decisions(Vec<String>);

impl RunRecorder for Decisions {
    fn start(&mut self) -> Option<u64> {
        None
    }
    fn finish(&mut self, _: Option<u32>, _: Option<u64>, _: bool) {}
    fn decision(
        &mut self,
        _: &[u64],
        prog: &AttachedProgram,
        d: gpubpf_runtime::dispatch::Decision,
    ) {
        if d.previous.is_some() {
            let shadow = if d.shadow { " (shadow)" } else { "" };
            self.0
                .push(format!("{}/{}{shadow}", prog.object, prog.name));
        }
    }
}

/// Reads a record file: its calls and how many lines said calls were dropped.
pub fn read_calls(path: &std::path::Path) -> anyhow::Result<(Vec<Recorded>, u64)> {
    let f =
        std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    let mut calls = Vec::new();
    let mut dropped = 0u64;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        if let Some(n) = v.get("dropped").and_then(Value::as_u64) {
            dropped += n;
            continue;
        }
        let c: Recorded = serde_json::from_value(v)
            .with_context(|| format!("{}:{}: not a recorded call", path.display(), i + 1))?;
        calls.push(c);
    }
    Ok((calls, dropped))
}

fn field_words(point: &AttachPoint, section: Section) -> Vec<usize> {
    point
        .fields()
        .iter()
        .filter(|f| f.section == section)
        .map(|f| (f.offset / 8) as usize)
        .collect()
}

/// Replays `c` through `chain`.
fn replay_call(
    index: usize,
    c: &Recorded,
    point: &AttachPoint,
    chain: Option<&Chain>,
    stack: &mut Stack,
    seed: u64,
) -> Replayed {
    let live = json!({ "refused": c.refused, "result": c.result, "returned": c.returned });
    let mut r = Replayed {
        index,
        api: c.api.clone(),
        symbol: c.symbol.clone(),
        pid: c.pid,
        tid: c.tid,
        policed: chain.is_some(),
        live,
        verdict: 0,
        denied_by: None,
        result: c.result,
        returned: c.result,
        overridden_by: Vec::new(),
        faults: 0,
        same_as_live: true,
        printk: Vec::new(),
    };
    let Some(chain) = chain else {
        r.same_as_live = !c.refused && c.result == c.returned;
        return r;
    };
    let words = (point.ctx_size as usize).div_ceil(8).max(4);
    let mut ctx = c.ctx.clone();
    ctx.resize(words, 0);
    let outs = field_words(point, Section::Out);
    for &w in &outs {
        if let Some(x) = ctx.get_mut(w) {
            *x = 0;
        }
    }
    // hdr.result cleared; hdr.flags without out-valid (as at a live entry).
    ctx[3] &= !0xffff_ffff;
    ctx[1] &= !(u64::from(FLAG_OUT_VALID) << 32);
    RunEnv {
        pid: c.pid,
        tid: c.tid,
        // SAFETY: getuid/getgid have no preconditions and cannot fail.
        uid: unsafe { libc::getuid() },
        // SAFETY: as above.
        gid: unsafe { libc::getgid() },
        run: index as u64 + 1,
        seed,
    }
    .install();
    env::set_clock(c.t_entry);
    let mut rec = Decisions::default();
    let v = chain.entry_words(&mut ctx, stack, &mut rec);
    r.verdict = v.verdict;
    r.faults = v.faults;
    r.denied_by = v
        .denied_by
        .and_then(|i| chain.entry.get(i))
        .map(|p| format!("{}/{}", p.object, p.name));
    let (result, out_valid) = if v.verdict != 0 {
        (v.verdict, false)
    } else {
        for &w in &outs {
            if let (Some(x), Some(rw)) = (ctx.get_mut(w), c.ctx.get(w)) {
                *x = *rw;
            }
        }
        (c.result, c.out_valid)
    };
    env::set_clock(c.t_exit);
    let mut rec = Decisions::default();
    let (returned, faults) = chain.exit_words(&mut ctx, stack, result, out_valid, &mut rec);
    r.result = result;
    r.returned = returned;
    r.faults += faults;
    r.overridden_by = rec.0;
    r.printk = env::take_printk();
    r.same_as_live = (v.verdict != 0) == c.refused && returned == c.returned;
    r
}

fn describe(r: &Replayed) -> String {
    let mut s = format!("#{} {} pid {} tid {}: ", r.index, r.symbol, r.pid, r.tid);
    if !r.policed {
        s.push_str("no policy");
    } else if r.verdict != 0 {
        s.push_str(&format!(
            "denied {} by {}",
            r.verdict,
            r.denied_by.as_deref().unwrap_or("?")
        ));
    } else {
        s.push_str("allowed");
    }
    if r.returned != r.result {
        s.push_str(&format!(
            ", result {} -> {} by {}",
            r.result,
            r.returned,
            r.overridden_by.join(", ")
        ));
    } else {
        s.push_str(&format!(", returns {}", r.returned));
    }
    let live = &r.live;
    s.push_str(&format!(
        "  (live: {}returned {}){}",
        if live["refused"] == true {
            "denied, "
        } else {
            ""
        },
        live["returned"],
        if r.same_as_live { "" } else { "  DIFFERS" }
    ));
    if r.faults > 0 {
        s.push_str(&format!("  [{} program fault(s)]", r.faults));
    }
    s
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let (calls, dropped) = read_calls(&args.calls)?;
    let dir = tempfile::Builder::new()
        .prefix("gpubpf-replay-")
        .tempdir()
        .context("cannot create a scratch registry")?;
    let home = dir.path().join("reg");
    // `gpubpf load` loads into $GPUBPF_HOME: point it at the scratch registry.
    std::env::set_var(registry::HOME_ENV, &home);
    for spec in &args.policy {
        let (object, attach) = crate::cmd::run::parse_policy(spec);
        load::load(&load::Args::policy(object, attach, args.set.clone()))
            .with_context(|| format!("--policy `{spec}`"))?;
    }
    let reg = Registry::open(&home).context("cannot open the scratch registry")?;
    let (set, failed) =
        PolicySet::load_each(&reg, &env::helpers()).context("cannot build the policies")?;
    if let Some(f) = failed.into_iter().next() {
        let name = f.name;
        return Err(anyhow::Error::from(f.error).context(format!("policy `{name}` cannot run")));
    }
    let chains: BTreeMap<u32, Chain> = set.into_chains();
    let mut stack = Box::new(Stack([0; STACK_SIZE]));
    let mut rows = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let point = attach::by_id(c.api_id)
            .with_context(|| format!("call #{i}: unknown api id {} ({})", c.api_id, c.api))?;
        rows.push(replay_call(
            i,
            c,
            point,
            chains.get(&c.api_id),
            &mut stack,
            args.seed,
        ));
    }
    let policed = rows.iter().filter(|r| r.policed).count();
    let denied = rows.iter().filter(|r| r.verdict != 0).count();
    let overridden = rows.iter().filter(|r| r.returned != r.result).count();
    let differ = rows.iter().filter(|r| !r.same_as_live).count();
    let live_denied = calls.iter().filter(|c| c.refused).count();
    let summary = json!({
        "calls": rows.len(), "policed": policed, "denied": denied, "overridden": overridden,
        "live_denied": live_denied, "differ_from_live": differ, "dropped_in_record": dropped,
    });
    let mut map_dumps = Vec::new();
    let names = reg.map_names().context("cannot list the scratch maps")?;
    if out.json() {
        for name in &names {
            let map = reg
                .open_map(name)
                .with_context(|| format!("map `{name}`"))?;
            if map.ringbuf_stats().is_some() {
                continue;
            }
            let entries = map.entries().with_context(|| format!("dump of `{name}`"))?;
            let rows: Vec<Value> = entries
                .iter()
                .map(|e| maps::entry_json(&map, &e.key, &e.value))
                .collect();
            map_dumps.push(json!({ "name": name, "entries": rows }));
        }
        let calls: Vec<&Replayed> = rows
            .iter()
            .filter(|r| args.all || r.verdict != 0 || r.returned != r.result || !r.same_as_live)
            .collect();
        return out.print_json(&json!({ "calls": calls, "summary": summary, "maps": map_dumps }));
    }
    for r in &rows {
        if args.all || r.verdict != 0 || r.returned != r.result || !r.same_as_live {
            println!("{}", describe(r));
            for p in &r.printk {
                println!("    printk: {p}");
            }
        }
    }
    println!(
        "{} calls, {policed} policed: {denied} denied, {overridden} result(s) overridden; live: \
         {live_denied} denied; {differ} differ from the live run",
        rows.len()
    );
    if dropped > 0 {
        println!("warning: the record dropped {dropped} call(s)");
    }
    for name in &names {
        println!("\nmap {name}:");
        maps::dump(&reg, name, out)?;
    }
    Ok(())
}
