//! End-to-end: `gpubpf demo` builds the quota policy with clang, loads it, runs a mock CUDA
//! allocation workload through the dispatch path (re-verify, JIT, ctx from the catalog),
//! replaces the policy live and dumps the shared counters. Needs clang and the built
//! `gpubpf` binary (`scripts/test.sh` builds both).

mod common;

use std::process::Command;

use common::cli::gpubpf;

#[test]
fn demo_vetoes_over_quota_and_keeps_counters_across_reload() {
    if !common::cli::have_clang() {
        eprintln!("skipped: clang not found (scripts/test.sh installs it)");
        return;
    }
    let home = tempfile::tempdir().expect("tempdir");
    let reg = home.path().join("reg");
    let out = Command::new(gpubpf())
        .args(["demo", "--home"])
        .arg(&reg)
        .output()
        .expect("run gpubpf demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");

    // Every program re-verified and compiled, twice (initial load and live replacement);
    // those on the two calls the demo makes listed.
    assert_eq!(
        stdout
            .matches("25 program(s) re-verified and JIT-compiled")
            .count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("     quota_alloc_done   exit").count(),
        2,
        "{stdout}"
    );
    // 256 + 384 + 256 MiB fit under 1 GiB; the next 256 MiB is vetoed by the entry program.
    let vetoes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("vetoed by quota/quota_alloc"))
        .collect();
    assert_eq!(vetoes.len(), 2, "{stdout}");
    assert!(vetoes[0].contains("kv cache") && vetoes[0].contains("CUDA_ERROR_OUT_OF_MEMORY (2)"));
    assert!(vetoes[1].contains("even bigger"));
    // The policy's bpf_printk lines: labelled, under the call that printed them (read from
    // the trace ring, not on stderr).
    let lines: Vec<&str> = stdout.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.contains("vetoed by quota/quota_alloc") {
            let next = lines.get(i + 1).copied().unwrap_or_default();
            assert!(
                next.starts_with("     bpf_printk from the policy: \"quota: pid ")
                    && next.contains(" bytes (process limit)\""),
                "{stdout}"
            );
        }
    }
    assert_eq!(
        stdout.matches("bpf_printk from the policy").count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("denied 268435456 bytes (process limit)"),
        "{stdout}"
    );
    assert!(!stderr.contains("denied"), "{stderr}");
    // Its terms explained: the key of proc_usage and the bytes in GiB.
    assert!(
        stdout.contains("proc_usage is keyed by process id"),
        "{stdout}"
    );
    assert!(
        stdout.contains("holds 1073741824 bytes = 1 GiB of device memory now, after 5 successful"),
        "{stdout}"
    );
    // The counters survived the replacement: 5 allocations, 2 frees, 2 denials, 1 GiB held.
    let dump = stdout
        .lines()
        .find(|l| l.starts_with("key: "))
        .unwrap_or_else(|| panic!("no dump line in\n{stdout}"));
    assert!(
        dump.contains(r#""allocs":5"#)
            && dump.contains(r#""frees":2"#)
            && dump.contains(r#""denied":2"#)
            && dump.contains(r#""bytes":1073741824"#),
        "{dump}"
    );
    // --home keeps the registry: the maps are still there for `gpubpf maps dump`.
    let again = Command::new(gpubpf())
        .args(["-j", "maps", "dump", "proc_usage"])
        .env("GPUBPF_HOME", &reg)
        .output()
        .expect("run gpubpf maps dump");
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).expect("json");
    assert!(v.to_string().contains("1073741824"), "{v}");
}
