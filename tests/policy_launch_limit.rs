//! `policies/launch_limit.bpf.c` and the `gpubpf_delay_ns` helper: unit tests with
//! `gpubpf test-run` (whose delay helper moves the fake clock instead of sleeping): a full
//! bucket lets a launch through, an empty one delays it exactly until its token is due
//! (an off-by-one in the refill or the wait fails them), the delay is bounded, a captured
//! stream is never delayed; and end to end on the mock CUDA stack, where launches past the
//! burst really wait.
//!
//! Needs clang (and `cc` for the mock stack); prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cli::{ok_json, run_with_registry as cli, with_policies};
use common::shim::{session, Session};

fn object() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (d, home, [o]) = with_policies(["policies/launch_limit.bpf.c"])?;
    Some((d, home, o))
}

/// The `after` of `map[42]` in the only run, with the bucket seeded at `credit` and the
/// fake clock's first reading (1 s) as its last update.
fn after(home: &Path, obj: &Path, map: &str, credit: u64, extra: &[&str]) -> Value {
    let bucket = format!("credit={credit} last_ns=1000000000");
    let mut a = vec![
        "-j",
        "test-run",
        obj.to_str().unwrap(),
        "--prog",
        "launch_limit",
        "--ctx",
        "hdr.pid=42",
        "--set",
        "rate=1000",
        "--set",
        "burst=2",
        "--map-set",
        "launch_bucket",
        "42",
        &bucket,
    ];
    a.extend_from_slice(extra);
    let out = ok_json(&cli(home, &a));
    let run = &out["runs"][0];
    assert_eq!(run["verdict"], 0, "never refuses: {out}");
    run["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["map"] == map && c["key"] == 42)
        .map(|c| c["after"].clone())
        .unwrap_or(Value::Null)
}

const TOKEN: u64 = 1_000_000_000;

#[test]
fn an_empty_bucket_delays_until_the_token_is_due() {
    let Some((_d, home, ll)) = object() else {
        return;
    };
    let stats = |credit: u64, extra: &[&str]| after(&home, &ll, "launch_stats", credit, extra);
    // One whole token: no delay (the clock has not moved: no refill).
    assert_eq!(
        stats(TOKEN, &[]),
        json!({"launches": 1, "delayed": 0, "delay_ns": 0, "capture_skips": 0})
    );
    // One token-nanosecond short: 1 ns to wait at 1000/s (rounded up, never 0).
    assert_eq!(stats(TOKEN - 1, &[])["delay_ns"], 1);
    // Half a token: 0.5 ms; empty: 1 ms.
    assert_eq!(stats(TOKEN / 2, &[])["delay_ns"], 500_000);
    assert_eq!(
        stats(0, &[]),
        json!({"launches": 1, "delayed": 1, "delay_ns": 1_000_000, "capture_skips": 0})
    );
    // The wait is bounded by max_delay_ns.
    assert_eq!(
        stats(0, &["--set", "max_delay_ns=250000"])["delay_ns"],
        250_000
    );
    // A stream being captured is never delayed.
    assert_eq!(
        stats(0, &["--ctx", "hdr.flags=1"]),
        json!({"launches": 1, "delayed": 0, "delay_ns": 0, "capture_skips": 1})
    );
    // rate 0: no limit, nothing counted.
    assert_eq!(stats(0, &["--set", "rate=0"]), Value::Null);
}

#[test]
fn the_bucket_takes_a_token_and_refills_up_to_burst() {
    let Some((_d, home, ll)) = object() else {
        return;
    };
    // A whole token and a half: one is taken, half remains.
    let b = after(&home, &ll, "launch_bucket", TOKEN + TOKEN / 2, &[]);
    assert_eq!(b["credit"], TOKEN / 2, "{b}");
    // Runs 1 s apart refill the bucket, but never past `burst` (2 tokens): each run then
    // takes one and leaves one.
    let out = ok_json(&cli(
        &home,
        &[
            "-j",
            "test-run",
            ll.to_str().unwrap(),
            "--prog",
            "launch_limit",
            "--ctx",
            "hdr.pid=42",
            "--set",
            "rate=1000",
            "--set",
            "burst=2",
            "--repeat",
            "3",
        ],
    ));
    for run in out["runs"].as_array().unwrap() {
        let b = run["map_changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["map"] == "launch_bucket")
            .expect("bucket changed");
        assert_eq!(b["after"]["credit"], TOKEN, "{run}");
    }
}

#[test]
fn mock_stack_launches_past_the_burst_wait() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let _ = tmp;
    let Some((_d, _, ll)) = object() else {
        return;
    };
    ok_json(&cli(
        &home,
        &[
            "-j",
            "load",
            ll.to_str().unwrap(),
            "--set",
            "rate=100",
            "--set",
            "burst=1",
        ],
    ));
    let t0 = Instant::now();
    let out = mock.run_app(&home, "dlsym", &["launch", "5"]);
    let took = t0.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("launch 4 0\n"), "never refused: {text}");
    // The first launch takes the bucket's one token; the other four wait ~10 ms each.
    assert!(took >= Duration::from_millis(35), "{took:?}");
    let stats = ok_json(&cli(&home, &["-j", "maps", "dump", "launch_stats"]));
    let s = &stats[0]["formatted"]["value"];
    assert_eq!(s["launches"], 5, "{stats}");
    assert_eq!(s["delayed"], 4, "{stats}");
    let ns = s["delay_ns"].as_u64().unwrap();
    assert!((30_000_000..=40_000_000).contains(&ns), "{stats}");
}
