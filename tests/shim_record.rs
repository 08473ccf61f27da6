//! `gpubpf record` / `gpubpf replay` (docs/record-replay.md):
//!
//! - a run of the test application on the mock CUDA stack, recorded under `gpubpf record`
//!   with `quota.o` at a limit, replays through `quota.o` at the same limit with the verdicts
//!   the live run gave (same denied calls, same `proc_usage`), and at a higher limit with no
//!   denial;
//! - the shipped trace `tests/data/record/quota_mock.jsonl` (recorded that way, without a
//!   policy) replays through quota at a limit with the denials at the crossing allocations;
//! - bad input fails with a message.
//!
//! Needs `cc` and clang; prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::cli::{gpubpf, ok, ok_json};
use common::shim::{session, shim_library, Session};

const TRACE: &str = "tests/data/record/quota_mock.jsonl";

fn replay(home: &Path, calls: &Path, quota: &Path, limit: u64) -> Value {
    let out = std::process::Command::new(gpubpf())
        .args(["-j", "replay"])
        .arg(calls)
        .arg("--policy")
        .arg(quota)
        .args([
            "--set",
            &format!("limit_bytes={limit}"),
            "--set",
            "log_denials=0",
        ])
        .env("GPUBPF_HOME", home)
        .output()
        .expect("run gpubpf replay");
    ok_json(&out)
}

/// `proc_usage` of a replay's map dump, as (key, value) pairs.
fn replayed_map(v: &Value, name: &str) -> Vec<(Value, Value)> {
    let m = v["maps"]
        .as_array()
        .expect("maps")
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no map {name} in {v}"));
    formatted(&m["entries"])
}

fn formatted(entries: &Value) -> Vec<(Value, Value)> {
    entries
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["formatted"]["key"].clone(),
                e["formatted"]["value"].clone(),
            )
        })
        .collect()
}

/// Indexes of the denied calls.
fn denied(v: &Value) -> Vec<u64> {
    v["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter(|c| c["verdict"] != 0)
        .map(|c| c["index"].as_u64().expect("index"))
        .collect()
}

#[test]
fn a_recorded_quota_run_replays_with_the_live_verdicts_and_maps() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("quota");
    shim_library(); // built beside the gpubpf binary
    let calls = tmp.path().join("calls.jsonl");
    let out = mock.record_quota(&home, &calls, &quota, 250, &["quota", "5", "100"]);
    assert_eq!(
        ok(&out),
        "alloc 0 0\nalloc 1 0\nalloc 2 2\nalloc 3 2\nalloc 4 2\nfree 0\nretry 0\n\
         mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0\n"
    );
    // The record: every hooked call, the three denials among them.
    let text = std::fs::read_to_string(&calls).expect("record written");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let allocs: Vec<&Value> = lines.iter().filter(|l| l["api"] == "cuMemAlloc").collect();
    assert_eq!(allocs.len(), 6, "{text}");
    assert!(allocs.iter().all(|l| l["symbol"] == "cuMemAlloc_v2"));
    let refused: Vec<bool> = allocs.iter().map(|l| l["refused"] == true).collect();
    assert_eq!(refused, [false, false, true, true, true, false]);
    assert!(allocs
        .iter()
        .all(|l| l["t_exit"].as_u64() >= l["t_entry"].as_u64()));
    assert!(lines.iter().any(|l| l["api"] == "cuMemFree"), "{text}");
    assert!(
        lines.iter().any(|l| l["api"] == "cuInit"),
        "unpoliced calls too: {text}"
    );
    let live_denied: Vec<u64> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l["refused"] == true)
        .map(|(i, _)| i as u64)
        .collect();
    // Replay at the same limit: the same denials, the same proc_usage.
    let scratch = tmp.path().join("unused-home");
    let same = replay(&scratch, &calls, &quota, 250);
    assert_eq!(same["summary"]["differ_from_live"], 0, "{same}");
    assert_eq!(same["summary"]["denied"], 3, "{same}");
    assert_eq!(denied(&same), live_denied);
    let live_usage = formatted(&ok_json(&common::cli::run_with_registry(
        &home,
        &["-j", "maps", "dump", "proc_usage"],
    )));
    assert_eq!(replayed_map(&same, "proc_usage"), live_usage);
    assert!(!scratch.exists(), "replay never touches $GPUBPF_HOME");
    // At a higher limit nothing is denied, and the replay says it differs from the live run.
    let loose = replay(&scratch, &calls, &quota, 1000);
    assert_eq!(loose["summary"]["denied"], 0, "{loose}");
    assert_eq!(loose["summary"]["differ_from_live"], 3, "{loose}");
    let usage = replayed_map(&loose, "proc_usage");
    assert_eq!(usage.len(), 1, "{usage:?}");
    // The calls refused live never reached the driver: their recorded result (2) is what the
    // exit programs see, so quota does not count them as allocations.
    assert_eq!(usage[0].1["allocs"], 3, "{usage:?}");
    assert_eq!(usage[0].1["denied"], 0, "{usage:?}");
}

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(TRACE)
}

