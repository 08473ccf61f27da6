//! Policed calls nested in another policed call's driver call on the same thread: the mock
//! driver runs a `cuLaunchHostFunc` host function at once, inside the call, and the host
//! function allocates. The outer call holds its chain through the thread's cache, the
//! nested ones by references of their own (`crates/shim/src/hot.rs`); both are policed,
//! on every route, and a recording keeps each call's own entry time and refusal.
//!
//! Needs `cc` and clang; prints `skipped: …` without them.

mod common;

use serde_json::Value;

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::shim::{session, Session};

const ROUTES: [&str; 4] = ["link", "dlsym", "proc", "rt"];

const EXPECTED: &str = "hostfn alloc 0 0\nhostfn launch 0 0\nhostfn alloc 1 0\nhostfn launch 1 0\n\
                        hostfn alloc 2 2\nhostfn launch 2 0\n\
                        mock alloc=2 free=2 launch=0 launch_ptsz=0 getinfo=0\n";

#[test]
fn calls_nested_in_a_policed_driver_call_are_policed_on_every_route() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("quota");
    let count =
        common::cli::build_policy(tmp.path(), "tests/shim/count_hostfn.bpf.c").expect("count");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_owned();
    ok(&cli(
        &home,
        &[
            "load",
            &path(&quota),
            "--set",
            "limit_bytes=250",
            "--set",
            "log_denials=0",
        ],
    ));
    ok(&cli(&home, &["load", &path(&count)]));
    for route in ROUTES {
        let out = mock.run_app(&home, route, &["hostfn", "3", "100"]);
        assert_eq!(
            ok(&out),
            EXPECTED,
            "route {route}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every outer call ran its program once.
    let calls = ok_json(&cli(&home, &["-j", "maps", "dump", "hostfn_calls"]));
    assert_eq!(
        calls[0]["formatted"]["value"],
        3 * ROUTES.len() as u64,
        "{calls}"
    );
}

#[test]
fn a_recording_keeps_the_entry_time_and_refusal_of_each_nested_call() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("quota");
    let count =
        common::cli::build_policy(tmp.path(), "tests/shim/count_hostfn.bpf.c").expect("count");
    // `record --set` applies to every `--policy`: the counter (no knobs) is loaded first.
    ok(&cli(&home, &["load", count.to_str().expect("utf-8 path")]));
    let record = tmp.path().join("calls.jsonl");
    let out = mock.record_quota(&home, &record, &quota, 250, &["hostfn", "3", "100"]);
    assert_eq!(ok(&out), EXPECTED);
    let text = std::fs::read_to_string(&record).expect("record written");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let of = |api: &str| -> Vec<&Value> { lines.iter().filter(|l| l["api"] == api).collect() };
    let (outer, allocs) = (of("cuLaunchHostFunc"), of("cuMemAlloc"));
    assert_eq!((outer.len(), allocs.len()), (3, 3), "{text}");
    let t = |v: &Value, f: &str| v[f].as_u64().expect("timestamp");
    for (o, a) in outer.iter().zip(&allocs) {
        // The nested call lies within the outer one, with times and a refusal of its own.
        assert!(t(o, "t_entry") < t(a, "t_entry"), "{o} {a}");
        assert!(t(a, "t_entry") <= t(a, "t_exit"), "{a}");
        assert!(t(a, "t_exit") < t(o, "t_exit"), "{o} {a}");
        assert_eq!(o["refused"], false, "{o}");
    }
    let refused: Vec<bool> = allocs.iter().map(|a| a["refused"] == true).collect();
    assert_eq!(refused, [false, false, true], "{text}");
}
