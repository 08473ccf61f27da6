//! Child processes of the integration tests: reaping on drop, waiting for the files an
//! application creates when it is ready, and the Debian packages a test needs.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and reaps a child when dropped, so that a test failing halfway leaves no process
/// behind (a follower holding the test's stderr open would keep `cargo test` waiting).
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 60 s until every file of `paths` exists; `what` names the waiting in the
/// failure message (`the app never got ready`).
pub fn wait_for_files(paths: &[&Path], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !paths.iter().all(|p| p.exists()) {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether Debian package `name` is installed, installing it when missing
/// (`scripts/ensure-packages.sh`).
pub fn have_package(name: &str) -> bool {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-packages.sh");
    Command::new("bash")
        .arg(script)
        .arg(name)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `f` on another thread; fails the test if it does not finish within `limit` (a
/// lock that was never released or recovered) or fails itself.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "blocked for {limit:?} in {what}: a lock of a killed process was never recovered"
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("failed in {what}"),
    }
}
