//! System mode (issue #16 point 1, docs/security.md section 1): a node's registry owned by
//! its operator. Only the owner loads, replaces, unloads, sets globals, changes maps or
//! switches statistics on; every other user reads it, and their processes under the shim
//! run its policies with the maps the owner made usable (`rw`, `ro`, `none`).
//!
//! The tests run as root and act as a second user (`nobody`, uid 65534) through
//! `setpriv`; without root or `setpriv` they say so and skip.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gpubpf_runtime::registry::{Registry, RegistryError};
use serde_json::Value;

use common::cli::{gpubpf, ok as ok_ref, run_with_registry, wait_for_process, with_policies};
use common::process::wait_for_files;
use common::shim::{have_cc, mock_stack, shim_library, MockStack};

const NOBODY: u32 = 65534;
const NOT_OWNER: &str = "only its owner may";

/// Whether this test can act as two users; says why not.
fn two_users() -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: acting as a second user needs root");
        return false;
    }
    if !Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: setpriv (util-linux) not found");
        return false;
    }
    true
}

/// `setpriv` switching to `nobody` before running what follows.
fn setpriv_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ]);
    c
}

/// `program args…` run as `nobody`, with the registry at `home`.
fn as_nobody(program: &Path, home: &Path) -> Command {
    let mut c = setpriv_nobody();
    c.arg(program)
        .env("GPUBPF_HOME", home)
        .env_remove("GPUBPF_LOG")
        .env_remove("RUST_LOG");
    c
}

/// `gpubpf args…` as root (the owner) on the registry at `home`.
fn owner(home: &Path, args: &[&str]) -> Output {
    run_with_registry(home, args)
}

fn ok(o: Output) -> String {
    ok_ref(&o)
}

/// A directory everyone may traverse, holding a fresh system registry `sys` created by
/// root (`gpubpf registry init --system`).
fn system_registry() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = d.path().join("sys");
    let out = ok(Command::new(gpubpf())
        .args(["-j", "registry", "init", "--system", "--home"])
        .arg(&home)
        .output()
        .expect("run gpubpf"));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (v["mode"].as_str(), v["owner"].as_u64()),
        (Some("system"), Some(0)),
        "{v}"
    );
    (d, home)
}

