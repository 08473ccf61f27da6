//! `policies/kernel_guard.bpf.c` and the `gpubpf_get_kernel_name` helper: unit tests with
//! `gpubpf test-run --kernel-name` (deny-list, allow-list, a kernel without a name, the
//! error code, every launch API) and end to end on the mock CUDA stack, whose
//! `cuFuncGetName` names the test apps' function 0x1234 `vector_add`: a listed name is
//! refused under a deny-list without reaching the driver, runs under an allow-list, and the
//! operator's `gpubpf maps update/delete kernel_list` takes effect in the next process.
//!
//! Needs clang (and `cc` for the mock stack); prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::cli::{ok, ok_json, run_with_registry as cli, with_policies};
use common::shim::{session, Session};

fn object() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (d, home, [o]) = with_policies(["policies/kernel_guard.bpf.c"])?;
    Some((d, home, o))
}

/// A mock-stack session and kernel_guard's object (its temporary directory kept alive).
fn mock_session() -> Option<(Session, tempfile::TempDir, PathBuf)> {
    let session = session()?;
    let (d, _, kg) = object()?;
    Some((session, d, kg))
}

/// Loads kernel_guard with `--set log_denials=0` and `sets`.
fn load_guard(home: &Path, kg: &Path, sets: &[&str]) {
    let mut a = vec!["-j", "load", kg.to_str().unwrap(), "--set", "log_denials=0"];
    for s in sets {
        a.extend(["--set", s]);
    }
    ok_json(&cli(home, &a));
}

/// Puts `name` on kernel_guard's list (`maps update kernel_list --key NAME --value 0`).
fn list(home: &Path, name: &str) {
    ok(&cli(
        home,
        &[
            "maps",
            "update",
            "kernel_list",
            "--key",
            name,
            "--value",
            "0",
        ],
    ));
}

/// The only run of `gpubpf -j test-run OBJ ARGS…`.
fn run1(home: &Path, obj: &Path, args: &[&str]) -> Value {
    let mut a = vec!["-j", "test-run", obj.to_str().unwrap()];
    a.extend_from_slice(args);
    let out = ok_json(&cli(home, &a));
    out["runs"][0].clone()
}

fn verdict(home: &Path, obj: &Path, args: &[&str]) -> u64 {
    run1(home, obj, args)["verdict"]
        .as_u64()
        .expect("entry verdict")
}

#[test]
fn deny_and_allow_lists_by_kernel_name() {
    let Some((_d, home, kg)) = object() else {
        return;
    };
    let launch = |name: Option<&str>, extra: &[&str]| {
        let mut a = vec![
            "--prog",
            "kernel_guard_launch",
            "--ctx",
            "args.f=0x1234",
            "--map-set",
            "kernel_list",
            "evil_kernel",
            "0",
        ];
        if let Some(n) = name {
            a.extend(["--kernel-name", n]);
        }
        a.extend_from_slice(extra);
        verdict(&home, &kg, &a)
    };
    // Deny-list (default): the listed name is refused with 800, others and unnamed run.
    assert_eq!(launch(Some("evil_kernel"), &[]), 800);
    assert_eq!(launch(Some("good_kernel"), &[]), 0);
    assert_eq!(
        launch(Some("evil_kernel2"), &[]),
        0,
        "whole names, not prefixes"
    );
    assert_eq!(
        launch(Some("evil_kerne"), &[]),
        0,
        "whole names, not prefixes"
    );
    assert_eq!(launch(None, &[]), 0, "no name: not on a deny-list");
    // Allow-list: only the listed name runs; an unnamed kernel is refused.
    let allow = ["--set", "allow_list=1"];
    assert_eq!(launch(Some("evil_kernel"), &allow), 0);
    assert_eq!(launch(Some("good_kernel"), &allow), 800);
    assert_eq!(launch(None, &allow), 800, "no name: not on an allow-list");
    // The error code is the operator's.
    assert_eq!(launch(Some("evil_kernel"), &["--set", "error_code=98"]), 98);
    // cuLaunchKernelEx names its function in the launch config.
    let ex = verdict(
        &home,
        &kg,
        &[
            "--prog",
            "kernel_guard_launch_ex",
            "--ctx",
            "launch.function=0x99",
            "--kernel-name",
            "evil_kernel",
            "--map-set",
            "kernel_list",
            "evil_kernel",
            "0",
        ],
    );
    assert_eq!(ex, 800);
}

