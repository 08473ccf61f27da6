//! End to end on the mock CUDA stack: `gpubpf ps` (live processes, calls and denials per
//! attach point, failed objects, per-program run statistics while `--stats` asks) and
//! `GPUBPF_FAIL=closed`.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use common::cli::{
    ok_json, ps_entry as entry, ps_json as ps, run_with_registry as cli,
    wait_for_process as wait_for,
};
use common::shim::{release, session, spawn_piped, Session};

fn policy(dir: &Path, src: &str) -> PathBuf {
    common::cli::build_policy(dir, src).expect("clang present: policy built")
}

fn load(home: &Path, obj: &Path, extra: &[&str]) {
    let mut args = vec!["-j", "load", obj.to_str().expect("utf-8 path")];
    args.extend(extra);
    ok_json(&cli(home, &args));
}

/// Replaces the recorded object of loaded policy `name` by bytes that no longer match its
/// hash: every process that (re)builds its chains fails on that object alone.
fn corrupt(home: &Path, name: &str) {
    std::fs::write(
        home.join("progs").join(name).join("object.o"),
        b"not an ELF",
    )
    .expect("overwrite object");
}

fn point<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["attach_points"]
        .as_array()
        .expect("attach_points")
        .iter()
        .find(|a| a["attach_point"] == name)
        .unwrap_or_else(|| panic!("no {name} in {p}"))
}

/// A live process is listed with its command, user and applied generation, its calls and
/// denials per attach point counted exactly, the object it could not run with the reason,
/// and it vanishes from the list when it exits.
#[test]
fn ps_lists_a_live_process_with_exact_counts_and_its_failed_object() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let count = policy(tmp.path(), "tests/shim/count_launch.bpf.c");
    load(
        &home,
        &quota,
        &["--set", "limit_bytes=50", "--set", "log_denials=0"],
    );
    load(&home, &count, &[]);
    corrupt(&home, "count_launch");
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = spawn_piped(&mut mock.live(&home, &ready, &go, "100"));
    let pid = child.id();
    // The call is counted before its programs run (and the refusal after): read `ps` once
    // the first allocation has returned (the application is ready).
    common::process::wait_for_files(&[&ready], "application never got ready");
    // The one allocation before READY is over the 50-byte limit: seen once, denied once.
    // `ps` reads the process table, then the process's stats file: a reading that began
    // during the process's initialisation can pair a table entry from before its
    // acknowledgement with counts from after, so wait for both.
    let p = wait_for(&home, pid, "its first allocation", |p| {
        p["up_to_date"] == true
            && p["attach_points"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["calls"] == 1))
    });
    let alloc = point(&p, "cuMemAlloc");
    assert_eq!(
        (&alloc["calls"], &alloc["denied"]),
        (&1.into(), &1.into()),
        "{p}"
    );
    assert!(
        p["command"].as_str().unwrap_or("").contains(" live "),
        "{p}"
    );
    assert_eq!(p["up_to_date"], true, "{p}");
    assert_eq!(p["fail_closed"], false, "{p}");
    let failed = p["failed_objects"].as_array().expect("failed_objects");
    assert_eq!(failed.len(), 1, "{p}");
    assert_eq!(failed[0]["object"], "count_launch");
    assert!(
        failed[0]["reason"].as_str().unwrap_or("").contains("hash"),
        "{p}"
    );
    // The quota's programs run here; without --stats their runs are not counted.
    let progs = p["programs"].as_array().expect("programs");
    assert!(
        progs
            .iter()
            .any(|q| q["object"] == "quota" && q["phase"] == "entry" && q["active"] == true),
        "{p}"
    );
    assert!(progs.iter().all(|q| q["run_cnt"] == 0), "{p}");
    // The text form says the same.
    let text = String::from_utf8_lossy(&cli(&home, &["ps"]).stdout).into_owned();
    assert!(text.contains(&pid.to_string()), "{text}");
    assert!(text.contains("failed object count_launch"), "{text}");
    assert!(text.contains("denied 1"), "{text}");
    assert_eq!(release(child, &go)[..2], ["before 2", "after 2"]);
    assert!(
        entry(&ps(&home, &[]), pid).is_none(),
        "exited process still listed"
    );
}

/// `--stats` switches run statistics on in every process for its window: a process
/// launching without pause then shows run counts and run time for its program, never more
/// runs than calls.
#[test]
fn ps_stats_collects_run_counts_and_time_only_while_asked() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let count = policy(tmp.path(), "tests/shim/count_launch.bpf.c");
    load(&home, &count, &[]);
    let stop = tmp.path().join("stop");
    let child = mock
        .command(&mock.app_link, &home)
        .args(["link", "hammer", "2"])
        .arg(&stop)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let p = wait_for(&home, pid, "launches", |p| {
        p["attach_points"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["calls"].as_u64() > Some(0)))
    });
    assert_eq!(p["programs"][0]["run_cnt"], 0, "off until asked: {p}");
    let listed = |home: &Path| -> Value {
        let all = ok_json(&cli(home, &["-j", "prog", "list"]));
        all.as_array()
            .and_then(|a| a.iter().find(|q| q["name"] == "count_launch").cloned())
            .unwrap_or_else(|| panic!("count_launch in {all}"))
    };
    assert!(
        listed(&home).get("run_cnt").is_none(),
        "prog list shows run statistics only once collected"
    );
    let procs = ps(&home, &["--stats=300ms"]);
    let p = entry(&procs, pid).expect("listed");
    let prog = &p["programs"][0];
    let runs = prog["run_cnt"].as_u64().expect("run_cnt");
    assert!(runs > 0, "{p}");
    assert!(prog["run_time_ns"].as_u64() > Some(0), "{p}");
    let calls = point(&p, "cuLaunchKernel")["calls"]
        .as_u64()
        .expect("calls");
    assert!(runs <= calls, "{runs} runs of {calls} calls");
    // `prog list` sums the live processes' statistics, as bpftool shows run_cnt/run_time_ns.
    let q = listed(&home);
    assert!(q["run_cnt"].as_u64() >= Some(runs), "{q}");
    assert!(q["run_time_ns"].as_u64() > Some(0), "{q}");
    let text = String::from_utf8_lossy(&cli(&home, &["prog", "list"]).stdout).into_owned();
    assert!(text.contains("run_cnt "), "{text}");
    let lines = release(child, &stop);
    let made: u64 = lines[0]
        .strip_prefix("launches ")
        .and_then(|n| n.parse().ok())
        .expect("launch total");
    assert!(made >= calls);
}

