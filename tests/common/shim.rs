//! The shim (`libgpubpf.so`) and the mock CUDA stack of `tests/shim/`, built for end-to-end
//! tests: the shim with cargo into the running test's target directory, the mock driver and
//! the test applications with the system C compiler (`cc`) into a directory kept for the
//! test process (under `CARGO_TARGET_TMPDIR`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of `libgpubpf.so`, built on first use (`cargo build -p gpubpf-shim`, a no-op when up
/// to date) in the profile of the running test executable.
pub fn shim_library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let profile_dir = super::cli::cargo_build(&["-p", "gpubpf-shim"]);
            let lib = profile_dir.join("libgpubpf.so");
            assert!(lib.is_file(), "{} missing after cargo build", lib.display());
            lib
        })
        .clone()
}

/// The built mock stack.
#[derive(Debug)]
pub struct MockStack {
    /// Directory holding `libcuda.so.1` (put it on `LD_LIBRARY_PATH`).
    pub dir: PathBuf,
    /// The mock driver.
    pub libcuda: PathBuf,
    /// `app.c` linked against the mock driver (route `link`).
    pub app_link: PathBuf,
    /// `app.c` without a link to the driver (routes `dlsym` and `proc`).
    pub app_dyn: PathBuf,
    /// `next.c`: prints what `dlsym(RTLD_NEXT, "whoami")` from liba.so finds.
    pub next: PathBuf,
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the mock driver and the applications once per test process.
pub fn mock_stack() -> &'static MockStack {
    static STACK: OnceLock<MockStack> = OnceLock::new();
    STACK.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shim");
        // Kept for the whole test process (statics are never dropped), under the target
        // directory's scratch space rather than /tmp.
        let dir = tempfile::Builder::new()
            .prefix("mock-cuda")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir")
            .keep();
        let s = |p: &str| src.join(p).to_str().expect("utf-8 path").to_owned();
        let o = |p: &str| dir.join(p).to_str().expect("utf-8 path").to_owned();
        let flags = ["-O1", "-Wall", "-Wextra", "-Werror"];
        let mut args = flags.to_vec();
        let (mock_src, libcuda) = (s("mock_cuda.c"), o("libcuda.so.1"));
        args.extend([
            "-shared",
            "-fPIC",
            "-Wl,-Bsymbolic",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            &libcuda,
            &mock_src,
        ]);
        cc(&args);
        // The mock runtime (route `rt`), found by app_dyn through LD_LIBRARY_PATH.
        let (rt_src, rt_lib) = (s("mock_runtime.c"), o("libmockrt.so"));
        let mut args = flags.to_vec();
        args.extend([
            "-shared",
            "-fPIC",
            "-o",
            &rt_lib,
            &rt_src,
            "-ldl",
            "-lpthread",
        ]);
        cc(&args);
        let (app_src, app_link, app_dyn) = (s("app.c"), o("app_link"), o("app_dyn"));
        let dir_s = o("");
        let rpath = format!("-Wl,--disable-new-dtags,-rpath,{dir_s}");
        let lpath = format!("-L{dir_s}");
        let mut args = flags.to_vec();
        args.extend([
            "-DLINK_CUDA",
            "-o",
            &app_link,
            &app_src,
            &lpath,
            "-l:libcuda.so.1",
            &rpath,
            "-lpthread",
        ]);
        cc(&args);
        let mut args = flags.to_vec();
        args.extend(["-o", &app_dyn, &app_src, "-ldl", "-lpthread"]);
        cc(&args);
        let (next_src, liba, libb, next) = (s("next.c"), o("liba.so"), o("libb.so"), o("next"));
        for (def, lib) in [("-DLIB_A", &liba), ("-DLIB_B", &libb)] {
            let mut args = flags.to_vec();
            args.extend([def, "-shared", "-fPIC", "-o", lib, &next_src, "-ldl"]);
            cc(&args);
        }
        let mut args = flags.to_vec();
        args.extend([
            "-o",
            &next,
            &next_src,
            // Keep libb.so although the program does not reference it: it is what
            // RTLD_NEXT from liba.so must find.
            "-Wl,--no-as-needed",
            &liba,
            &libb,
            &rpath,
            "-ldl",
        ]);
        cc(&args);
        MockStack {
            libcuda: dir.join("libcuda.so.1"),
            app_link: dir.join("app_link"),
            app_dyn: dir.join("app_dyn"),
            next: dir.join("next"),
            dir,
        }
    })
}

/// What an end-to-end test starts from: the built mock stack, a scratch directory and the
/// path of a registry in it (`reg`, not created).
pub struct Session {
    pub mock: &'static MockStack,
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
}