#[test]
fn the_shipped_trace_replays_through_quota() {
    let Some((dir, home, [quota])) = common::cli::with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let _ = dir;
    // The trace: `app link quota 4 1000` recorded without a policy (nothing refused live).
    let at_limit = replay(&home, &trace(), &quota, 2500);
    let allocs: Vec<&Value> = at_limit["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter(|c| c["api"] == "cuMemAlloc")
        .collect();
    // The third and fourth allocations cross 2500 bytes; after the free, the retry fits.
    let verdicts: Vec<u64> = allocs
        .iter()
        .map(|c| c["verdict"].as_u64().unwrap())
        .collect();
    assert_eq!(verdicts, [2, 2], "{at_limit}");
    assert_eq!(at_limit["summary"]["live_denied"], 0);
    assert_eq!(at_limit["summary"]["differ_from_live"], 2);
    let usage = replayed_map(&at_limit, "proc_usage");
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].1["denied"], 2, "{usage:?}");
    assert_eq!(usage[0].1["allocs"], 3, "{usage:?}");
    assert_eq!(usage[0].1["bytes"], 0, "everything freed: {usage:?}");
    // One byte under the first crossing: the second allocation is refused too (off by one).
    let tight = replay(&home, &trace(), &quota, 1999);
    assert_eq!(tight["summary"]["denied"], 3, "{tight}");
    let loose = replay(&home, &trace(), &quota, 4000);
    assert_eq!(loose["summary"]["denied"], 0, "{loose}");
    assert_eq!(loose["summary"]["differ_from_live"], 0, "{loose}");
    // Text output: a line per decision, a summary and the maps.
    let out = std::process::Command::new(gpubpf())
        .arg("replay")
        .arg(trace())
        .arg("--policy")
        .arg(&quota)
        .args(["--set", "limit_bytes=2500"])
        .output()
        .expect("run gpubpf replay");
    let text = ok(&out);
    assert!(text.contains("cuMemAlloc_v2"), "{text}");
    assert!(text.contains("denied 2 by quota/"), "{text}");
    assert!(
        text.contains("map quota.proc_usage") || text.contains("map proc_usage"),
        "{text}"
    );
}

#[test]
fn bad_record_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"api\": 1}\n").expect("write");
    for (file, needle) in [
        (dir.path().join("missing.jsonl"), "cannot open"),
        (bad, "not a recorded call"),
    ] {
        let out = std::process::Command::new(gpubpf())
            .arg("replay")
            .arg(&file)
            .args(["--policy", "x.o"])
            .output()
            .expect("run gpubpf replay");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
    }
}

/// A forked child records into `FILE.PID`, each call written at once (it leaves by
/// `_exit`); the parent's file has only the parent's calls.
#[test]
fn a_forked_child_records_into_its_own_file() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let calls = tmp.path().join("fork.jsonl");
    let out = mock
        .command(&mock.app_link, &home)
        .env("GPUBPF_RECORD", &calls)
        .args(["link", "fork", "2", "100"])
        .output()
        .expect("run the test application");
    let text = ok(&out);
    let child: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("child pid "))
        .and_then(|p| p.parse().ok())
        .expect("child pid line");
    let read = |p: &Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    };
    let parent = read(&calls);
    let child_file = PathBuf::from(format!("{}.{child}", calls.display()));
    let kid = read(&child_file);
    let allocs = |v: &[Value]| v.iter().filter(|l| l["api"] == "cuMemAlloc").count();
    assert_eq!(allocs(&parent), 1, "{parent:?}");
    assert_eq!(allocs(&kid), 2, "{kid:?}");
    assert!(kid.iter().all(|l| l["pid"] == child), "{kid:?}");
    assert!(parent.iter().all(|l| l["pid"] != child), "{parent:?}");
}

/// The record of a real run on the H200 (`tests/gpu/record/run.sh`: tests/gpu/shim/app.cu,
/// static cudart, allocating 64 MiB at a time under quota at 256 MiB; the fifth allocation
/// was refused live) replays with the live verdict at 256 MiB, refuses earlier at a lower
/// limit and nothing at 1 GiB.
#[test]
fn the_record_of_a_real_h200_run_replays_with_its_live_verdicts() {
    let Some((_dir, home, [quota])) = common::cli::with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let calls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/record/quota_h200.jsonl");
    let text = std::fs::read_to_string(&calls).expect("shipped record");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    // What the real run did: the driver's own start-up lookups, then the allocations.
    assert!(lines.iter().any(|l| l["api"] == "cuGetProcAddress"));
    let live_refused: Vec<u64> = (0u64..)
        .zip(&lines)
        .filter(|(_, l)| l["refused"] == true)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(live_refused.len(), 1);
    let mib = 1u64 << 20;
    let same = replay(&home, &calls, &quota, 256 * mib);
    assert_eq!(denied(&same), live_refused, "{same}");
    assert_eq!(same["summary"]["differ_from_live"], 0, "{same}");
    let high = replay(&home, &calls, &quota, 1024 * mib);
    assert_eq!(denied(&high), Vec::<u64>::new());
    // At 128 MiB the third 64 MiB allocation is the first refused.
    let low = replay(&home, &calls, &quota, 128 * mib);
    let allocs: Vec<u64> = (0u64..)
        .zip(&lines)
        .filter(|(_, l)| l["api"] == "cuMemAlloc")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(denied(&low).first(), allocs.get(2), "{low}");
}
