//! `policies/fault_inject.bpf.c`, `policies/fault_inject_alloc.bpf.c` and
//! `policies/fault_inject_kernel.bpf.c`: unit tests with `gpubpf test-run` (the Nth call,
//! every Nth call, a probability, a size range, each exact at its boundary) and end to end on
//! the mock CUDA stack (`tests/shim/`): the chosen calls fail with the chosen error without
//! reaching the driver, the others run; a kernel filter fails only that kernel's launches.
//!
//! Needs clang (and `cc` for the mock stack); prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::cli::{ok_json, run_with_registry as cli, with_policies};
use common::shim::{session, Session};

fn objects() -> Option<(tempfile::TempDir, PathBuf, [PathBuf; 2])> {
    with_policies([
        "policies/fault_inject.bpf.c",
        "policies/fault_inject_alloc.bpf.c",
    ])
}

/// The verdicts of `gpubpf -j test-run OBJ ARGS…`, one per run.
fn verdicts(home: &Path, obj: &Path, args: &[&str]) -> Vec<u64> {
    let mut a = vec!["-j", "test-run", obj.to_str().unwrap()];
    a.extend_from_slice(args);
    ok_json(&cli(home, &a))["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["verdict"].as_u64().expect("entry verdict"))
        .collect()
}

/// Indices (1-based) of the runs that were refused.
fn failed(v: &[u64]) -> Vec<usize> {
    v.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn nth_and_every_fail_exactly_the_chosen_calls() {
    let Some((_d, home, [fi, _])) = objects() else {
        return;
    };
    let base = ["--attach", "cuMemAlloc", "--ctx", "hdr.pid=7"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        verdicts(&home, &fi, &a)
    };
    let v = run(&["--set", "nth=3", "--repeat", "6"]);
    assert_eq!(failed(&v), [3], "{v:?}");
    assert_eq!(v[2], 2, "default error: CUDA_ERROR_OUT_OF_MEMORY");
    let v = run(&["--set", "every=3", "--repeat", "7"]);
    assert_eq!(failed(&v), [3, 6], "{v:?}");
    // The rules are ORed, and the error is the chosen one.
    let v = run(&[
        "--set",
        "nth=1",
        "--set",
        "every=4",
        "--set",
        "error_code=719",
        "--repeat",
        "8",
    ]);
    assert_eq!(failed(&v), [1, 4, 8], "{v:?}");
    assert!(failed(&v).iter().all(|&i| v[i - 1] == 719));
    // Nothing set: nothing injected; an error code out of range injects nothing either.
    assert!(failed(&run(&["--repeat", "5"])).is_empty());
    assert!(failed(&run(&["--set", "every=1", "--set", "error_code=1000"])).is_empty());
}

#[test]
fn the_counter_is_per_process_and_api() {
    let Some((_d, home, [fi, _])) = objects() else {
        return;
    };
    let out = ok_json(&cli(
        &home,
        &[
            "-j",
            "test-run",
            fi.to_str().unwrap(),
            "--attach",
            "cuLaunchKernel",
            "--set",
            "every=2",
            "--repeat",
            "2",
            "--ctx",
            "hdr.pid=9",
            "--map-set",
            "fault_counts",
            "pid=9 api_id=1",
            "calls=1 injected=0",
        ],
    ));
    let runs = out["runs"].as_array().unwrap();
    // Another API's counter (api 1) at 1 does not make this API's first call the second.
    assert_eq!(runs[0]["verdict"], 0, "{out}");
    assert_eq!(runs[1]["verdict"], 2, "{out}");
    let change = runs[1]["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["map"] == "fault_counts")
        .expect("fault_counts changed");
    assert_eq!(change["after"], json!({"calls": 2, "injected": 1}), "{out}");
}

#[test]
fn probability_in_parts_per_million() {
    let Some((_d, home, [fi, _])) = objects() else {
        return;
    };
    let run = |ppm: &str, seed: &str| {
        let v = verdicts(
            &home,
            &fi,
            &[
                "--attach",
                "cuLaunchKernel",
                "--set",
                &format!("prob_ppm={ppm}"),
                "--seed",
                seed,
                "--repeat",
                "400",
            ],
        );
        failed(&v).len()
    };
    assert_eq!(run("0", "1"), 0);
    assert_eq!(run("1000000", "1"), 400);
    // 25 % of 400 runs: 100 expected; a policy that ignored the probability (0 or 400) or
    // scaled it wrongly (per mille: 400, per 2^32: 0) fails.
    for seed in ["1", "2"] {
        let n = run("250000", seed);
        assert!((60..=140).contains(&n), "seed {seed}: {n} of 400 failed");
    }
    // Deterministic: the same seed gives the same runs.
    assert_eq!(run("250000", "5"), run("250000", "5"));
}

#[test]
fn size_range_is_inclusive_at_both_ends() {
    let Some((_d, home, [_, fa])) = objects() else {
        return;
    };
    let at = |api: &str, field: &str, size: u64| {
        verdicts(
            &home,
            &fa,
            &[
                "--attach",
                api,
                "--set",
                "every=1",
                "--set",
                "min_size=1MiB",
                "--set",
                "max_size=2MiB",
                "--ctx",
                &format!("{field}={size}"),
            ],
        )[0]
    };
    const MIB: u64 = 1 << 20;
    for (api, field) in [
        ("cuMemAlloc", "args.bytesize"),
        ("cuMemAllocAsync", "args.bytesize"),
        ("cuMemCreate", "args.size"),
    ] {
        assert_eq!(at(api, field, MIB - 1), 0, "{api}");
        assert_eq!(at(api, field, MIB), 2, "{api}");
        assert_eq!(at(api, field, 2 * MIB), 2, "{api}");
        assert_eq!(at(api, field, 2 * MIB + 1), 0, "{api}");
    }
    // An API whose ctx has no size argument is rejected by the verifier, not misread.
    let out = cli(
        &home,
        &[
            "test-run",
            fa.to_str().unwrap(),
            "--attach",
            "cuCtxSynchronize",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("outside the ctx"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn load(home: &Path, obj: &Path, args: &[&str]) {
    let mut a = vec!["-j", "load", obj.to_str().unwrap()];
    a.extend_from_slice(args);
    ok_json(&cli(home, &a));
}

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn counts(home: &Path) -> Vec<Value> {
    ok_json(&cli(home, &["-j", "maps", "dump", "fault_counts"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["formatted"]["value"].clone())
        .collect()
}

#[test]
fn mock_stack_fails_the_chosen_calls_without_reaching_the_driver() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let Some((_d, _, [fi, fa])) = objects() else {
        return;
    };
    let _ = tmp;
    load(
        &home,
        &fi,
        &[
            "--attach",
            "cuMemAlloc",
            "--set",
            "every=2",
            "--set",
            "error_code=719",
        ],
    );
    for route in ["proc", "link"] {
        let out = mock.run_app(&home, route, &["family", "alloc", "4", "4096"]);
        assert_eq!(
            lines(&out),
            [
                "alloc 0 0",
                "alloc 1 719",
                "alloc 2 0",
                "alloc 3 719",
                "free 0",
                "retry 0",
                "mock used=0 live=0",
                // Calls 2 and 4 never reached the driver; the retry was call 5.
                "mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0",
            ],
            "{route}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        counts(&home),
        [
            json!({"calls": 5, "injected": 2}),
            json!({"calls": 5, "injected": 2})
        ]
    );
    ok_json(&cli(&home, &["-j", "prog", "unload", "fault_inject"]));

    // Only allocations of 1 MiB and more fail; the 4 KiB ones of the same run pass.
    load(
        &home,
        &fa,
        &[
            "--attach",
            "cuMemAlloc",
            "--set",
            "every=1",
            "--set",
            "min_size=1MiB",
        ],
    );
    let small = mock.run_app(&home, "proc", &["family", "alloc", "2", "4096"]);
    assert_eq!(lines(&small)[..2], ["alloc 0 0", "alloc 1 0"]);
    let big = mock.run_app(&home, "proc", &["family", "alloc", "2", "1048576"]);
    assert_eq!(
        lines(&big),
        [
            "alloc 0 2",
            "alloc 1 2",
            "mock used=0 live=0",
            "mock alloc=0 free=0 launch=0 launch_ptsz=0 getinfo=0",
        ]
    );
}

#[test]
fn a_kernel_filter_fails_only_that_kernels_launches() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let fk = common::cli::build_policy(tmp.path(), "policies/fault_inject_kernel.bpf.c")
        .expect("fault_inject_kernel");
    // The mock's one kernel is `vector_add` (function 0x1234).
    let args = |kernel: &str| {
        [
            "--set".to_string(),
            format!("kernel={kernel}"),
            "--set".into(),
            "every=2".into(),
            "--set".into(),
            "error_code=719".into(),
        ]
    };
    let a = args("vector_add");
    load(
        &home,
        &fk,
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let out = mock.run_app(&home, "link", &["launch", "4"]);
    assert_eq!(
        lines(&out),
        [
            "launch 0 0",
            "launch 1 719",
            "launch 2 0",
            "launch 3 719",
            "mock used=0 live=0",
            "mock alloc=0 free=0 launch=2 launch_ptsz=0 getinfo=0",
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(counts(&home), [json!({"calls": 4, "injected": 2})]);
    ok_json(&cli(
        &home,
        &["-j", "prog", "unload", "fault_inject_kernel"],
    ));

    // Another kernel's name: every launch runs, and none is counted.
    let a = args("other_kernel");
    load(
        &home,
        &fk,
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let out = mock.run_app(&home, "link", &["launch", "3"]);
    assert_eq!(
        lines(&out),
        [
            "launch 0 0",
            "launch 1 0",
            "launch 2 0",
            "mock used=0 live=0",
            "mock alloc=0 free=0 launch=3 launch_ptsz=0 getinfo=0",
        ]
    );
    assert_eq!(counts(&home), [json!({"calls": 4, "injected": 2})]);

    // A name longer than the knob's 63 bytes is refused at load.
    let long = format!("kernel={}", "k".repeat(64));
    let out = cli(
        &home,
        &[
            "load",
            fk.to_str().unwrap(),
            "--name",
            "long",
            "--set",
            &long,
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("do not fit char[64]"), "{err}");
}