/// `GPUBPF_FAIL=closed`: the attach points of an object that cannot be built refuse every
/// call with CUDA_ERROR_NOT_PERMITTED (800) without reaching the driver, while the default
/// (open) lets them through unpoliced; with a registry that cannot be read every call is
/// refused.
#[test]
fn failing_closed_refuses_the_calls_a_broken_policy_was_meant_to_police() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    load(
        &home,
        &quota,
        &["--set", "limit_bytes=1000", "--set", "log_denials=0"],
    );
    corrupt(&home, "quota");
    let run = |mode: &str| {
        mock.command(&mock.app_link, &home)
            .env("GPUBPF_FAIL", mode)
            .env("GPUBPF_LOG", "warn")
            .args(["link", "quota", "2", "100"])
            .output()
            .expect("run")
    };
    let out = run("closed");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "alloc 0 800\nalloc 1 800\nmock alloc=0 free=0 launch=0 launch_ptsz=0 getinfo=0\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("refuse every call").count(), 1, "{err}");
    let out = run("open");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "alloc 0 0\nalloc 1 0\nfree 0\nretry 0\n\
         mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0\n"
    );
    // A registry that exists but cannot be read: nothing can be enforced, so nothing runs.
    std::fs::write(home.join("control"), b"not a control block").expect("corrupt control");
    let out = run("closed");
    assert!(!out.status.success(), "cuInit must have been refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("every CUDA call is refused"), "{err}");
}

/// A quota loaded with `--shadow` refuses nothing in a live process, and `gpubpf ps` shows
/// its program as shadow with the refusal it would have made counted.
#[test]
fn ps_shows_shadow_programs_and_what_they_would_have_denied() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    load(
        &home,
        &quota,
        &[
            "--shadow",
            "--set",
            "limit_bytes=50",
            "--set",
            "log_denials=0",
        ],
    );
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = spawn_piped(&mut mock.live(&home, &ready, &go, "100"));
    let pid = child.id();
    // The call is counted before its programs run: read `ps` once the first allocation has
    // returned (the application is ready), so that its shadow refusal is counted too.
    common::process::wait_for_files(&[&ready], "application never got ready");
    let p = wait_for(&home, pid, "its first allocation", |p| {
        p["attach_points"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["calls"] == 1))
    });
    let alloc = point(&p, "cuMemAlloc");
    assert_eq!(
        (&alloc["calls"], &alloc["denied"]),
        (&1.into(), &0.into()),
        "{p}"
    );
    let progs = p["programs"].as_array().expect("programs");
    let q = progs
        .iter()
        .find(|q| q["name"] == "quota_alloc")
        .unwrap_or_else(|| panic!("no quota_alloc in {p}"));
    assert_eq!(
        (&q["shadow"], &q["shadow_denied"]),
        (&true.into(), &1.into()),
        "{p}"
    );
    assert!(
        progs
            .iter()
            .filter(|q| q["name"] != "quota_alloc")
            .all(|q| q["shadow"] == true && q["shadow_denied"] == 0),
        "{p}"
    );
    let text = String::from_utf8_lossy(&cli(&home, &["ps"]).stdout).into_owned();
    assert!(
        text.contains("quota/quota_alloc  shadow, would deny 1"),
        "{text}"
    );
    assert_eq!(release(child, &go)[..2], ["before 0", "after 0"]);
}

#[test]
fn a_shims_watcher_removes_the_stats_files_short_lived_processes_left_behind() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let trace = policy(tmp.path(), "policies/trace.bpf.c");
    load(&home, &trace, &[]);
    // A process that exits before its watcher has freed the previous owner's stats file of
    // its slot leaves it as `.tmp-stale-PID-SLOT`; one of a live process stays (its own
    // watcher frees it).
    let procs = home.join("procs");
    let dead = procs.join(".tmp-stale-4194305-7");
    let live = procs.join(format!(".tmp-stale-{}-8", std::process::id()));
    std::fs::write(&dead, b"x").expect("write dead");
    std::fs::write(&live, b"x").expect("write live");
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = spawn_piped(&mut mock.live(&home, &ready, &go, "1000"));
    common::process::wait_for_files(&[&ready], "application never got ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while dead.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the watcher never removed {}",
            dead.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(live.exists(), "a live process's kept file is left to it");
    release(child, &go);
}
