//! The built `gpubpf` binary, for end-to-end tests.
//!
//! The binary belongs to another package, so `CARGO_BIN_EXE_*` is not available: it is built
//! once per test process with `cargo build -p gpubpf-loader-cli --bin gpubpf` (a no-op when
//! it is up to date) into the target directory of the running test executable.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Path of the `gpubpf` binary next to this test executable's profile directory.
pub fn gpubpf() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // target/debug/deps/<test>-<hash> -> target/debug
            let exe = std::env::current_exe().expect("test executable path");
            let profile_dir = exe
                .parent()
                .and_then(|d| d.parent())
                .expect("target profile directory")
                .to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args([
                "build",
                "--quiet",
                "-p",
                "gpubpf-loader-cli",
                "--bin",
                "gpubpf",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            if let Some(t) = profile_dir.parent() {
                cmd.env("CARGO_TARGET_DIR", t);
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build of gpubpf failed");
            let bin = profile_dir.join("gpubpf");
            assert!(bin.is_file(), "{} missing after cargo build", bin.display());
            bin
        })
        .clone()
}