/// The session of a test that needs `cc` and clang; `None` (after saying which one is
/// missing, so that the test skips) without them.
pub fn session() -> Option<Session> {
    if !have_cc() {
        eprintln!("skipped: cc not found");
        return None;
    }
    if !super::cli::have_clang() {
        eprintln!("skipped: clang not found");
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("reg");
    Some(Session {
        mock: mock_stack(),
        tmp,
        home,
    })
}

/// Whether a C compiler runs (`cc`).
pub fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

impl MockStack {
    /// A command running `program` with the shim preloaded on the mock driver, its registry
    /// at `home`, `GPUBPF_LOG` and `GPUBPF_VERIFY_CACHE` unset.
    pub fn command(&self, program: &Path, home: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("LD_PRELOAD", shim_library())
            .env("GPUBPF_CUDA_LIBRARY", &self.libcuda)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("GPUBPF_HOME", home)
            .env_remove("GPUBPF_LOG")
            .env_remove("GPUBPF_VERIFY_CACHE")
            .env_remove("RUST_LOG");
        cmd
    }

    /// `app_link link live READY GO SIZE` under the shim ([`MockStack::command`]): one
    /// allocation, then file READY, then waiting for file GO, then another allocation.
    pub fn live(&self, home: &Path, ready: &Path, go: &Path, size: &str) -> Command {
        let mut cmd = self.command(&self.app_link, home);
        cmd.args(["link", "live"]).arg(ready).arg(go).arg(size);
        cmd
    }

    /// The application binary for `route` (`link`, `dlsym`, `proc` or `rt`).
    pub fn app(&self, route: &str) -> &Path {
        if route == "link" {
            &self.app_link
        } else {
            &self.app_dyn
        }
    }

    /// `gpubpf` on the mock stack, with its registry at `home`, for commands that start the
    /// application themselves (`run`, `record`): the shim found beside the binary (built
    /// here), nothing preloaded, no logging or trace-to-stderr inherited from the test.
    pub fn gpubpf_command(&self, home: &Path) -> Command {
        shim_library(); // built beside the gpubpf binary
        let mut cmd = Command::new(super::cli::gpubpf());
        cmd.env("GPUBPF_HOME", home)
            .env("GPUBPF_CUDA_LIBRARY", &self.libcuda)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env_remove("GPUBPF_SHIM")
            .env_remove("GPUBPF_LOG")
            .env_remove("GPUBPF_TRACE_STDERR")
            .env_remove("LD_PRELOAD")
            .env_remove("RUST_LOG");
        cmd
    }

    /// `gpubpf record -o RECORD --policy QUOTA --set limit_bytes=LIMIT --set log_denials=0
    /// -- app_link link ARGS…` on the mock stack.
    pub fn record_quota(
        &self,
        home: &Path,
        record: &Path,
        quota: &Path,
        limit: u64,
        args: &[&str],
    ) -> Output {
        self.gpubpf_command(home)
            .arg("record")
            .arg("-o")
            .arg(record)
            .arg("--policy")
            .arg(quota)
            .args([
                "--set",
                &format!("limit_bytes={limit}"),
                "--set",
                "log_denials=0",
            ])
            .arg("--")
            .arg(&self.app_link)
            .arg("link")
            .args(args)
            .output()
            .expect("run gpubpf record")
    }

    /// Runs the application through `route` with `args`; asserts that it exited 0.
    pub fn run_app(&self, home: &Path, route: &str, args: &[&str]) -> Output {
        let out = self
            .command(self.app(route), home)
            .arg(route)
            .args(args)
            .output()
            .expect("run the test application");
        assert!(
            out.status.success(),
            "app {route} {args:?}: {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Creates file `go` for an application waiting on it (`live`, `forklive`, `hammer`'s STOP),
/// waits for the application's end, which must be a success, and returns its stdout lines.
pub fn release(app: std::process::Child, go: &Path) -> Vec<String> {
    std::fs::write(go, b"").expect("create go file");
    let out = app.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Starts `cmd` with its stdout and stderr captured (read them with `wait_with_output`).
pub fn spawn_piped(cmd: &mut Command) -> std::process::Child {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits until process `pid` has acknowledged registry generation `generation` or later
/// in the registry at `home` (its watcher republished), failing at `deadline`.
pub fn wait_acked(home: &Path, pid: u32, generation: u64, deadline: std::time::Instant) {
    let reg = gpubpf_runtime::registry::Registry::open(home).expect("open registry");
    loop {
        let acked = reg
            .control()
            .processes()
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.acked_generation);
        if acked.is_some_and(|g| g >= generation) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never acknowledged generation {generation} (acked: {acked:?})"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
