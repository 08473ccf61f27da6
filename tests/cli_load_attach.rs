//! `gpubpf load OBJ --attach …` never moves a program silently: `--attach API` applies to
//! programs whose section names no API (`SEC("cuda")`, `SEC("cudaret")`) or to an object
//! whose programs all name one API; otherwise it is an error that suggests
//! `--attach PROG=API`, and `PROG=API` for a program written for another API is an error
//! naming both. Objects: `policies/quota.bpf.c`, `policies/trace.bpf.c`,
//! `tests/data/attach/*.bpf.c`.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::Path;

use serde_json::Value;

use common::cli::{ok_json as j, run_with_registry as run, with_policies};

/// `(program, attach point, phase, requested)` of every link of a `load -j` answer.
fn links(v: &Value) -> Vec<(String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    for p in v["programs"].as_array().unwrap() {
        for l in p["links"].as_array().unwrap() {
            out.push((
                s(&p["name"]),
                s(&l["attach_point"]),
                s(&l["phase"]),
                s(&l["requested"]),
            ));
        }
    }
    out
}

/// The links of `gpubpf -j load OBJ --attach ATTACH`, which must succeed.
fn attach_links(home: &Path, obj: &str, attach: &str) -> Vec<(String, String, String, String)> {
    links(&j(&run(home, &["-j", "load", obj, "--attach", attach])))
}

fn link(p: &str, at: &str, phase: &str, req: &str) -> (String, String, String, String) {
    (p.into(), at.into(), phase.into(), req.into())
}

fn fails(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn attach_api_refuses_objects_whose_programs_name_different_apis() {
    let Some((_d, home, [quota, trace])) =
        with_policies(["policies/quota.bpf.c", "policies/trace.bpf.c"])
    else {
        return;
    };
    let q = quota.to_str().unwrap();

    let err = fails(&run(&home, &["load", q, "--attach", "cudaMalloc"]));
    assert!(
        err.contains("different APIs")
            && err.contains("quota_free_done")
            && err.contains("cuMemFree")
            && err.contains("--attach PROG=API"),
        "{err}"
    );
    let err = fails(&run(
        &home,
        &["load", trace.to_str().unwrap(), "--attach", "cudaMalloc"],
    ));
    assert!(err.contains("different APIs"), "{err}");
    assert!(
        j(&run(&home, &["-j", "prog", "list"]))
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing loaded"
    );

    // PROG=API for a program written for another API names both.
    let err = fails(&run(
        &home,
        &["load", q, "--attach", "quota_free_done=cudaMalloc"],
    ));
    assert!(
        err.contains("quota_free_done")
            && err.contains("cudaret/cuMemFree")
            && err.contains("cudaMalloc"),
        "{err}"
    );
    let err = fails(&run(&home, &["load", q, "--attach", "nope=cudaMalloc"]));
    assert!(
        err.contains("no program `nope`") && err.contains("quota_alloc"),
        "{err}"
    );

    // PROG=API in another spelling of its own API: that program only; the rest stay.
    let links = attach_links(&home, q, "quota_alloc=cuMemAlloc_v2");
    assert_eq!(
        links[..2],
        [
            link("quota_alloc", "cuMemAlloc", "entry", "cuMemAlloc_v2"),
            link("quota_alloc_done", "cuMemAlloc", "exit", "cuMemAlloc"),
        ]
    );
    assert!(links.contains(&link("quota_free_done", "cuMemFree", "exit", "cuMemFree")));
    assert!(
        links[2..].iter().all(|l| l.1 == l.3),
        "every other program where its section says: {links:?}"
    );
}

#[test]
fn attach_api_moves_generic_and_single_api_programs() {
    let Some((_d, home, [generic, one])) = with_policies([
        "tests/data/attach/generic.bpf.c",
        "tests/data/attach/one_api.bpf.c",
    ]) else {
        return;
    };
    let g = generic.to_str().unwrap();

    // Sections without an API need --attach.
    let err = fails(&run(&home, &["load", g]));
    assert!(
        err.contains("count_entry") && err.contains("names no API") && err.contains("--attach"),
        "{err}"
    );
    assert_eq!(
        attach_links(&home, g, "cudaMalloc"),
        [
            link("count_entry", "cuMemAlloc", "entry", "cudaMalloc"),
            link("count_exit", "cuMemAlloc", "exit", "cudaMalloc"),
        ]
    );
    assert_eq!(
        attach_links(&home, g, "count_entry=cuMemFree,count_exit=cuLaunchKernel"),
        [
            link("count_entry", "cuMemFree", "entry", "cuMemFree"),
            link("count_exit", "cuLaunchKernel", "exit", "cuLaunchKernel"),
        ]
    );
    let err = fails(&run(
        &home,
        &[
            "load",
            g,
            "--attach",
            "count_entry=cuMemFree,count_exit=cuMemFree,cudaMalloc",
        ],
    ));
    assert!(err.contains("applies to no program"), "{err}");
    let insp = j(&run(&home, &["-j", "inspect", g]));
    assert_eq!(insp["programs"][0]["section"], "cuda");
    assert!(insp["programs"][0]["attach"].is_null(), "{insp}");

    // One API, one program per phase: --attach API moves both.
    assert_eq!(
        attach_links(&home, one.to_str().unwrap(), "cuMemFree"),
        [
            link("on_entry", "cuMemFree", "entry", "cuMemFree"),
            link("on_exit", "cuMemFree", "exit", "cuMemFree"),
        ]
    );
}