#[test]
fn matches_and_refusals_are_counted_by_name() {
    let Some((_d, home, kg)) = object() else {
        return;
    };
    let r = run1(
        &home,
        &kg,
        &[
            "--prog",
            "kernel_guard_coop",
            "--ctx",
            "args.f=0x1234",
            "--kernel-name",
            "evil_kernel",
            "--map-set",
            "kernel_list",
            "evil_kernel",
            "5",
        ],
    );
    let changes: Vec<(String, Value, Value)> = r["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["map"].as_str().unwrap().to_string(),
                c["key"].clone(),
                c["after"].clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("kernel_list".into(), "evil_kernel".into(), 6.into()),
            ("kernel_denied".into(), "evil_kernel".into(), 1.into()),
        ],
        "{r}"
    );
    assert_eq!(r["printk"].as_array().unwrap().len(), 1, "{r}");
}

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn mock_stack_refuses_a_denied_kernel_and_runs_an_allowed_one() {
    let Some((Session { mock, tmp, home }, _d, kg)) = mock_session() else {
        return;
    };
    let _ = tmp;
    let load = |sets: &[&str]| load_guard(&home, &kg, sets);
    let refused = [
        "launch 0 800",
        "launch 1 800",
        "mock used=0 live=0",
        "mock alloc=0 free=0 launch=0 launch_ptsz=0 getinfo=0",
    ];
    load(&[]);
    // Empty deny-list: vector_add runs.
    let out = mock.run_app(&home, "dlsym", &["launch", "2"]);
    assert_eq!(lines(&out)[..2], ["launch 0 0", "launch 1 0"]);
    list(&home, "vector_add");
    for route in ["proc", "link", "dlsym"] {
        let out = mock.run_app(&home, route, &["launch", "2"]);
        assert_eq!(lines(&out), refused, "{route}");
    }
    let denied = ok_json(&cli(&home, &["-j", "maps", "dump", "kernel_denied"]));
    assert_eq!(denied[0]["formatted"]["key"], "vector_add", "{denied}");
    assert_eq!(denied[0]["formatted"]["value"], 6, "{denied}");

    // Allow-list with vector_add on it: it runs; deleted from it: refused.
    load(&["allow_list=1"]);
    let out = mock.run_app(&home, "proc", &["launch", "2"]);
    assert_eq!(
        lines(&out),
        [
            "launch 0 0",
            "launch 1 0",
            "mock used=0 live=0",
            "mock alloc=0 free=0 launch=0 launch_ptsz=2 getinfo=0",
        ]
    );
    ok(&cli(
        &home,
        &["maps", "delete", "kernel_list", "--key", "vector_add"],
    ));
    let out = mock.run_app(&home, "proc", &["launch", "2"]);
    assert_eq!(lines(&out), refused);
}

/// A kernel's name is asked of the driver once and kept (helpers/kernel_cache.rs); an
/// unload kills what was kept, so a function whose address the driver gave again after
/// `cuModuleUnload` (the mock names 0x1234 anew) is judged by its new name.
#[test]
fn a_name_kept_before_an_unload_is_not_used_after_it() {
    let Some((Session { mock, tmp, home }, _d, kg)) = mock_session() else {
        return;
    };
    let _ = tmp;
    load_guard(&home, &kg, &[]);
    list(&home, "vector_add_reloaded");
    for route in ["dlsym", "proc"] {
        let out = mock.run_app(&home, route, &["reload", "2"]);
        assert_eq!(
            lines(&out)[..5],
            [
                "launch 0 0",
                "launch 1 0",
                "unload 0",
                "launch 2 800",
                "launch 3 800"
            ],
            "{route}"
        );
    }
}
