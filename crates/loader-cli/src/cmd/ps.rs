//! `gpubpf ps [-j] [--stats[=DURATION] [--no-wait]]`: the processes running the shim.
//!
//! Per live process of the registry's process table: pid, user, command, start time and
//! the registry generation it has applied; from its stats file (`registry::procstats`, written
//! by its shim) the calls seen and refused per attach point that has programs, per program
//! its faults and — collected only while asked, like the kernel's `bpf_stats_enabled` — its
//! run count and run time, and the objects it could not run, with the reason. Dead processes
//! are not listed (the table checks the pid and its start time).

use std::time::Duration;

use anyhow::Context as _;
use gpubpf_runtime::attach;
use gpubpf_runtime::registry::procstats::{ProcStats, ProcStatsView};
use gpubpf_runtime::registry::{monotonic_ns, ProcessInfo, Registry};
use serde::Serialize;

use crate::output::{print_line, Output};

/// Arguments of `gpubpf ps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Collect per-program run counts and run time in every process for DURATION (`1s`,
    /// `500ms`, `5m`; default 1s) and show them. Collection reads the clock twice per
    /// program run, so it is off unless asked for; it stops by itself at the deadline.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "1s")]
    pub stats: Option<String>,
    /// With `--stats`: switch collection on for DURATION and show the counts at once
    /// instead of waiting (a later `gpubpf ps` shows what was collected meanwhile).
    #[arg(long, requires = "stats")]
    pub no_wait: bool,
}

/// One process as printed.
#[derive(Debug, Serialize)]
pub(crate) struct Process {
    pub(crate) pid: u32,
    pub(crate) user: String,
    pub(crate) uid: Option<u32>,
    pub(crate) command: String,
    pub(crate) start_time_unix: Option<u64>,
    pub(crate) elapsed_secs: Option<u64>,
    pub(crate) applied_generation: u64,
    pub(crate) up_to_date: bool,
    pub(crate) fail_closed: Option<bool>,
    pub(crate) attach_points: Vec<Point>,
    pub(crate) programs: Vec<Program>,
    pub(crate) failed_objects: Vec<Failed>,
    /// Why there are no counts (no stats file, or one of another process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stats_missing: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) attach_point: String,
    pub(crate) api_id: u32,
    pub(crate) active: bool,
    pub(crate) fail_closed: bool,
    pub(crate) calls: u64,
    pub(crate) denied: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Program {
    pub(crate) object: String,
    pub(crate) name: String,
    pub(crate) attach_point: String,
    pub(crate) phase: &'static str,
    pub(crate) active: bool,
    /// Loaded with `--shadow`: its decisions are counted, not applied.
    pub(crate) shadow: bool,
    /// Decisions it would have made (shadow programs).
    pub(crate) shadow_denied: u64,
    pub(crate) run_cnt: u64,
    pub(crate) run_time_ns: u64,
    pub(crate) faults: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Failed {
    pub(crate) object: String,
    pub(crate) reason: String,
}

fn api_name(id: u32) -> String {
    attach::by_id(id).map_or_else(|| format!("api#{id}"), |p| p.name.to_string())
}

/// The user name of `uid` (its number when it has none).
fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `passwd` is plain data that getpwuid_r fills in; `buf` outlives every use of
    // the strings it points into (copied out below before `buf` is dropped).
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc == 0 && !result.is_null() && !pw.pw_name.is_null() {
            return std::ffi::CStr::from_ptr(pw.pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    uid.to_string()
}

/// Effective uid of `pid` from `/proc/PID/status`.
fn process_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The command line of `pid` (its `comm` when the command line is empty or unreadable).
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.is_empty() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        return format!("[{}]", comm.trim());
    }
    args.join(" ")
}

/// Boot time (Unix seconds) and clock ticks per second, to turn `/proc` start times into
/// wall-clock times.
fn boot_clock() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some((btime, hz as u64))
}

fn describe(
    reg: &Registry,
    info: &ProcessInfo,
    generation: u64,
    clock: Option<(u64, u64)>,
) -> Process {
    let uid = process_uid(info.pid);
    let start_time_unix = clock.map(|(btime, hz)| btime + info.start_time / hz);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut p = Process {
        pid: info.pid,
        user: uid.map_or_else(|| "?".into(), user_name),
        uid,
        command: command_line(info.pid),
        start_time_unix,
        elapsed_secs: start_time_unix.map(|s| now.saturating_sub(s)),
        applied_generation: info.acked_generation,
        up_to_date: info.acked_generation >= generation,
        fail_closed: None,
        attach_points: Vec::new(),
        programs: Vec::new(),
        failed_objects: Vec::new(),
        stats_missing: None,
    };
    let view = match ProcStats::open(&reg.stats_path(info)) {
        Ok(s) => s.read(),
        Err(e) => {
            p.stats_missing = Some(format!("{e:#}"));
            return p;
        }
    };
    if view.pid != info.pid || view.start_time != info.start_time {
        p.stats_missing = Some("the process has not written its stats file yet".into());
        return p;
    }
    fill(&mut p, view);
    p
}

