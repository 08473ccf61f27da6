//! End to end: `gpubpf load --shadow` never changes a call's outcome, and `gpubpf audit`
//! shows each decision once, enforced or shadowed (issue #15, point 3). The applications
//! run on the mock CUDA stack of `tests/shim/`, started with `gpubpf run`.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::process::Reaped;
use common::shim::{session, MockStack, Session};
use serde_json::Value;

/// `gpubpf run -- app_link link ARGS…` on the mock stack; returns its pid and output
/// (asserting success).
fn run_app(mock: &MockStack, home: &Path, args: &[&str]) -> (u32, Output) {
    let child = mock
        .gpubpf_command(home)
        .args(["run", "--"])
        .arg(&mock.app_link)
        .arg("link")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gpubpf run");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for the application");
    assert!(
        out.status.success(),
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (pid, out)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The audit records as JSON (consumed).
fn audit(home: &Path) -> Vec<Value> {
    ok_json(&cli(home, &["-j", "audit"]))
        .as_array()
        .expect("array")
        .clone()
}

/// The `bpf_printk` lines quota wrote (one per refusal it decided), consumed.
fn trace_lines(home: &Path) -> usize {
    ok(&cli(home, &["trace"])).lines().count()
}

fn assert_decisions(records: &[Value], pid: u32, n: usize, shadow: bool) {
    assert_eq!(records.len(), n, "{records:#?}");
    for r in records {
        assert_eq!(r["pid"], pid, "{r}");
        assert_eq!(r["tid"], pid, "{r}");
        assert_eq!(r["api"], "cuMemAlloc", "{r}");
        assert_eq!(r["phase"], "entry", "{r}");
        assert_eq!(r["object"], "quota", "{r}");
        assert_eq!(r["program"], "quota_alloc", "{r}");
        assert_eq!(r["verdict"], 2, "{r}");
        assert_eq!(r["shadow"], shadow, "{r}");
    }
    let times: Vec<u64> = records
        .iter()
        .map(|r| r["time_ns"].as_u64().expect("time"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn shadow_quota_changes_no_outcome_and_audit_shows_each_decision_once() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("built");
    // Before anything ran: no registry, nothing to print.
    assert_eq!(ok(&cli(&home, &["audit"])), "");
    let q = quota.to_str().unwrap();
    let args = ["quota", "4", "100"];

    // Unpoliced (no registry yet): the reference output.
    let (_, plain) = run_app(mock, &home, &args);

    // Shadow at a tiny limit: the same output as unpoliced, every call succeeds...
    ok(&cli(
        &home,
        &["load", q, "--shadow", "--set", "limit_bytes=250"],
    ));
    let (pid, shadowed) = run_app(mock, &home, &args);
    assert_eq!(stdout(&shadowed), stdout(&plain));
    assert!(
        !stdout(&shadowed)
            .lines()
            .any(|l| l.starts_with("alloc") && !l.ends_with(" 0")),
        "{}",
        stdout(&shadowed)
    );
    // ...while the audit shows each refusal quota would have made (the ones it logged with
    // bpf_printk), once, as shadowed.
    let would = trace_lines(&home);
    // allocs 2 and 3: a shadowed refusal lets the call succeed but reserves nothing and its
    // exit records nothing, so usage stays what enforcement would allow and the retry after
    // the free fits.
    assert_eq!(would, 2, "quota decided {would} refusals");
    assert_decisions(&audit(&home), pid, would, true);
    assert!(audit(&home).is_empty(), "reading consumes");
    // `prog list` marks the object, `ps` counted the would-have-denied decisions.
    let list = ok_json(&cli(&home, &["-j", "prog", "list"]));
    assert!(
        list.as_array()
            .expect("array")
            .iter()
            .any(|p| p["object"] == "quota" && p["shadow"] == true),
        "{list:#}"
    );
    let text = ok(&cli(&home, &["prog", "list"]));
    assert!(text.contains("shadow"), "{text}");

    // Enforced: the refusals happen, and each is audited once with shadow=false.
    ok(&cli(&home, &["load", q, "--set", "limit_bytes=250"]));
    let (pid, enforced) = run_app(mock, &home, &args);
    let denied = stdout(&enforced)
        .lines()
        .filter(|l| l.starts_with("alloc") && l.ends_with(" 2"))
        .count()
        + stdout(&enforced)
            .lines()
            .filter(|l| *l == "retry 2")
            .count();
    assert_ne!(stdout(&enforced), stdout(&plain));
    // The shadow run predicted exactly these refusals: quota charges what it admits only.
    assert_eq!(denied, would);
    assert_eq!(trace_lines(&home), denied);
    assert_decisions(&audit(&home), pid, denied, false);
}

/// `audit -f -j` follows: one JSON object per line as decisions are made, across runs.
#[test]
fn audit_follow_prints_decisions_as_they_come() {
    use std::io::BufRead as _;
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("built");
    ok(&cli(
        &home,
        &["load", quota.to_str().unwrap(), "--set", "limit_bytes=250"],
    ));
    let mut follower = Reaped(
        Command::new(common::cli::gpubpf())
            .args(["-j", "audit", "-f"])
            .env("GPUBPF_HOME", &home)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run gpubpf audit -f"),
    );
    let stdout = follower.0.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    for run in 0..2 {
        let (pid, _) = run_app(mock, &home, &["quota", "3", "100"]);
        // 100 + 100 fit under 250, the third is refused: one decision per run.
        let l = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        let v: Value = serde_json::from_str(&l).expect("one JSON object per line");
        assert_decisions(std::slice::from_ref(&v), pid, 1, false);
        got.push(v);
    }
    drop(follower);
    assert!(rx.try_recv().is_err(), "no other decision");
    assert_eq!(got.len(), 2);
}
