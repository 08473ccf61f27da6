//! `policies/trace.bpf.c` on the mock CUDA stack, read with the real CLI: per-API statistics,
//! the log2 latency histogram (`trace.latency_hist`) and one ring-buffer event per call
//! (`trace.events`, with the kernel's name for launches) shown by `gpubpf events`, typed
//! with the event struct's BTF. The histogram must hold exactly the buckets of the events'
//! latencies, so a wrong log2 is caught.
//!
//! Needs `cc` and clang; prints `skipped: …` without them.

mod common;

use std::collections::BTreeMap;

use serde_json::Value;

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::shim::{session, Session};

/// floor(log2(v)), 0 for 0 and 1: the histogram's bucket.
fn bucket(v: u64) -> u64 {
    u64::from(63 - v.max(1).leading_zeros())
}

/// A session on the mock stack with `policies/trace.bpf.c` loaded (`None`: skipped).
fn traced() -> Option<Session> {
    let s = session()?;
    let trace = common::cli::build_policy(s.tmp.path(), "policies/trace.bpf.c").expect("trace");
    ok(&cli(
        &s.home,
        &["load", trace.to_str().expect("utf-8 path")],
    ));
    Some(s)
}

#[test]
fn trace_counts_histograms_and_events_every_call() {
    let Some(s) = traced() else { return };
    let (mock, home) = (&s.mock, &s.home);
    let (launches, pairs) = (7u64, 5u64);
    mock.run_app(
        home,
        "link",
        &["count", &launches.to_string(), &pairs.to_string()],
    );

    let events = ok_json(&cli(home, &["-j", "events", "trace.events"]));
    let events = events.as_array().expect("a JSON array");
    let per_api =
        |api: &str| -> Vec<&Value> { events.iter().filter(|e| e["api"] == api).collect() };
    let (l, a, f) = (
        per_api("cuLaunchKernel"),
        per_api("cuMemAlloc"),
        per_api("cuMemFree"),
    );
    assert_eq!(
        (
            l.len() as u64,
            a.len() as u64,
            f.len() as u64,
            events.len() as u64
        ),
        (launches, pairs, pairs, launches + 2 * pairs),
        "{events:?}"
    );
    assert!(l
        .iter()
        .all(|e| e["kernel"] == "vector_add" && e["arg0"] == 0x1234));
    assert!(a
        .iter()
        .all(|e| e["kernel"] == "" && e["arg0"] == 4096 && e["result"] == 0));
    let pid = l[0]["pid"].clone();
    assert!(events.iter().all(|e| e["pid"] == pid && e["tid"] == pid));
    // Consumed: a second read finds nothing.
    assert_eq!(
        ok_json(&cli(home, &["-j", "events", "trace.events"])),
        Value::Array(vec![])
    );

    // The histogram holds exactly the events' buckets.
    let mut want: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for e in events {
        let api = e["api_id"].as_u64().expect("api_id");
        let latency = e["latency_ns"].as_u64().expect("latency_ns");
        *want.entry((api, bucket(latency))).or_default() += 1;
    }
    let hist = ok_json(&cli(home, &["-j", "maps", "dump", "trace.latency_hist"]));
    let have: BTreeMap<(u64, u64), u64> = hist
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let k = &e["formatted"]["key"];
            (
                (
                    k["api_id"].as_u64().expect("api_id"),
                    k["bucket"].as_u64().expect("bucket"),
                ),
                e["formatted"]["value"].as_u64().expect("count"),
            )
        })
        .collect();
    assert_eq!(have, want);

    // Statistics: every call counted, none failed.
    let stats = ok_json(&cli(home, &["-j", "maps", "dump", "trace.stats"]));
    let calls: u64 = stats
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["formatted"]["value"]["calls"].as_u64().expect("calls"))
        .sum();
    assert_eq!(calls, launches + 2 * pairs);
}

#[test]
fn the_log2_buckets_of_the_test_are_right() {
    assert_eq!(
        [0, 1, 2, 3, 4, 1023, 1024, u64::MAX].map(bucket),
        [0, 0, 1, 1, 2, 9, 10, 63]
    );
}

#[test]
fn events_explains_what_it_cannot_read() {
    let Some(Session { tmp, home, .. }) = session() else {
        return;
    };
    let trace = common::cli::build_policy(tmp.path(), "policies/trace.bpf.c").expect("trace");
    ok(&cli(&home, &["load", trace.to_str().expect("utf-8 path")]));
    let err = |args: &[&str]| {
        let out = cli(&home, args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["events", "nosuch"]).contains("no map named `nosuch`"));
    assert!(err(&["events", "trace.stats"]).contains("not a ring buffer"));
    let e = err(&["events", "trace.events", "--type", "nosuch"]);
    assert!(
        e.contains("no struct `nosuch`") && e.contains("event") && e.contains("api_stats"),
        "{e}"
    );
}

/// CUDA 12+ cudart (hence PyTorch) launches a library's `CUkernel` cast to a `CUfunction`,
/// which `cuFuncGetName` refuses: the events must still name those kernels (through
/// `cuKernelGetName`), and a function launched after them too. Each route reaches the
/// driver its own way; `proc` is static cudart's.
#[test]
fn trace_names_library_kernels_as_cudart_launches_them() {
    let Some(s) = traced() else { return };
    let (mock, home) = (&s.mock, &s.home);
    for route in ["link", "proc"] {
        let out = mock.run_app(home, route, &["libkernels", "3"]);
        let out = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.lines().filter(|l| l.starts_with("launch ")).count(),
            4,
            "{route}: {out}"
        );
        assert!(
            out.lines()
                .filter(|l| l.starts_with("launch "))
                .all(|l| l.ends_with(" 0")),
            "{route}: every launch succeeds: {out}"
        );
        let events = ok_json(&cli(home, &["-j", "events", "trace.events"]));
        let kernels: Vec<&str> = events
            .as_array()
            .expect("a JSON array")
            .iter()
            .filter(|e| e["api"] == "cuLaunchKernel")
            .map(|e| e["kernel"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            kernels,
            [
                "library_kernel",
                "library_kernel",
                "library_kernel",
                "vector_add"
            ],
            "{route}"
        );
    }
}
