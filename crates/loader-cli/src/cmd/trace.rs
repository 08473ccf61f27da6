//! `gpubpf trace [-f]`: the `bpf_printk` lines of every policed process, read from the
//! registry's trace ring as `bpftool prog tracelog` reads the kernel's `trace_pipe`.
//!
//! Each line reads `comm-tid [pid] seconds: message` (seconds of `CLOCK_MONOTONIC`, as
//! `bpf_ktime_get_ns`). Reading consumes: a line is printed once, by whichever reader takes
//! it. Without `-f` the command prints what the ring holds and exits; with `-f` it keeps
//! printing new lines until interrupted. With `-j`: one JSON array without `-f`, one JSON
//! object per line with `-f` (`comm`, `tid`, `pid`, `seconds`, `message`, and `line`, the
//! text as written).
//!
//! The ring (map `trace`, `registry::TRACE_RING`) is created by the first policed process;
//! until then there is nothing to print. When it is full, new lines are dropped (its
//! `dropped` counter, `gpubpf maps show trace`); `-f` says so on stderr when it happens.

use gpubpf_runtime::registry::{Registry, TRACE_RING};
use serde_json::{json, Value};

use super::ring_reader::Ring;
use crate::output::Output;

/// Arguments of `gpubpf trace`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep printing new lines until interrupted (Ctrl-C).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
}

/// One trace line taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceLine {
    pub comm: String,
    pub tid: u32,
    pub pid: u32,
    /// `seconds.micros` as written.
    pub time: String,
    pub message: String,
}

impl TraceLine {
    /// Parses `comm-tid [pid] seconds: message` (the comm may itself hold `-`, spaces or
    /// brackets: the first place where the rest fits wins).
    pub fn parse(line: &str) -> Option<TraceLine> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        for (i, _) in line.match_indices(" [") {
            let (head, rest) = (&line[..i], &line[i + 2..]);
            let Some((comm, tid)) = head.rsplit_once('-') else {
                continue;
            };
            let Some((pid, rest)) = rest.split_once("] ") else {
                continue;
            };
            let Some((time, message)) = rest.split_once(": ") else {
                continue;
            };
            let (Ok(tid), Ok(pid)) = (tid.parse(), pid.parse()) else {
                continue;
            };
            let valid_time = time
                .split_once('.')
                .is_some_and(|(s, us)| is_digits(s) && is_digits(us));
            if !valid_time {
                continue;
            }
            return Some(TraceLine {
                comm: comm.to_string(),
                tid,
                pid,
                time: time.to_string(),
                message: message.to_string(),
            });
        }
        None
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The JSON form of a record: its parts when it is a trace line, else only `line`.
fn line_json(text: &str) -> Value {
    let line = text.strip_suffix('\n').unwrap_or(text);
    match TraceLine::parse(line) {
        Some(t) => json!({
            "comm": t.comm,
            "tid": t.tid,
            "pid": t.pid,
            "seconds": t.time.parse::<f64>().unwrap_or(0.0),
            "message": t.message,
            "line": line,
        }),
        None => json!({ "line": line }),
    }
}

/// A record as text (lossy for bytes that are not UTF-8), without its newline.
fn record_text(r: &[u8]) -> String {
    let s = String::from_utf8_lossy(r);
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

/// The trace ring as `gpubpf trace` reads it.
const TRACE: Ring<'static, String> = Ring {
    name: TRACE_RING,
    record: "trace line",
    text: String::clone,
    json: line_json_of,
};

// `Ring<String>` hands its printers a `&String`.
#[allow(clippy::ptr_arg)]
fn line_json_of(line: &String) -> Value {
    line_json(line)
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    TRACE.run(Registry::trace_ring, record_text, args.follow, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lines_come_apart_even_with_odd_comms() {
        let t = TraceLine::parse("app_link-12 [10] 345.000678: quota: pid 10 denied\n").unwrap();
        assert_eq!(
            t,
            TraceLine {
                comm: "app_link".into(),
                tid: 12,
                pid: 10,
                time: "345.000678".into(),
                message: "quota: pid 10 denied".into(),
            }
        );
        // A comm with a dash, a space and brackets; a message with `: ` and ` [`.
        let t = TraceLine::parse("py-x [w]-7 [7] 1.000001: a [1] 2.0: b").unwrap();
        assert_eq!((t.comm.as_str(), t.tid, t.pid), ("py-x [w]", 7, 7));
        assert_eq!(t.message, "a [1] 2.0: b");
        for bad in [
            "",
            "hello",
            "a-1 [x] 1.0: m",
            "a-1 [1] 1: m",
            "a [1] 1.0: m",
        ] {
            assert_eq!(TraceLine::parse(bad), None, "{bad}");
        }
        assert_eq!(line_json("raw record"), json!({ "line": "raw record" }));
        assert_eq!(line_json("a-1 [2] 3.000004: m")["seconds"], 3.000004);
    }
}
