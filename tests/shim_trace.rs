//! End to end: `bpf_printk` in policed processes goes to the registry's trace ring, and
//! `gpubpf trace [-f]` / `gpubpf maps consume trace` read it (issue #14, point 5). The
//! applications run on the mock CUDA stack of `tests/shim/`, started with `gpubpf run`.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::process::Reaped;
use common::shim::{session, MockStack, Session};

/// `gpubpf run -- app_link link ARGS…` on the mock stack, started (with
/// `GPUBPF_TRACE_STDERR=1` when `trace_stderr`); the child's pid is the application's
/// (`gpubpf run` replaces itself with it).
fn start_app(mock: &MockStack, home: &Path, trace_stderr: bool, args: &[&str]) -> Child {
    let mut cmd = mock.gpubpf_command(home);
    if trace_stderr {
        cmd.env("GPUBPF_TRACE_STDERR", "1");
    }
    cmd.args(["run", "--"])
        .arg(&mock.app_link)
        .arg("link")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("run gpubpf run")
}

/// Waits for an application started with [`start_app`]; asserts that it succeeded.
fn finish(child: Child) -> Output {
    let out = child.wait_with_output().expect("wait for the application");
    assert!(
        out.status.success(),
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `comm-tid [pid] seconds: ` prefix and the message of a trace line.
fn split(line: &str) -> (String, u32, u32, String) {
    let (head, message) = line.split_once(": ").expect("`: ` after the time");
    let (task, rest) = head.split_once(" [").expect("` [pid]`");
    let (comm, tid) = task.rsplit_once('-').expect("comm-tid");
    let (pid, time) = rest.split_once("] ").expect("`] ` before the time");
    let (s, us) = time.split_once('.').expect("seconds.micros");
    assert!(
        s.parse::<u64>().is_ok() && us.len() == 6 && us.parse::<u32>().is_ok(),
        "time `{time}` in `{line}`"
    );
    (
        comm.to_string(),
        tid.parse().expect("tid"),
        pid.parse().expect("pid"),
        message.to_string(),
    )
}

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_owned).collect()
}

#[test]
fn printk_lines_of_a_policed_process_reach_gpubpf_trace_with_its_pid() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("built");
    // Before anything ran: no registry, nothing to print (and none is created).
    assert_eq!(ok(&cli(&home, &["trace"])), "");
    assert_eq!(
        ok_json(&cli(&home, &["-j", "trace"])),
        serde_json::json!([])
    );
    assert!(!home.exists());
    ok(&cli(
        &home,
        &["load", quota.to_str().unwrap(), "--set", "limit_bytes=250"],
    ));
    // `maps consume trace` before any process ran: an empty ring, not an error.
    assert_eq!(ok(&cli(&home, &["maps", "consume", "trace"])), "");
    let generation = ok_json(&cli(&home, &["-j", "prog", "list"]));
    // Four allocations of 100 bytes under a 250-byte limit: the third and fourth are
    // denied, and quota.bpf.c logs each denial with bpf_printk.
    let app = start_app(mock, &home, false, &["quota", "4", "100"]);
    let pid = app.id();
    let out = finish(app);
    assert_eq!(
        lines(&String::from_utf8_lossy(&out.stdout)),
        [
            "alloc 0 0",
            "alloc 1 0",
            "alloc 2 2",
            "alloc 3 2",
            "free 0",
            "retry 0",
            "mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    // Not on the application's stderr unless asked for.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("quota:"), "{stderr}");
    // The ring's creation changed no policy state (no generation bump).
    assert_eq!(ok_json(&cli(&home, &["-j", "prog", "list"])), generation);
    let text = ok(&cli(&home, &["trace"]));
    let got = lines(&text);
    assert_eq!(got.len(), 2, "{text}");
    for l in &got {
        assert_eq!(
            split(l),
            (
                "app_link".to_string(),
                pid,
                pid,
                format!("quota: pid {pid} denied 100 bytes (process limit)")
            ),
            "{l}"
        );
    }
    // Reading consumes, as trace_pipe does.
    assert_eq!(ok(&cli(&home, &["trace"])), "");

    // With GPUBPF_TRACE_STDERR=1 the lines go to stderr as well; `-j trace` and
    // `maps consume trace` read the ring too.
    let again = |trace_stderr: bool| {
        let app = start_app(mock, &home, trace_stderr, &["quota", "3", "100"]);
        let pid = app.id();
        (pid, finish(app))
    };
    let (pid, out) = again(true);
    let want = format!("quota: pid {pid} denied 100 bytes (process limit)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let on_stderr: Vec<&str> = stderr.lines().filter(|l| l.contains("quota:")).collect();
    assert_eq!(on_stderr.len(), 1, "{stderr}");
    assert_eq!(split(on_stderr[0]).3, want);
    let j = ok_json(&cli(&home, &["-j", "trace"]));
    let j = j.as_array().expect("array");
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(j[0]["pid"], pid);
    assert_eq!(j[0]["tid"], pid);
    assert_eq!(j[0]["comm"], "app_link");
    assert_eq!(j[0]["message"], want.as_str());
    assert_eq!(j[0]["line"], on_stderr[0]);
    let (pid, _) = again(false);
    let consumed = ok(&cli(&home, &["maps", "consume", "trace"]));
    assert_eq!(lines(&consumed).len(), 1, "{consumed}");
    assert_eq!(
        split(consumed.trim_end()).3,
        format!("quota: pid {pid} denied 100 bytes (process limit)")
    );
}

#[test]
fn trace_follow_prints_each_threads_lines_as_they_come() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let printk =
        common::cli::build_policy(tmp.path(), "tests/shim/printk_tid.bpf.c").expect("built");
    // `-f` opens (creates) the ring before any process ran, in the registry `load` made.
    ok(&cli(&home, &["load", printk.to_str().unwrap()]));
    let mut follower = Reaped(
        Command::new(common::cli::gpubpf())
            .args(["trace", "-f"])
            .env("GPUBPF_HOME", &home)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .spawn()
            .expect("run gpubpf trace -f"),
    );
    let stdout = follower.0.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // Three threads, two launches each: six lines, each printed by its own thread.
    let app = start_app(mock, &home, false, &["threads", "3", "2"]);
    let pid = app.id();
    finish(app);
    let mut got = Vec::new();
    while got.len() < 6 {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => got.push(l),
            Err(e) => panic!("after {got:?}: {e}"),
        }
    }
    // Still following: a second run's lines arrive too.
    let app = start_app(mock, &home, false, &["threads", "1", "1"]);
    let pid2 = app.id();
    finish(app);
    let last = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the second run's line");
    drop(follower);
    let mut tids = std::collections::BTreeMap::new();
    for l in &got {
        let (comm, tid, p, message) = split(l);
        assert_eq!((comm.as_str(), p), ("app_link", pid), "{l}");
        assert_eq!(message, format!("launch by tid {tid} of pid {pid}"), "{l}");
        *tids.entry(tid).or_insert(0) += 1;
    }
    assert_eq!(tids.len(), 3, "{got:?}");
    assert!(tids.values().all(|&n| n == 2), "{got:?}");
    assert!(
        !tids.contains_key(&pid),
        "launched by the main thread: {got:?}"
    );
    let (_, tid, p, message) = split(&last);
    assert_eq!(p, pid2);
    assert_eq!(message, format!("launch by tid {tid} of pid {pid2}"));
}
