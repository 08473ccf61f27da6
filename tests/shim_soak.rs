//! Soak: several processes × threads of hooked calls on the mock CUDA stack for a bounded
//! time while policies are replaced (`gpubpf load --replace`), loaded and unloaded in a loop
//! and the counting map is dumped concurrently. Afterwards the counting policy's map equals
//! the calls the applications report, the applications' RSS did not grow with the churn and
//! the registry's size on disk stayed bounded.
//!
//! CI runs a short version (`SHORT_SECS`, 2 processes × 4 threads). The long one, 4 processes
//! × 8 threads for as long as asked: `GPUBPF_SOAK_SECS=600 cargo test --release --test
//! shim_soak -- --nocapture` (docs/reliability.md).
//!
//! Needs `cc` and clang; prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::shim::{session, wait_acked, Session};
use gpubpf_runtime::registry::Registry;

const SHORT_SECS: u64 = 8;
/// Seconds of churn after which RSS and registry size are sampled as the baseline.
const WARM_UP: Duration = Duration::from_secs(2);

fn policy(dir: &Path, src: &str) -> PathBuf {
    common::cli::build_policy(dir, src).expect("clang present: policy built")
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Bytes of the regular files under `dir` (allocated blocks: maps are sparse files).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("read registry dir").flatten() {
        let Ok(md) = std::fs::symlink_metadata(e.path()) else {
            continue; // removed meanwhile
        };
        if md.is_dir() {
            total += disk_bytes(&e.path());
        } else {
            total += md.blocks() * 512;
        }
    }
    total
}

/// The `launches` counter through `gpubpf -j maps dump` (0 when the map is empty).
fn dumped_launches(home: &Path) -> u64 {
    let j = ok_json(&cli(home, &["-j", "maps", "dump", "launches"]));
    j.as_array()
        .expect("array")
        .first()
        .map(|e| e["formatted"]["value"].as_u64().expect("integer value"))
        .unwrap_or(0)
}

#[test]
fn soak_counts_exactly_under_policy_churn_and_concurrent_dumps() {
    let long = std::env::var("GPUBPF_SOAK_SECS")
        .ok()
        .map(|s| s.parse::<u64>().expect("GPUBPF_SOAK_SECS: whole seconds"));
    let secs = long.unwrap_or(SHORT_SECS);
    let (procs, threads) = if long.is_some() { (4, 8) } else { (2, 4) };
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let count = policy(tmp.path(), "tests/shim/count_launch.bpf.c");
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let count_s = count.to_str().expect("utf-8 path");
    let quota_s = quota.to_str().expect("utf-8 path");
    ok(&cli(&home, &["load", count_s]));
    let stop = tmp.path().join("stop");
    let apps: Vec<Child> = (0..procs)
        .map(|_| {
            mock.command(&mock.app_link, &home)
                .args(["link", "hammer", &threads.to_string()])
                .arg(&stop)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn app")
        })
        .collect();
    let pids: Vec<u32> = apps.iter().map(Child::id).collect();

    // Concurrent dumps: the counter only ever grows.
    let done = Arc::new(AtomicBool::new(false));
    let dumps = Arc::new(AtomicU64::new(0));
    let dumper = {
        let (home, done, dumps) = (home.clone(), done.clone(), dumps.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            while !done.load(Ordering::Relaxed) {
                let v = dumped_launches(&home);
                assert!(v >= last, "counter went back from {last} to {v}");
                last = v;
                dumps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut baseline: Option<(Vec<u64>, u64)> = None;
    let mut max_disk = 0;
    let mut rounds = 0u64;
    while Instant::now() < end {
        // Replace the counter (maps kept by name), load and unload a second policy.
        ok(&cli(&home, &["load", count_s, "--replace", "count_launch"]));
        ok(&cli(
            &home,
            &[
                "load",
                quota_s,
                "--set",
                "limit_bytes=1GiB",
                "--set",
                "log_denials=0",
            ],
        ));
        ok(&cli(&home, &["prog", "unload", "quota"]));
        rounds += 1;
        let disk = disk_bytes(&home);
        if baseline.is_none() && start.elapsed() >= WARM_UP {
            baseline = Some((pids.iter().map(|&p| vm_rss_kib(p)).collect(), disk));
        } else {
            max_disk = max_disk.max(disk);
        }
    }
    let rss_end: Vec<u64> = pids.iter().map(|&p| vm_rss_kib(p)).collect();
    // Every application applied the churn: each acknowledges the last generation.
    let last = Registry::open(&home)
        .expect("open registry")
        .control()
        .generation();
    let deadline = Instant::now() + Duration::from_secs(30);
    for &pid in &pids {
        wait_acked(&home, pid, last, deadline);
    }
    std::fs::write(&stop, b"").expect("create stop file");
    let mut made = 0u64;
    for app in apps {
        let out = app.wait_with_output().expect("wait app");
        assert!(
            out.status.success(),
            "app failed: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        made += stdout
            .lines()
            .find_map(|l| l.strip_prefix("launches "))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("launch total line");
    }
    done.store(true, Ordering::Relaxed);
    dumper.join().expect("dumper thread");

    let counted = dumped_launches(&home);
    let (rss_base, disk_base) = baseline.expect("ran past the warm-up");
    eprintln!(
        "{secs} s, {procs}×{threads}: {made} launches, {rounds} replace/load/unload rounds, {} \
         dumps; RSS KiB {rss_base:?} -> {rss_end:?}; registry {disk_base} B after warm-up, \
         at most {max_disk} B later",
        dumps.load(Ordering::Relaxed)
    );
    assert!(made > 0 && rounds > 1, "nothing ran");
    assert_eq!(counted, made, "the counter misses or repeats calls");
    for (b, e) in rss_base.iter().zip(&rss_end) {
        assert!(
            *e < b + 8 * 1024,
            "an application's RSS grew from {b} KiB to {e} KiB over the churn"
        );
    }
    assert!(
        max_disk <= disk_base + 256 * 1024,
        "the registry grew from {disk_base} B to {max_disk} B over the churn"
    );
}
