//! `gpubpf top` in a real terminal: a detached tmux session (its own server socket) runs
//! it while a mock-stack app under the shim is live; `capture-pane` shows the app's pid
//! with its GPU memory from the quota's `proc_usage`, its attach point counts and the
//! quota program's run count (collected because top switched statistics on); sort keys
//! change the header, and `q` exits with status 0.
//!
//! Needs `cc`, clang and tmux (installed by scripts/ensure-packages.sh when missing);
//! prints `skipped: …` without them.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cli::{gpubpf, ok_json, run_with_registry as cli};
use common::process::{have_package, Reaped};
use common::shim::{session, Session};

/// A tmux server of the test's own (`-L NAME`), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Captures the pane until `ok` holds (60 s at most).
    fn until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn keys(&self, keys: &str) {
        let out = self.run(&["send-keys", "-t", "top", keys]);
        assert!(out.status.success(), "{out:?}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The whitespace-separated words of the first line holding `needle`.
fn words_of(screen: &str, needle: &str) -> Vec<String> {
    line_where(screen, |l| l.contains(needle))
}

fn line_where(screen: &str, pick: impl Fn(&str) -> bool) -> Vec<String> {
    screen
        .lines()
        .find(|l| pick(l))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[test]
fn top_shows_a_live_app_its_counts_and_memory_sorts_and_quits_on_q() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    if !have_package("tmux") {
        eprintln!("skipped: tmux is not installed and could not be installed");
        return;
    }
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("built");
    let q = quota.to_str().expect("utf-8");
    ok_json(&cli(
        &home,
        &[
            "-j",
            "load",
            q,
            "--set",
            "limit_bytes=1000",
            "--set",
            "log_denials=0",
        ],
    ));
    let tmux = Tmux {
        socket: format!("gpubpf-top-test-{}", std::process::id()),
    };
    let command = format!(
        "GPUBPF_HOME='{}' '{}' top; echo TOP-EXITED rc=$?; sleep 60",
        home.display(),
        gpubpf().display()
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "180",
        "-y",
        "40",
        "-s",
        "top",
        &command,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    // Top runs (and has switched run statistics on) before the app starts.
    tmux.until("an empty node", |s| {
        s.contains("gpubpf top  processes 0") && s.contains("memory from map proc_usage")
    });

    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let app = Reaped(
        mock.live(&home, &ready, &go, "100")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the app"),
    );
    let pid = app.0.id().to_string();
    let s = tmux.until("the app with its allocation", |s| {
        s.contains("cuMemAlloc  calls 1  denied 0")
            && words_of(s, "cuMemAlloc entry").get(4).map(String::as_str) == Some("1")
    });
    let row = line_where(&s, |l| l.split_whitespace().next() == Some(pid.as_str()));
    assert_eq!(row.first(), Some(&pid), "no row for {pid}:\n{s}");
    assert_eq!(
        row.get(2).map(String::as_str),
        Some("100B"),
        "memory of {pid}:\n{s}"
    );
    assert!(s.contains("processes 1"), "{s}");
    assert!(s.contains("quota/"), "{s}");
    // Only attach points that saw calls are listed.
    assert!(!s.contains("cuMemFree  calls 0"), "{s}");

    // A second app launching without pause: calls/s and runs/s of its attach point grow,
    // and the default sort (calls/s) lists it first.
    let count =
        common::cli::build_policy(tmp.path(), "tests/shim/count_launch.bpf.c").expect("built");
    ok_json(&cli(&home, &["-j", "load", count.to_str().expect("utf-8")]));
    let stop = tmp.path().join("stop");
    let hammer = Reaped(
        mock.command(&mock.app_link, &home)
            .args(["link", "hammer", "1"])
            .arg(&stop)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the hammer"),
    );
    let busy = hammer.0.id().to_string();
    let rate_of = |s: &str, needle: &str, col: usize| -> f64 {
        words_of(s, needle)
            .get(col)
            .and_then(|w| w.parse().ok())
            .unwrap_or(0.0)
    };
    let s = tmux.until("launches per second", |s| {
        rate_of(s, "cuLaunchKernel  calls", 0) > 0.0
            && rate_of(s, "count_launch/count_launch", 5) > 0.0
    });
    let first_pid = |s: &str| -> Option<String> {
        s.lines()
            .skip_while(|l| !l.starts_with("PID "))
            .nth(1)
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
    };
    assert_eq!(first_pid(&s), Some(busy.clone()), "busiest first:\n{s}");

    tmux.keys("m");
    let s = tmux.until("the memory sort", |s| s.contains("sort: memory "));
    assert_eq!(first_pid(&s), Some(pid.clone()), "most memory first:\n{s}");
    tmux.keys("m");
    let s = tmux.until("the reversed sort", |s| {
        s.contains("sort: memory (reversed)")
    });
    assert_eq!(first_pid(&s), Some(busy), "least memory first:\n{s}");
    std::fs::write(&stop, b"").expect("create stop");
    drop(hammer);
    tmux.keys("q");
    tmux.until("top's exit", |s| s.contains("TOP-EXITED rc=0"));
    std::fs::write(&go, b"").expect("create go");
    drop(app);
}