/// [`system_registry`] with `quota` (built in `objects`, made readable to all) loaded by
/// the owner: 1500 bytes per process, refusals not logged.
fn system_registry_with_quota(objects: &Path, quota: &Path) -> (tempfile::TempDir, PathBuf) {
    std::fs::set_permissions(objects, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (d, home) = system_registry();
    let q = quota.to_str().expect("utf-8");
    ok(owner(
        &home,
        &[
            "load",
            q,
            "--set",
            "limit_bytes=1500",
            "--set",
            "log_denials=0",
        ],
    ));
    (d, home)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
}

#[test]
fn only_the_owner_changes_a_system_registry() {
    if !two_users() {
        return;
    }
    let Some((dir, _, [quota, trace])) =
        with_policies(["policies/quota.bpf.c", "policies/trace.bpf.c"])
    else {
        return;
    };
    let (_d, home) = system_registry_with_quota(dir.path(), &quota);
    let q = quota.to_str().expect("utf-8");
    // The layout: what applications may use, and nothing writable by them but procs/.
    assert_eq!(mode(&home), 0o755);
    assert_eq!(mode(&home.join("control")), 0o644);
    assert_eq!(mode(&home.join("procs")), 0o1777);
    assert_eq!(mode(&home.join("procs/table")), 0o666);
    assert_eq!(
        mode(&home.join("maps/proc_usage")),
        0o666,
        "counters: rw by default"
    );
    assert_eq!(
        mode(&home.join("maps/quota.rodata")),
        0o644,
        ".rodata: ro by default"
    );
    assert_eq!(mode(&home.join("progs/quota/object.o")), 0o644);
    let generation = Registry::open(&home).expect("open").generation();

    let nobody = |args: &[&str]| {
        as_nobody(&gpubpf(), &home)
            .args(args)
            .output()
            .expect("run")
    };
    let show: Value = serde_json::from_str(&ok(nobody(&["-j", "registry", "show"]))).expect("json");
    assert_eq!(show["may_change"], false, "{show}");
    let show: Value =
        serde_json::from_str(&ok(owner(&home, &["-j", "registry", "show"]))).expect("json");
    assert_eq!(show["may_change"], true, "{show}");

    // Everything that changes the registry, or asks processes for something, is refused.
    let t = trace.to_str().expect("utf-8");
    for args in [
        vec!["load", t],
        vec!["load", q, "--name", "quota", "--set", "limit_bytes=1TiB"],
        vec!["unload", "quota"],
        vec!["prog", "unload", "quota"],
        vec![
            "maps",
            "update",
            "quota_limits",
            "--key",
            "0",
            "--value",
            "0",
        ],
        vec!["maps", "delete", "proc_usage", "--key", "1"],
        vec!["maps", "clear", "proc_usage"],
        vec!["maps", "access", "proc_usage", "rw"],
        vec!["maps", "pin", "proc_usage"],
        vec!["maps", "rm", "proc_usage", "--force"],
        vec!["maps", "consume", "trace"],
        vec!["ps", "--stats", "10ms"],
        vec!["trace"],
        vec!["audit"],
    ] {
        let o = nobody(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(NOT_OWNER), "{args:?}: {err}");
    }
    assert_eq!(
        Registry::open(&home).expect("open").generation(),
        generation
    );
    // Reading works.
    let progs: Value = serde_json::from_str(&ok(nobody(&["-j", "prog", "list"]))).expect("json");
    assert_eq!(progs.as_array().map(Vec::len), Some(25), "{progs}");
    let limits = ok(nobody(&["maps", "dump", "quota.rodata"]));
    assert!(limits.contains("1500"), "{limits}");
    // Declared `none`: the map is not even readable by other users.
    ok(owner(&home, &["maps", "access", "quota_allocs", "none"]));
    let o = nobody(&["maps", "dump", "quota_allocs"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The mock stack made reachable by `nobody`; `None` (after saying why) when the
/// checkout's directories are not traversable by other users.
fn mock_for_nobody(home: &Path) -> Option<&'static MockStack> {
    if !have_cc() {
        eprintln!("skipped: cc not found");
        return None;
    }
    let mock = mock_stack();
    std::fs::set_permissions(&mock.dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let shim = shim_library();
    let probe = setpriv_nobody()
        .args(["test", "-r"])
        .arg(&shim)
        .arg("-a")
        .arg("-x")
        .arg(&mock.app_link)
        .arg("-a")
        .arg("-r")
        .arg(home.join("control"))
        .status()
        .expect("run setpriv");
    if !probe.success() {
        eprintln!("skipped: the checkout's target directory is not readable by other users");
        return None;
    }
    Some(mock)
}

/// `app_link link ARGS…` under the shim, as `nobody`.
fn app_as_nobody(mock: &MockStack, home: &Path) -> Command {
    let mut c = as_nobody(&mock.app_link, home);
    c.arg("link")
        .env("LD_PRELOAD", shim_library())
        .env("GPUBPF_CUDA_LIBRARY", &mock.libcuda)
        .env("LD_LIBRARY_PATH", &mock.dir);
    c
}

fn lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn other_users_processes_run_the_owners_policy_with_the_declared_map_access() {
    if !two_users() {
        return;
    }
    let Some((dir, _, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let (d, home) = system_registry_with_quota(dir.path(), &quota);
    let Some(mock) = mock_for_nobody(&home) else {
        return;
    };

    // The operator's quota holds in nobody's process: the second 1000-byte allocation
    // crosses 1500 and is refused with CUDA_ERROR_OUT_OF_MEMORY.
    let o = app_as_nobody(mock, &home)
        .args(["quota", "3", "1000"])
        .output()
        .expect("run app");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(lines(&o)[..3], ["alloc 0 0", "alloc 1 2", "alloc 2 2"]);

    // Root's system registry has a verification cache only root writes: the load recorded
    // quota's 25 programs, nobody's process took them all from it and recorded nothing
    // (`program::verify_cache`).
    let cache = home.join("verified");
    assert_eq!(mode(&cache), 0o755);
    assert_eq!(std::fs::symlink_metadata(&cache).expect("stat").uid(), 0);
    let entries = || -> Vec<u32> {
        std::fs::read_dir(&cache)
            .expect("list the cache")
            .map(|e| mode(&e.expect("entry").path()))
            .collect()
    };
    assert_eq!(entries(), vec![0o644; 25]);
    let o = app_as_nobody(mock, &home)
        .args(["quota", "1", "1000"])
        .env("GPUBPF_LOG", "info")
        .output()
        .expect("run app");
    let err = String::from_utf8_lossy(&o.stderr);
    let published = err
        .lines()
        .find(|l| l.contains("policies published"))
        .unwrap_or_else(|| panic!("no build logged: {err}"));
    assert!(published.contains("verified=0 cached=25"), "{published}");
    assert_eq!(entries().len(), 25);

    // A live process of nobody: listed for the owner with its user and counts, its stats
    // file its own.
    let (ready, go) = (d.path().join("ready"), d.path().join("go"));
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let child = app_as_nobody(mock, &home)
        .arg("live")
        .arg(&ready)
        .arg(&go)
        .arg("1000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    wait_for_files(&[&ready], "application never got ready");
    let p = wait_for_process(&home, pid, "its registration", |_| true);
    assert_eq!(p["uid"], NOBODY, "{p}");
    assert_eq!(p["user"], "nobody", "{p}");
    assert!(p.get("stats_missing").is_none(), "{p}");
    let stats: Vec<_> = std::fs::read_dir(home.join("procs"))
        .expect("list procs")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(&format!(".{NOBODY}"))
        })
        .collect();
    assert!(!stats.is_empty(), "no stats file of uid {NOBODY}");
    for e in stats {
        assert_eq!(e.metadata().expect("stat").uid(), NOBODY);
    }
    // The owner collects run statistics for a moment (a deadline in the control block,
    // which nobody's process maps read-only: it must read the switch, never write it, not
    // even to clear an expired deadline at its next call).
    let stats: serde_json::Value =
        serde_json::from_str(&ok(owner(&home, &["-j", "ps", "--stats=100ms"]))).expect("json");
    assert!(
        stats
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["pid"] == pid)),
        "{stats}"
    );
    // The owner declares the usage counters read-only for applications: quota writes
    // them, so its programs are rejected in nobody's process when it rebuilds, which
    // fails open (the next allocation is not refused) and says why in `ps`.
    ok(owner(&home, &["maps", "access", "proc_usage", "ro"]));
    let p = wait_for_process(&home, pid, "the failed object", |p| {
        p["failed_objects"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    });
    let why = p["failed_objects"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        why.contains("read-only to programs") && why.contains("proc_usage"),
        "{p}"
    );
    std::fs::write(&go, b"").expect("create go");
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(lines(&o)[..2], ["before 0", "after 0"]);

    // Declared `none`: the object cannot run there either; failing closed, the points it
    // polices refuse every call (CUDA_ERROR_NOT_PERMITTED).
    ok(owner(&home, &["maps", "access", "proc_usage", "none"]));
    let o = app_as_nobody(mock, &home)
        .env("GPUBPF_FAIL", "closed")
        .args(["quota", "1", "10"])
        .output()
        .expect("run app");
    assert_eq!(lines(&o).first().map(String::as_str), Some("alloc 0 800"));
    // The owner's own processes are unaffected by the access of applications.
    ok(owner(&home, &["maps", "access", "proc_usage", "rw"]));
}

#[test]
fn a_system_registry_not_owned_by_root_has_no_verification_cache() {
    if !two_users() {
        return;
    }
    let Some((dir, _, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let home = d.path().join("sys");
    let runs = setpriv_nobody()
        .args(["test", "-x"])
        .arg(gpubpf())
        .status()
        .expect("run setpriv");
    if !runs.success() {
        eprintln!("skipped: the checkout's target directory is not readable by other users");
        return;
    }
    let as_owner = |args: &[&str]| {
        let o = as_nobody(&gpubpf(), &home)
            .args(args)
            .output()
            .expect("run gpubpf as nobody");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    as_owner(&[
        "registry",
        "init",
        "--system",
        "--home",
        home.to_str().expect("utf-8"),
    ]);
    as_owner(&[
        "load",
        quota.to_str().expect("utf-8"),
        "--set",
        "limit_bytes=1500",
        "--set",
        "log_denials=0",
    ]);
    // Trusting nobody's verification would let nobody run unverified code in root's (or
    // anyone's) processes: no cache is written, none is read.
    assert!(!home.join("verified").exists());
    let Some(mock) = mock_for_nobody(&home) else {
        return;
    };
    let o = mock
        .command(&mock.app_link, &home)
        .args(["link", "quota", "3", "1000"])
        .env("GPUBPF_LOG", "info")
        .output()
        .expect("run app");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        lines(&o)[..3],
        ["alloc 0 0", "alloc 1 2", "alloc 2 2"],
        "{err}"
    );
    let published = err
        .lines()
        .find(|l| l.contains("policies published"))
        .unwrap_or_else(|| panic!("no build logged: {err}"));
    assert!(!published.contains("cached="), "{published}");
    assert!(!home.join("verified").exists());
}

#[test]
fn a_tampered_system_registry_is_refused() {
    if !two_users() {
        return;
    }
    let (_d, home) = system_registry();
    let refused = |what: &str| match Registry::open(&home) {
        Err(e @ RegistryError::Insecure { .. }) => {
            let m = e.to_string();
            assert!(m.contains(what), "{m}");
        }
        Err(e) => panic!("expected an insecure-registry error, got: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let chmod = |p: &str, m: u32| {
        std::fs::set_permissions(home.join(p), std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    let chown = |p: &str, uid: u32| {
        let c = std::ffi::CString::new(home.join(p).to_str().expect("utf-8")).expect("path");
        // SAFETY: a valid path; changing the owner of our own scratch file.
        assert_eq!(unsafe { libc::lchown(c.as_ptr(), uid, u32::MAX) }, 0);
    };
    Registry::open(&home).expect("a fresh system registry opens");
    chmod("maps", 0o777);
    refused("writable by group or others");
    chmod("maps", 0o755);
    chmod("procs", 0o777);
    refused("sticky bit");
    chmod("procs", 0o1777);
    chmod("control", 0o666);
    refused("writable by group or others");
    chmod("control", 0o644);
    chown("progs", NOBODY);
    refused("owned by uid 65534");
    chown("progs", 0);
    chown("procs/table", NOBODY);
    refused("not a regular file of the registry's owner");
    chown("procs/table", 0);
    Registry::open(&home).expect("restored");
    // A marker that is a link does not make a system registry: the directory is then
    // judged as a user registry, and refused as one (owned by root, readable by all).
    std::fs::remove_file(home.join("system")).expect("rm");
    std::os::unix::fs::symlink("/etc/hostname", home.join("system")).expect("ln");
    let o = as_nobody(&gpubpf(), &home)
        .args(["prog", "list"])
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refusing to use registry directory"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
