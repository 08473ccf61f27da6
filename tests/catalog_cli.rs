//! End-to-end tests of `gpubpf attach-points`. They run the built binary next to the test
//! executable's directory (`target/debug/gpubpf`); build it first with
//! `cargo build -p gpubpf-loader-cli` (each test prints `skipped: …` when it is missing).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn gpubpf() -> Option<PathBuf> {
    Some(common::cli::gpubpf())
}

fn run(args: &[&str]) -> Option<Output> {
    let bin = gpubpf()?;
    Some(Command::new(bin).args(args).output().unwrap())
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn find<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x[key].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn json_lists_every_driver_function_with_variants_and_aliases() {
    let Some(out) = run(&["attach-points", "--json"]) else {
        return;
    };
    let v = stdout_json(&out);
    let list = v.as_array().expect("a JSON array");
    assert!(list.len() >= 400, "{} attach points", list.len());
    for name in [
        "cuMemAlloc",
        "cuMemAllocAsync",
        "cuMemCreate",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuGraphLaunch",
        "cuMemGetInfo",
    ] {
        let p = find(list, name);
        assert!(!p["variants"].as_array().unwrap().is_empty(), "{name}");
        assert!(p["id"].as_u64().unwrap() > 0);
        assert_eq!(p["sections"]["entry"], format!("cuda/{name}"));
    }
    let alloc = find(list, "cuMemAlloc");
    assert_eq!(
        strings(&alloc["variants"], "symbol"),
        ["cuMemAlloc", "cuMemAlloc_v2"]
    );
    assert!(strings(&alloc["aliases"], "name").contains(&"cudaMalloc".to_string()));
    let launch = find(list, "cuLaunchKernel");
    assert!(strings(&launch["variants"], "symbol").contains(&"cuLaunchKernel_ptsz".to_string()));
    assert_eq!(launch["variants"][1]["per_thread"], "ptsz");
    assert!(strings(&launch["aliases"], "name").contains(&"cudaLaunchKernel".to_string()));
    let ids: std::collections::HashSet<u64> =
        list.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), list.len(), "api ids are unique");
}

#[test]
fn json_covers_every_cudart_proc_lookup() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/cuda/cuda13-runtime-proc-lookups.tsv");
    let path = std::env::var_os("GPUBPF_CUDA_DATA_DIR")
        .map(|d| PathBuf::from(d).join("cuda13-runtime-proc-lookups.tsv"))
        .unwrap_or(path);
    let Ok(tsv) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: {} not found", path.display());
        return;
    };
    let Some(out) = run(&["-j", "attach-points"]) else {
        return;
    };
    let v = stdout_json(&out);
    let names: std::collections::HashSet<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let missing: Vec<&str> = tsv
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next())
        .filter(|s| !s.is_empty() && *s != "\"\"" && !names.contains(s))
        .collect();
    assert!(missing.is_empty(), "not listed: {missing:?}");
}

#[test]
fn one_point_in_json_shows_ctx_fields_and_access() {
    let Some(out) = run(&["-j", "attach-points", "cudaMalloc"]) else {
        return;
    };
    let v = stdout_json(&out);
    assert_eq!(v["name"], "cuMemAlloc");
    assert_eq!(v["resolved_from"]["via"], "runtime_alias");
    let fields = v["ctx"]["fields"].as_array().unwrap();
    let f = |n: &str| fields.iter().find(|f| f["name"] == n).unwrap().clone();
    assert_eq!(f("args.bytesize")["offset"], 40);
    assert_eq!(f("args.bytesize")["entry"]["write"], true);
    assert_eq!(f("args.bytesize")["exit"]["write"], false);
    assert_eq!(f("out.dptr")["entry"]["read"], false);
    assert_eq!(f("out.dptr")["exit"]["read"], true);
    assert_eq!(f("hdr.result")["exit"]["write"], true);
    assert_eq!(v["returns"]["entry"]["max"], 999);
    assert_eq!(v["returns"]["exit"]["max"], 0);

    let out = run(&["attach-points", "--pretty", "cuMemGetInfo_v2"]).unwrap();
    let v = stdout_json(&out);
    assert_eq!(v["resolved_from"]["via"], "exported_symbol");
    let fields = v["ctx"]["fields"].as_array().unwrap();
    let free = fields.iter().find(|f| f["name"] == "out.free").unwrap();
    assert_eq!(free["exit"]["write"], true);
}

#[test]
fn text_output_lists_and_details() {
    let Some(out) = run(&["attach-points"]) else {
        return;
    };
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("cuMemAlloc"))
        .expect("cuMemAlloc line");
    assert!(
        line.contains("cuMemAlloc_v2@3020") && line.contains("cudaMalloc"),
        "{line}"
    );
    assert!(text.contains("attach points"), "summary line");

    let out = run(&["attach-points", "cudaLaunchKernelExC"]).unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("runtime-API alias of `cuLaunchKernelEx`"),
        "{text}"
    );
    assert!(text.contains("launch.grid_x") && text.contains("cuLaunchKernelEx_ptsz"));

    let out = run(&["attach-points", "--category", "launch"]).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(!text.contains("cuMemAlloc"));
}

#[test]
fn unknown_names_fail_with_a_suggestion() {
    let Some(out) = run(&["attach-points", "cuMemAloc"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("did you mean `cuMemAlloc`?"), "{err}");

    let out = run(&["-j", "attach-points", "cudaMallocc"]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("did you mean `cudaMalloc`?"),
        "{v}"
    );

    let out = run(&["attach-points", "--category", "nonsense"]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown category `nonsense`") && err.contains("launch"),
        "{err}"
    );
}
