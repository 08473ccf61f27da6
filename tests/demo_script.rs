//! The README's main job, `scripts/demo.sh`, run end to end with the binaries of this build
//! (`GPUBPF_DEMO_BIN`): an unmodified application on the mock driver under `gpubpf run` is
//! refused at the quota, the limit is raised live with `load --replace … --wait`, and
//! `gpubpf ps` and `maps dump proc_usage` show what happened.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::process::Command;

#[test]
fn the_demo_refuses_at_the_quota_and_raises_it_live() {
    let Some(session) = common::shim::session() else {
        return;
    };
    drop(session);
    let gpubpf = common::cli::gpubpf();
    let shim = common::shim::shim_library();
    let bin = gpubpf.parent().expect("binary directory");
    assert_eq!(
        shim.parent(),
        Some(bin),
        "gpubpf and libgpubpf.so side by side"
    );
    let out = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh"))
        .env("GPUBPF_DEMO_BIN", bin)
        .env_remove("GPUBPF_HOME")
        .env_remove("GPUBPF_LOG")
        .env_remove("LD_PRELOAD")
        .env_remove("RUST_LOG")
        .output()
        .expect("run scripts/demo.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let has = |needle: &str| {
        assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
    };
    has("step  4: cuMemAlloc(64 MiB) =   0 CUDA_SUCCESS");
    has("step  5: cuMemAlloc(64 MiB) =   2 CUDA_ERROR_OUT_OF_MEMORY   holding  256 MiB");
    has("acknowledged by 1 process(es)");
    has("step  6: cuMemAlloc(64 MiB) =   0 CUDA_SUCCESS               holding  320 MiB");
    has("done: 448 MiB held, 1 allocations refused");
    // ps while the application still runs: every allocation seen, the one refusal.
    let pid = text
        .split("[train pid ")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("pid in the application's output");
    let ps_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("cuMemAlloc ") && l.contains("calls"))
        .expect("cuMemAlloc line of gpubpf ps");
    let words: Vec<&str> = ps_line.split_whitespace().collect();
    assert_eq!(words, ["cuMemAlloc", "calls", "8", "denied", "1"], "{text}");
    has(&format!("key: {pid}  value: "));
    has("\"bytes\":469762048");
    has("exited with status 0");
}