fn fill(p: &mut Process, view: ProcStatsView) {
    p.fail_closed = Some(view.fail_closed);
    p.attach_points = view
        .points
        .into_iter()
        .filter(|pt| pt.active || pt.calls > 0)
        .map(|pt| Point {
            attach_point: api_name(pt.api_id),
            api_id: pt.api_id,
            active: pt.active,
            fail_closed: pt.fail_closed,
            calls: pt.calls,
            denied: pt.denied,
        })
        .collect();
    p.programs = view
        .programs
        .into_iter()
        .map(|q| Program {
            attach_point: api_name(q.api_id),
            object: q.object,
            name: q.name,
            phase: if q.exit { "exit" } else { "entry" },
            active: q.active,
            shadow: q.shadow,
            shadow_denied: q.shadow_denied,
            run_cnt: q.runs,
            run_time_ns: q.run_time_ns,
            faults: q.faults,
        })
        .collect();
    p.failed_objects = view
        .failures
        .into_iter()
        .map(|f| Failed {
            object: f.object,
            reason: f.reason,
        })
        .collect();
    if view.failures_dropped > 0 {
        p.failed_objects.push(Failed {
            object: "…".into(),
            reason: format!("{} more failed objects not recorded", view.failures_dropped),
        });
    }
}

fn elapsed(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h) {
        (0, 0) => format!("{m:02}:{s:02}"),
        (0, _) => format!("{h:02}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

pub(crate) fn duration_text(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns}ns"),
        10_000..=9_999_999 => format!("{:.1}µs", ns as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

fn print_text(procs: &[Process], generation: u64, stats: bool) -> anyhow::Result<()> {
    if procs.is_empty() {
        return print_line("no process is running the shim");
    }
    print_line(&format!(
        "{:<8} {:<10} {:>5} {:>11} COMMAND",
        "PID", "USER", "GEN", "ELAPSED"
    ))?;
    for p in procs {
        let gen = if p.up_to_date {
            p.applied_generation.to_string()
        } else {
            format!("{}<{generation}", p.applied_generation)
        };
        let closed = if p.fail_closed == Some(true) {
            "  [fail closed]"
        } else {
            ""
        };
        print_line(&format!(
            "{:<8} {:<10} {:>5} {:>11} {}{closed}",
            p.pid,
            p.user,
            gen,
            p.elapsed_secs.map_or_else(|| "?".into(), elapsed),
            p.command
        ))?;
        if let Some(why) = &p.stats_missing {
            print_line(&format!("    (no counts: {why})"))?;
        }
        for pt in &p.attach_points {
            let state = match (pt.active, pt.fail_closed) {
                (_, true) => "  refusing every call (failed object, fail closed)",
                (false, _) => "  (no programs now)",
                _ => "",
            };
            print_line(&format!(
                "    {:<28} calls {:<10} denied {}{state}",
                pt.attach_point, pt.calls, pt.denied
            ))?;
            for q in p
                .programs
                .iter()
                .filter(|q| q.attach_point == pt.attach_point && (q.active || q.run_cnt > 0))
            {
                let mut line = format!(
                    "      {:<5} {}/{}{}",
                    q.phase,
                    q.object,
                    q.name,
                    if q.active { "" } else { " (unloaded)" }
                );
                if q.shadow {
                    line.push_str(&format!("  shadow, would deny {}", q.shadow_denied));
                }
                if stats {
                    let avg = q.run_time_ns.checked_div(q.run_cnt).unwrap_or(0);
                    line.push_str(&format!(
                        "  runs {}  time {}  avg {}",
                        q.run_cnt,
                        duration_text(q.run_time_ns),
                        duration_text(avg)
                    ));
                }
                if q.faults > 0 {
                    line.push_str(&format!("  faults {}", q.faults));
                }
                print_line(&line)?;
            }
        }
        for f in &p.failed_objects {
            print_line(&format!("    failed object {}: {}", f.object, f.reason))?;
        }
    }
    Ok(())
}

/// Every live process of the registry's process table (this one excepted), described.
/// Also the data of `gpubpf top` and `gpubpf exporter`.
pub(crate) fn snapshot(reg: &Registry, generation: u64) -> Vec<Process> {
    let clock = boot_clock();
    reg.control()
        .processes()
        .iter()
        .filter(|p| p.pid != std::process::id())
        .map(|p| describe(reg, p, generation, clock))
        .collect()
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let stats_for = args
        .stats
        .as_deref()
        .map(crate::cmd::load::parse_timeout)
        .transpose()?;
    // Reading never creates a registry: without one, nothing runs policies.
    let Some(reg) = super::existing_registry()? else {
        if out.json() {
            return out.print_json(&Vec::<Process>::new());
        }
        return print_line("no process is running the shim (no registry yet)");
    };
    if let Some(d) = stats_for {
        let deadline =
            monotonic_ns().saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        // Asking every process to collect is a change: the owner's, in a system registry.
        reg.check_owner()?;
        reg.control().enable_stats_until(deadline)?;
        if !args.no_wait {
            std::thread::sleep(d.max(Duration::from_millis(1)));
        }
    }
    let generation = reg.generation();
    let procs = snapshot(&reg, generation);
    if out.json() {
        return out.print_json(&procs).context("cannot print");
    }
    print_text(&procs, generation, stats_for.is_some())
}
