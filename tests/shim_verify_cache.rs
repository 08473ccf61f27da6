//! The verification cache of a user registry (`gpubpf_runtime::program::verify_cache`)
//! end to end: `gpubpf load` records what it verified, processes under the shim take it
//! from there and decide exactly as when they verify themselves, a process that had to
//! verify records what it verified, and a cache that is off or not private is not used.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::cli::{gpubpf, ok};
use common::shim::{session, Session};

/// The quota's 25 programs, each linked once.
const QUOTA_PROGRAMS: usize = 25;

/// `gpubpf ARGS…` on the registry at `home`, the cache left on whatever the environment.
fn cli(home: &Path, args: &[&str]) -> Output {
    Command::new(gpubpf())
        .args(args)
        .env("GPUBPF_HOME", home)
        .env_remove("GPUBPF_VERIFY_CACHE")
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpubpf")
}

/// Builds `policies/quota.bpf.c` and loads it into the session's registry with a limit of
/// 350 bytes (the cache left on whatever the environment).
fn load_quota(s: &Session) {
    let quota = common::cli::build_policy(s.tmp.path(), "policies/quota.bpf.c")
        .expect("clang present: policy built");
    ok(&cli(
        &s.home,
        &[
            "load",
            quota.to_str().expect("utf-8 path"),
            "--set",
            "limit_bytes=350",
            "--set",
            "log_denials=0",
        ],
    ));
}

/// The entries of the cache at `home`.
fn entries(home: &Path) -> usize {
    std::fs::read_dir(home.join("verified"))
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

/// `app_link link quota 5 100` under the shim with `GPUBPF_LOG=info` (and `env`): its
/// output lines and the log line of its build.
fn run_quota(s: &Session, env: &[(&str, &str)]) -> (Vec<String>, String) {
    let mut cmd = s.mock.command(&s.mock.app_link, &s.home);
    cmd.args(["link", "quota", "5", "100"])
        .env("GPUBPF_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run app");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let published = err
        .lines()
        .find(|l| l.contains("policies published"))
        .unwrap_or_else(|| panic!("no build logged: {err}"))
        .to_string();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("alloc"))
        .map(str::to_owned)
        .collect();
    (lines, format!("{published}\n{err}"))
}

/// Three allocations of 100 fit in 350 bytes, the fourth is refused (2: out of memory).
const DECISIONS: [&str; 5] = [
    "alloc 0 0",
    "alloc 1 0",
    "alloc 2 0",
    "alloc 3 2",
    "alloc 4 2",
];

#[test]
fn processes_of_the_user_take_what_load_verified_and_decide_the_same() {
    let Some(s) = session() else {
        return;
    };
    load_quota(&s);
    assert_eq!(
        entries(&s.home),
        QUOTA_PROGRAMS,
        "load records each program"
    );
    let mode = std::fs::metadata(s.home.join("verified"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    // Every program answered from the cache, and the quota decides as always.
    let (lines, log) = run_quota(&s, &[]);
    assert_eq!(lines, DECISIONS, "{log}");
    assert!(
        log.contains(&format!("verified=0 cached={QUOTA_PROGRAMS}")),
        "{log}"
    );

    // Turned off: verified in the process, same decisions.
    let (lines, log) = run_quota(&s, &[("GPUBPF_VERIFY_CACHE", "off")]);
    assert_eq!(lines, DECISIONS, "{log}");
    let published = log.lines().next().expect("published line");
    assert!(!published.contains("cached="), "{published}");

    // Emptied: the next process verifies everything and records it for the one after.
    std::fs::remove_dir_all(s.home.join("verified")).expect("remove the cache");
    let (lines, log) = run_quota(&s, &[]);
    assert_eq!(lines, DECISIONS, "{log}");
    assert!(
        log.contains(&format!("verified={QUOTA_PROGRAMS} cached=0")),
        "{log}"
    );
    assert_eq!(entries(&s.home), QUOTA_PROGRAMS);
    let (_, log) = run_quota(&s, &[]);
    assert!(
        log.contains(&format!("verified=0 cached={QUOTA_PROGRAMS}")),
        "{log}"
    );

    // A corrupt entry is one miss: that program is verified again, the others are not.
    let first = std::fs::read_dir(s.home.join("verified"))
        .expect("list")
        .flatten()
        .next()
        .expect("an entry")
        .path();
    std::fs::write(&first, "gpubpf-verified 1\nunreached=").expect("corrupt an entry");
    let (lines, log) = run_quota(&s, &[]);
    assert_eq!(lines, DECISIONS, "{log}");
    assert!(
        log.contains(&format!("verified=1 cached={}", QUOTA_PROGRAMS - 1)),
        "{log}"
    );
}

#[test]
fn a_cache_others_may_write_is_ignored() {
    let Some(s) = session() else {
        return;
    };
    load_quota(&s);
    let dir = s.home.join("verified");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (lines, log) = run_quota(&s, &[]);
    assert_eq!(lines, DECISIONS, "{log}");
    let published = log.lines().next().expect("published line");
    assert!(!published.contains("cached="), "{published}");
    assert!(log.contains("verification cache ignored"), "{log}");
}
