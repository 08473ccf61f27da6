//! Binaries of the `gpubpf-loader-cli` package, for end-to-end tests.
//!
//! They belong to another package, so `CARGO_BIN_EXE_*` is not available: each is built once
//! per test process with `cargo build -p gpubpf-loader-cli --bin NAME` (a no-op when it is up
//! to date) into the target directory of the running test executable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Path of the `gpubpf` binary.
pub fn gpubpf() -> PathBuf {
    binary("gpubpf")
}

/// Path of binary `name` of `gpubpf-loader-cli`, next to this test executable's profile
/// directory; built on first use.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let profile_dir = cargo_build(&["-p", "gpubpf-loader-cli", "--bin", name]);
    let bin = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} missing after cargo build", bin.display());
    built.insert(name.to_string(), bin.clone());
    bin
}

/// Runs `cargo build --quiet ARGS` (a no-op when up to date) for the profile and into the
/// target directory of the running test executable; returns that profile directory
/// (`target/<profile>`), where the built artifacts lie. Panics when the build fails.
pub fn cargo_build(args: &[&str]) -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory")
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(t) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", t);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "cargo build {args:?} failed");
    profile_dir
}

/// Runs `gpubpf ARGS` with its registry at `registry` (`GPUBPF_HOME`) and without `RUST_LOG`.
pub fn run_with_registry(registry: &Path, args: &[&str]) -> Output {
    Command::new(gpubpf())
        .args(args)
        .env("GPUBPF_HOME", registry)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpubpf")
}

/// Stdout of a command that must have succeeded (the assertion shows both streams).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// `gpubpf build SRC -o OBJ --cache-dir CACHE`; false (after saying that the test skipped)
/// when clang is missing, a failed assertion on any other build failure.
pub fn build_object(src: &Path, obj: &Path, cache: &Path) -> bool {
    let build = Command::new(gpubpf())
        .arg("build")
        .arg(src)
        .arg("-o")
        .arg(obj)
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .expect("run gpubpf build");
    if !build.status.success() {
        let err = String::from_utf8_lossy(&build.stderr);
        assert!(err.contains("clang not found"), "build failed: {err}");
        eprintln!("skipped: clang not found (scripts/test.sh installs it)");
        return false;
    }
    true
}

/// Builds `src` (relative to the repository, `NAME.bpf.c`) into `dir/NAME.o` with
/// [`build_object`] (cache `dir/cache`); `None` (after saying so) without clang.
pub fn build_policy(dir: &Path, src: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let stem = src
        .file_name()
        .and_then(|n| n.to_str())
        .expect("utf-8 file name")
        .replace(".bpf.c", "");
    let obj = dir.join(format!("{stem}.o"));
    build_object(&src, &obj, &dir.join("cache")).then_some(obj)
}

/// A scratch directory (keep it alive: the rest lies in it), the path of a registry in it
/// (`reg`, not created) and the objects built from `srcs` with [`build_policy`], in order;
/// `None` (after saying so) without clang.
pub fn with_policies<const N: usize>(
    srcs: [&str; N],
) -> Option<(tempfile::TempDir, PathBuf, [PathBuf; N])> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut objs = Vec::with_capacity(N);
    for src in srcs {
        objs.push(build_policy(dir.path(), src)?);
    }
    let home = dir.path().join("reg");
    Some((dir, home, objs.try_into().expect("one object a source")))
}

/// The JSON stdout of a command that must have succeeded.
pub fn ok_json(out: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(out)).expect("JSON output")
}

/// Whether `clang` or `clang-19` runs (the tests that compile C skip without it, saying so;
/// `scripts/test.sh` installs it).
pub fn have_clang() -> bool {
    ["clang", "clang-19"].iter().any(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// `gpubpf -j ps EXTRA…` on the registry at `home`: the processes it lists.
pub fn ps_json(home: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["-j", "ps"];
    args.extend(extra);
    ok_json(&run_with_registry(home, &args))
        .as_array()
        .expect("array")
        .clone()
}

/// The entry of `pid` among processes `procs` listed by `gpubpf ps`.
pub fn ps_entry(procs: &[serde_json::Value], pid: u32) -> Option<serde_json::Value> {
    procs.iter().find(|p| p["pid"] == pid).cloned()
}

/// Polls `gpubpf ps` (60 s at most) until `pid` is listed and `ready` holds for its entry;
/// `what` names the wait in the failure message.
pub fn wait_for_process(
    home: &Path,
    pid: u32,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(p) = ps_entry(&ps_json(home, &[]), pid) {
            if ready(&p) {
                return p;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never showed {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
