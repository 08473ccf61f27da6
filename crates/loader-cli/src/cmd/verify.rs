//! `gpubpf verify OBJ [--prog NAME] [--attach API] [--log]`: verifies the programs of an
//! object without loading them.
//!
//! Exit codes: 0 when every selected program is accepted, [`exit::VERIFIER_REJECTED`] when one
//! is rejected (diagnostic on stderr, or as `{"error": …, "detail": …}` with `--json`),
//! [`exit::BAD_OBJECT`] when the object cannot be read or parsed.

use std::path::PathBuf;

use anyhow::Context as _;
use gpubpf_runtime::attach;
use gpubpf_runtime::program::{attach_phase, line_infos, map_infos};
use gpubpf_verifier::{LogLevel, Verifier, VerifierConfig, VerifyInput};
use serde_json::{json, Value};

use crate::exit::{self, CliError};
use crate::output::Output;

/// Arguments of `gpubpf verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object file (`clang -target bpf` output).
    pub object: PathBuf,
    /// Verify only this program (function name).
    #[arg(long = "prog", value_name = "NAME")]
    pub prog: Option<String>,
    /// Verify as if attached to this API instead of the one in the section name
    /// (`cudaMalloc`, `cuMemAlloc`, …); the phase still comes from the section.
    #[arg(long = "attach", value_name = "API")]
    pub attach: Option<String>,
    /// Print the verifier's per-instruction log to stderr, kernel style: each C line as a
    /// `; source @ file:line` comment above its first instruction (from the object's BTF
    /// line info), then register state and instruction; in JSON, as `log` per program.
    #[arg(long = "log")]
    pub log: bool,
    /// Set a global before verifying, as `gpubpf load` would (`--set limit=8GiB`).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Instruction budget (instructions processed over all paths).
    #[arg(long = "budget", value_name = "N", default_value_t = 1_000_000)]
    pub budget: u64,
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let mut obj = crate::cmd::inspect::load_object(&args.object)?;
    obj.apply_sets(&args.set)
        .with_context(|| format!("`{}`: --set", args.object.display()))?;
    let maps = map_infos(&obj);
    let selected = super::select_programs(
        &obj.programs,
        |p| p.name.as_str(),
        args.prog.as_deref(),
        &args.object.display().to_string(),
    )?;
    let config = VerifierConfig {
        budget: args.budget,
        log_level: if args.log {
            LogLevel::Verbose
        } else {
            LogLevel::Off
        },
        ..VerifierConfig::default()
    };
    let verifier = Verifier::new(&config);
    let mut reports = Vec::new();
    let mut rejected: Vec<String> = Vec::new();
    let mut text = String::new();
    for p in selected {
        // An alias such as `cudaMemcpy` covers several driver functions: verify at each.
        let Some(name) = args
            .attach
            .as_deref()
            .or((!p.attach.is_empty()).then_some(p.attach.as_str()))
        else {
            anyhow::bail!(
                "program `{}`: section `{}` names no API; give one with --attach API",
                p.name,
                p.section
            );
        };
        let points = attach::resolve_alias_targets(name)
            .with_context(|| format!("program `{}`: attach point `{name}`", p.name))?;
        let lines = line_infos(p);
        for point in points {
            let pctx = point.program_context(attach_phase(p.phase));
            let input = VerifyInput {
                insns: &p.insns,
                maps: &maps,
                ctx: &pctx,
                line_info: (!lines.is_empty()).then_some(lines.as_slice()),
            };
            match verifier.verify(&input) {
                Ok(stats) => {
                    if args.log && !out.json() {
                        eprint!("{}", stats.log);
                    }
                    text.push_str(&format!(
                        "{}: accepted ({}; {} insns, {} processed, {} states, {:.3} ms)\n",
                        p.name,
                        pctx.description,
                        p.insns.len(),
                        stats.insns_processed,
                        stats.states_stored,
                        stats.duration.as_secs_f64() * 1e3
                    ));
                    if !stats.unreached.is_empty() {
                        let list: Vec<String> =
                            stats.unreached.iter().map(ToString::to_string).collect();
                        text.push_str(&format!(
                            "  note: instruction(s) {} are never reached (behind a branch the \
                             verifier decided); they are replaced by traps when loaded\n",
                            list.join(", ")
                        ));
                    }
                    let mut r = json!({
                        "name": p.name,
                        "section": p.section,
                        "attach": pctx.description,
                        "accepted": true,
                        "stats": stats_json(&stats),
                    });
                    if args.log {
                        r["log"] = json!(stats.log);
                    }
                    reports.push(r);
                }
                Err(e) => {
                    if args.log && !out.json() {
                        eprint!("{}", e.log);
                    }
                    text.push_str(&format!(
                        "{}: rejected ({})\n{}",
                        p.name,
                        pctx.description,
                        e.render()
                    ));
                    rejected.push(p.name.clone());
                    let mut r = json!({
                        "name": p.name,
                        "section": p.section,
                        "attach": pctx.description,
                        "accepted": false,
                        "error": e.diagnostic(),
                        "stats": stats_json(&e.stats),
                    });
                    if args.log {
                        r["log"] = json!(e.log);
                    }
                    reports.push(r);
                }
            }
        }
    }
    let report = json!({ "object": args.object.display().to_string(), "programs": reports });
    if rejected.is_empty() {
        if out.json() {
            return out.print_json(&report);
        }
        print!("{text}");
        return Ok(());
    }
    if !out.json() {
        eprint!("{text}");
    }
    Err(CliError {
        code: exit::VERIFIER_REJECTED,
        message: format!("verifier rejected {}", rejected.join(", ")),
        json: Some(report),
    }
    .into())
}

fn stats_json(s: &gpubpf_verifier::VerifyStats) -> Value {
    json!({
        "insns_processed": s.insns_processed,
        "states_stored": s.states_stored,
        "peak_states": s.peak_states,
        "states_pruned": s.states_pruned,
        "stack_depth": s.stack_depth,
        "unreached": s.unreached,
        "time_ms": s.duration.as_secs_f64() * 1e3,
    })
}
