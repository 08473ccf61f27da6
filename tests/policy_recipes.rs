//! The seeds' recipes as policies (docs/policies.md, "Recipes"): `alloc_round.bpf.c` (size
//! rounding by argument rewrite), `alloc_log.bpf.c` (a line per allocation and free) and
//! `error_report.bpf.c` (failed calls counted by API and result). Unit tests with
//! `gpubpf test-run`, end to end on the mock CUDA stack.
//!
//! Needs clang (and `cc` for the mock stack); prints `skipped: …` without them.

mod common;

use std::path::Path;

use serde_json::{json, Value};

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::shim::{session, Session};

fn policy(dir: &Path, name: &str) -> String {
    common::cli::build_policy(dir, &format!("policies/{name}.bpf.c"))
        .expect("clang present: policy built")
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

/// The size `alloc_round` hands on for `size` at `granularity`, by `gpubpf test-run`.
fn rounded(home: &Path, obj: &str, granularity: &str, size: u64) -> u64 {
    let v = ok_json(&cli(
        home,
        &[
            "-j",
            "test-run",
            obj,
            "--prog",
            "round_alloc",
            "--set",
            &format!("granularity={granularity}"),
            "--ctx",
            &format!("args.bytesize={size}"),
        ],
    ));
    let run = &v["runs"][0];
    assert_eq!(run["verdict"], 0, "{v}");
    run["ctx_changes"]
        .as_array()
        .expect("ctx_changes")
        .iter()
        .find(|c| c["field"] == "args.bytesize")
        .map_or(size, |c| c["after"].as_u64().expect("after"))
}

#[test]
fn sizes_round_up_to_the_granularity_exactly() {
    let Some(Session { tmp, home, .. }) = session() else {
        return;
    };
    let obj = policy(tmp.path(), "alloc_round");
    assert_eq!(rounded(&home, &obj, "4096", 1), 4096);
    assert_eq!(rounded(&home, &obj, "4096", 4095), 4096);
    assert_eq!(rounded(&home, &obj, "4096", 4096), 4096, "a multiple stays");
    assert_eq!(rounded(&home, &obj, "4096", 4097), 8192);
    assert_eq!(rounded(&home, &obj, "2MiB", 3 << 20), 4 << 20);
    assert_eq!(rounded(&home, &obj, "0", 1000), 1000, "0: no rounding");
    assert_eq!(rounded(&home, &obj, "3000", 3001), 6000, "any granularity");
    // Rounding that would overflow leaves the size alone.
    assert_eq!(rounded(&home, &obj, "4096", u64::MAX - 10), u64::MAX - 10);
}

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn rounded_sizes_reach_quota_and_the_driver() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let (round, quota) = (
        policy(tmp.path(), "alloc_round"),
        policy(tmp.path(), "quota"),
    );
    // 3 x 3000 bytes fit 10 000; rounded to 4096 the third crosses it.
    ok(&cli(
        &home,
        &[
            "load",
            &quota,
            "--set",
            "limit_bytes=10000",
            "--set",
            "log_denials=0",
        ],
    ));
    ok(&cli(
        &home,
        &[
            "load",
            &round,
            "--set",
            "granularity=4096",
            "--priority",
            "-10",
        ],
    ));
    let out = mock.run_app(&home, "link", &["quota", "3", "3000"]);
    assert_eq!(
        lines(&out),
        [
            "alloc 0 0",
            "alloc 1 0",
            "alloc 2 2",
            "free 0",
            "retry 0",
            "mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0",
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = ok_json(&cli(&home, &["-j", "maps", "dump", "proc_usage"]));
    assert_eq!(
        usage[0]["formatted"]["value"],
        json!({"bytes": 0, "allocs": 3, "frees": 3, "denied": 1})
    );
    let bss = ok_json(&cli(&home, &["-j", "maps", "dump", "alloc_round.bss"]));
    assert_eq!(bss[0]["formatted"]["value"]["rounded"], 4, "{bss}");
}

#[test]
fn allocations_and_frees_are_logged_and_failures_counted() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let (log, errors, quota) = (
        policy(tmp.path(), "alloc_log"),
        policy(tmp.path(), "error_report"),
        policy(tmp.path(), "quota"),
    );
    ok(&cli(&home, &["load", &log]));
    ok(&cli(
        &home,
        &["load", &errors, "--attach", "cuMemAlloc,cuMemFree"],
    ));
    ok(&cli(
        &home,
        &[
            "load",
            &quota,
            "--set",
            "limit_bytes=250",
            "--set",
            "log_denials=0",
        ],
    ));
    let out = mock.run_app(&home, "link", &["quota", "4", "100"]);
    assert_eq!(
        lines(&out)[..4],
        ["alloc 0 0", "alloc 1 0", "alloc 2 2", "alloc 3 2"]
    );
    let trace = ok_json(&cli(&home, &["-j", "trace"]));
    let messages: Vec<String> = trace
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| l["message"].as_str().expect("message").to_owned())
        .collect();
    let allocs: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with("alloc: cuMemAlloc "))
        .collect();
    // Two allocations, two refusals (address 0, result 2), the retry.
    assert_eq!(allocs.len(), 5, "{messages:?}");
    assert!(
        allocs[0].starts_with("alloc: cuMemAlloc 100 bytes -> 0x") && allocs[0].ends_with("(0)")
    );
    assert_eq!(allocs[2], "alloc: cuMemAlloc 100 bytes -> 0x0 (2)");
    let frees = messages
        .iter()
        .filter(|m| m.starts_with("alloc: cuMemFree 0x") && m.ends_with("(0)"))
        .count();
    assert_eq!(frees, 3, "{messages:?}");
    let reported: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with("error: "))
        .collect();
    assert_eq!(reported.len(), 2, "{messages:?}");
    assert!(reported.iter().all(|m| m.ends_with("api 303 returned 2")));
    let counts = ok_json(&cli(&home, &["-j", "maps", "dump", "error_counts"]));
    let entries: Vec<(Value, Value)> = counts
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["formatted"]["key"].clone(),
                e["formatted"]["value"].clone(),
            )
        })
        .collect();
    assert_eq!(entries, [(json!({"api_id": 303, "result": 2}), json!(2))]);
}
