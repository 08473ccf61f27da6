//! `policies/priority.bpf.c` on the mock CUDA stack: a process of the high-priority class
//! (here by command name) gets its streams at the device's greatest priority, other
//! processes keep theirs; while a high-priority process is launching, the others' launches
//! are delayed (counted in `prio_state`), before it and after the window they are not.
//!
//! Needs clang and `cc`; prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::shim::{session, MockStack, Session};

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn state(home: &Path) -> Value {
    ok_json(&cli(home, &["-j", "maps", "dump", "prio_state"]))[0]["formatted"]["value"].clone()
}

/// Runs `program` (a copy of the linked test application under another name) with `args`.
fn run(mock: &MockStack, home: &Path, program: &Path, args: &[&str]) -> Vec<String> {
    let out = mock
        .command(program, home)
        .arg("link")
        .args(args)
        .output()
        .expect("run the application");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out)
}

/// Loads priority.o with `sets`, lists the command name `app_high` and returns a copy of
/// the linked application under that name: the command names tell the classes apart.
fn setup(mock: &MockStack, tmp: &Path, home: &Path, sets: &[&str]) -> PathBuf {
    let obj = common::cli::build_policy(tmp, "policies/priority.bpf.c").expect("priority");
    let high = tmp.join("app_high");
    std::fs::copy(&mock.app_link, &high).expect("copy the application");
    let mut args = vec!["load", obj.to_str().expect("utf-8 path")];
    for s in sets {
        args.extend(["--set", s]);
    }
    ok(&cli(home, &args));
    let listed = [
        "maps",
        "update",
        "prio_comms",
        "--key",
        "app_high",
        "--value",
        "1",
    ];
    ok(&cli(home, &listed));
    high
}

#[test]
fn the_high_class_gets_top_priority_streams_and_throttles_the_others() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let sets = ["throttle_ns=20000000", "active_window_ns=3000000000"];
    let high = setup(mock, tmp.path(), &home, &sets);
    let low = mock.app_link.clone();

    // Streams: the listed process's request is raised (the driver clamps -1000 to -5).
    assert_eq!(
        run(mock, &home, &high, &["stream", "0"])[0],
        "stream 0 priority=-5"
    );
    assert_eq!(
        run(mock, &home, &low, &["stream", "-2"])[0],
        "stream 0 priority=-2"
    );
    assert_eq!(
        run(mock, &home, &low, &["stream", "0"])[0],
        "stream 0 priority=0"
    );
    assert_eq!(state(&home)["raised_streams"], 1);

    // No high-priority launch yet: nothing is throttled.
    run(mock, &home, &low, &["launch", "2"]);
    assert_eq!(state(&home)["throttled"], 0);
    // A high-priority launch, then (within the window) three launches of another process,
    // each delayed 20 ms; the high-priority process itself is never delayed.
    run(mock, &home, &high, &["launch", "1"]);
    let t = Instant::now();
    let out = run(mock, &home, &low, &["launch", "3"]);
    let took = t.elapsed();
    assert_eq!(out[..3], ["launch 0 0", "launch 1 0", "launch 2 0"]);
    let s = state(&home);
    assert_eq!(s["throttled"], 3, "{s}");
    assert_eq!(s["throttled_ns"], 60_000_000, "{s}");
    assert!(took >= Duration::from_millis(60), "{took:?}");
    run(mock, &home, &high, &["launch", "2"]);
    assert_eq!(state(&home)["throttled"], 3);
}

#[test]
fn after_the_window_nothing_is_throttled() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let high = setup(mock, tmp.path(), &home, &["active_window_ns=50000000"]);
    run(mock, &home, &high, &["launch", "1"]);
    std::thread::sleep(Duration::from_millis(200));
    run(mock, &home, &mock.app_link, &["launch", "2"]);
    assert_eq!(state(&home)["throttled"], 0);
}
