//! End to end: unmodified test applications on the mock CUDA driver (`tests/shim/`) with
//! `libgpubpf.so` preloaded and policies loaded by the real `gpubpf` CLI, on every route into
//! the driver (direct ELF binding, `dlsym` on a `dlopen`ed handle, `cuGetProcAddress_v2` with
//! the self-lookup as CUDA 13's static cudart does inside the application, and the same
//! from a separate mock runtime library, as libcudart.so does).
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gpubpf_runtime::attach;
use gpubpf_runtime::registry::Registry;
use serde_json::Value;

use common::cli::{ok, ok_json, run_with_registry as cli};
use common::process::wait_for_files;
use common::shim::{
    have_cc, mock_stack, release, session, shim_library, spawn_piped, wait_acked, Session,
};

const ROUTES: [&str; 4] = ["link", "dlsym", "proc", "rt"];

/// Builds `src` (relative to the repository) into `dir` with `gpubpf build`.
fn policy(dir: &Path, src: &str) -> PathBuf {
    common::cli::build_policy(dir, src).expect("clang present: policy built")
}

fn load(home: &Path, obj: &Path, sets: &[&str]) -> u64 {
    let mut args = vec!["-j", "load", obj.to_str().expect("utf-8 path")];
    for s in sets {
        args.extend(["--set", s]);
    }
    ok_json(&cli(home, &args))["generation"]
        .as_u64()
        .expect("generation")
}

fn stdout_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `gpubpf maps dump MAP` as key -> value.
fn dump(home: &Path, map: &str) -> BTreeMap<u64, Value> {
    let j = ok_json(&cli(home, &["-j", "maps", "dump", map]));
    j.as_array()
        .expect("array")
        .iter()
        .map(|e| {
            let f = &e["formatted"];
            (f["key"].as_u64().expect("integer key"), f["value"].clone())
        })
        .collect()
}

fn api(name: &str) -> u64 {
    u64::from(attach::resolve(name).expect("catalogued").id)
}

#[test]
fn quota_denies_exactly_the_allocation_that_crosses_the_limit_on_every_route() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    // 350 bytes: three allocations of 100 fit, the fourth would cross the limit.
    load(&home, &quota, &["limit_bytes=350", "log_denials=0"]);
    for route in ROUTES {
        let out = mock.run_app(&home, route, &["quota", "5", "100"]);
        assert_eq!(
            stdout_lines(&out),
            [
                "alloc 0 0",
                "alloc 1 0",
                "alloc 2 0",
                "alloc 3 2",
                "alloc 4 2",
                "free 0",
                "retry 0",
                // Denied calls never reached the driver.
                "mock alloc=4 free=4 launch=0 launch_ptsz=0 getinfo=0",
            ],
            "route {route}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // One process per route, each denied twice and left with nothing allocated.
    let usage = dump(&home, "proc_usage");
    assert_eq!(usage.len(), ROUTES.len(), "{usage:?}");
    for u in usage.values() {
        assert_eq!(
            (&u["bytes"], &u["allocs"], &u["frees"], &u["denied"]),
            (&0.into(), &4.into(), &4.into(), &2.into()),
            "{u}"
        );
    }
}

#[test]
fn trace_counts_exactly_the_calls_made_on_every_route() {
    let Some(Session { mock, tmp, .. }) = session() else {
        return;
    };
    let trace = policy(tmp.path(), "policies/trace.bpf.c");
    for (i, route) in ROUTES.iter().enumerate() {
        let home = tmp.path().join(format!("reg-{route}"));
        load(&home, &trace, &[]);
        let (launches, allocs) = (7 + i, 3 + i);
        let out = mock.run_app(
            &home,
            route,
            &["count", &launches.to_string(), &allocs.to_string()],
        );
        let lines = stdout_lines(&out);
        // The cuGetProcAddress route asks for the per-thread default stream: its launches
        // reach the driver's cuLaunchKernel_ptsz.
        let (legacy, ptsz) = if *route == "proc" {
            (0, launches)
        } else {
            (launches, 0)
        };
        assert_eq!(
            lines.last().map(String::as_str),
            Some(
                format!(
                    "mock alloc={allocs} free={allocs} launch={legacy} launch_ptsz={ptsz} getinfo=1"
                )
                .as_str()
            ),
            "route {route}"
        );
        let stats = dump(&home, "stats");
        let calls = |name| {
            stats
                .get(&api(name))
                .map(|v| v["calls"].as_u64().expect("calls"))
        };
        assert_eq!(
            calls("cuLaunchKernel"),
            Some(launches as u64),
            "route {route}"
        );
        assert_eq!(calls("cuMemAlloc"), Some(allocs as u64), "route {route}");
        assert_eq!(calls("cuMemFree"), Some(allocs as u64), "route {route}");
        assert_eq!(stats.len(), 3, "route {route}: {stats:?}");
    }
}

#[test]
fn threads_are_counted_exactly() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    load(&home, &policy(tmp.path(), "policies/trace.bpf.c"), &[]);
    let out = mock.run_app(&home, "proc", &["threads", "8", "250"]);
    assert_eq!(
        stdout_lines(&out),
        ["mock alloc=0 free=0 launch=0 launch_ptsz=2000 getinfo=0"]
    );
    let stats = dump(&home, "stats");
    assert_eq!(stats[&api("cuLaunchKernel")]["calls"], 2000);
}

#[test]
fn ctx_header_launch_block_and_out_value_write_back() {
    let Some(Session { mock, tmp, .. }) = session() else {
        return;
    };
    let probe = policy(tmp.path(), "tests/shim/ctx_probe.bpf.c");
    let launch = attach::resolve("cuLaunchKernel").expect("catalogued");
    let ptsz = launch
        .variant_by_symbol("cuLaunchKernel_ptsz")
        .expect("ptsz variant")
        .0 as u64;
    for (route, variant, per_thread) in [("link", 0, 0), ("proc", ptsz, 4)] {
        let home = tmp.path().join(format!("reg-{route}"));
        load(&home, &probe, &[]);
        let child = mock
            .command(mock.app(route), &home)
            .args([route, "count", "4", "1"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let pid = u64::from(child.id());
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success());
        // The exit program's out.total reached the application; free is the driver's.
        assert_eq!(
            stdout_lines(&out)[0],
            "getinfo 0 free=1073741824 total=12345",
            "route {route}"
        );
        let p = dump(&home, "probe");
        let want: BTreeMap<u64, Value> = [
            (0, 4.into()),
            (1, per_thread.into()),
            (2, variant.into()),
            (3, 1.into()), // device 0 (+1)
            (4, pid.into()),
            (5, 32.into()), // launch.block_x
            (6, 32.into()), // args.blockDimX
            (7, 1.into()),
        ]
        .into_iter()
        .collect();
        assert_eq!(p, want, "route {route}");
    }
}

#[test]
fn a_policy_loaded_while_the_application_runs_takes_effect() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    // An empty registry: the process starts unpoliced and watches it.
    drop(Registry::open(&home).expect("create registry"));
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = spawn_piped(
        mock.command(&mock.app_dyn, &home)
            .args(["proc", "live"])
            .arg(&ready)
            .arg(&go)
            .arg("1000"),
    );
    let pid = child.id();
    wait_for_files(&[&ready], "application never got ready");
    // `--wait` returns once the process acknowledged the change (its watcher republished).
    let j = ok_json(&cli(
        &home,
        &[
            "-j",
            "load",
            quota.to_str().expect("utf-8 path"),
            "--set",
            "limit_bytes=500",
            "--set",
            "log_denials=0",
            "--wait=60s",
        ],
    ));
    assert_eq!(j["acknowledged_by"], 1, "{j}");
    let acked: Vec<_> = Registry::open(&home)
        .expect("open registry")
        .control()
        .processes()
        .into_iter()
        .filter(|p| p.pid == pid)
        .map(|p| p.acked_generation)
        .collect();
    assert_eq!(acked, [j["generation"].as_u64().expect("generation")]);
    // Before the load the allocation went through; after it, the same size is over the
    // new limit and refused without reaching the driver.
    assert_eq!(
        release(child, &go),
        [
            "before 0",
            "after 2",
            "mock alloc=1 free=0 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    let usage = dump(&home, "proc_usage");
    assert_eq!(usage[&u64::from(pid)]["denied"], 1);
}

/// A process started under the shim before its registry existed is policed once the first
/// `gpubpf load` makes the registry: meanwhile it runs unpoliced and looks for the registry
/// every half second (a `--wait` cannot count it: it is not in the process table yet).
#[test]
fn a_process_started_before_its_registry_is_policed_once_it_appears() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    assert!(!home.exists(), "no registry when the application starts");
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = spawn_piped(&mut mock.live(&home, &ready, &go, "1000"));
    let pid = child.id();
    wait_for_files(&[&ready], "application never got ready");
    let generation = load(&home, &quota, &["limit_bytes=500", "log_denials=0"]);
    wait_acked(
        &home,
        pid,
        generation,
        Instant::now() + Duration::from_secs(60),
    );
    assert_eq!(
        release(child, &go),
        [
            "before 0",
            "after 2",
            "mock alloc=1 free=0 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    assert_eq!(dump(&home, "proc_usage")[&u64::from(pid)]["denied"], 1);
}

/// The forked child of a process that waits for its registry waits too (the parent's
/// waiting thread does not survive `fork`), and is policed as its own process once the
/// registry appears.
#[test]
fn the_forked_child_of_a_process_waiting_for_its_registry_is_policed_once_it_appears() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let parent = spawn_piped(
        mock.command(&mock.app_link, &home)
            .args(["link", "forklive"])
            .arg(&ready)
            .arg(&go)
            .arg("1000"),
    );
    wait_for_files(&[&ready], "the child never got ready");
    let child: u32 = std::fs::read_to_string(&ready)
        .expect("read READY")
        .trim()
        .parse()
        .expect("child pid");
    let generation = load(&home, &quota, &["limit_bytes=500", "log_denials=0"]);
    wait_acked(
        &home,
        child,
        generation,
        Instant::now() + Duration::from_secs(60),
    );
    let lines = release(parent, &go);
    assert_eq!(
        lines[..4],
        [
            "parent alloc 0",
            "child before 0",
            "child after 2",
            "child exit 0"
        ],
        "{lines:?}"
    );
    assert_eq!(dump(&home, "proc_usage")[&u64::from(child)]["denied"], 1);
}

/// The `n`th line (from 1) of the log file `log` that contains `needle`, waited for.
fn nth_log_line(log: &Path, needle: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).expect("read log");
        if let Some(line) = text.lines().filter(|l| l.contains(needle)).nth(n - 1) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no line {n} with {needle:?}: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process's first driver call waits for re-verification only: the chains it publishes
/// run on the interpreter, and the watcher swaps the chain of each point the process calls
/// for native code while the application goes on. The policy holds on both sides of the
/// swap.
#[test]
fn the_first_calls_are_interpreted_then_the_watcher_compiles_to_native_code() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    ok(&cli(
        &home,
        &[
            "load",
            quota.to_str().expect("utf-8 path"),
            "--set",
            "limit_bytes=1500",
            "--set",
            "log_denials=0",
        ],
    ));
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let log = tmp.path().join("stderr");
    let child = mock
        .live(&home, &ready, &go, "1000")
        .env("GPUBPF_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("create log"))
        .spawn()
        .expect("spawn");
    wait_for_files(&[&ready], "application never got ready");
    let native = nth_log_line(&log, "policies compiled to native code", 1);
    // The one point called so far, cuMemAlloc (quota's entry and exit programs), was
    // swapped for native code; quota's 15 other points wait for a first call.
    assert!(native.contains("programs=2 waiting=15"), "{native}");
    std::fs::write(&go, b"").expect("create go");
    let out = child.wait_with_output().expect("wait");
    let err = std::fs::read_to_string(&log).expect("read log");
    assert!(out.status.success(), "{err}");
    // The first allocation (interpreted) was charged; the second (native) crosses the limit.
    assert_eq!(
        stdout_lines(&out),
        [
            "before 0",
            "after 2",
            "mock alloc=1 free=0 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    let published = err.find("policies published").expect("published");
    let compiled = err.find("policies compiled").expect("compiled");
    assert!(published < compiled, "{err}");
}

/// quota.o (1 MiB) loaded, and the mock application's `stages` scenario running in it: one
/// allocation made (cuMemAlloc's chain compiled, quota's 15 other points waiting), then
/// stopped until `files[1]` appears.
struct Stages {
    child: std::process::Child,
    /// READY1, GO1, READY2, GO2.
    files: Vec<PathBuf>,
    /// The application's stderr (its shim's log at `level`).
    log: PathBuf,
}

fn stages_after_first_compilation(session: &Session, level: &str) -> Stages {
    let Session { mock, tmp, home } = session;
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    load(home, &quota, &["limit_bytes=1MiB", "log_denials=0"]);
    let dir = tmp.path();
    let files: Vec<PathBuf> = ["ready1", "go1", "ready2", "go2"]
        .iter()
        .map(|f| dir.join(f))
        .collect();
    let log = dir.join("stderr");
    let child = mock
        .command(&mock.app_link, home)
        .args(["link", "stages", "alloc", "4096"])
        .args(&files)
        .env("GPUBPF_LOG", level)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("create log"))
        .spawn()
        .expect("spawn");
    wait_for_files(&[&files[0]], "application never allocated");
    let first = nth_log_line(&log, "policies compiled to native code", 1);
    assert!(first.contains("programs=2 waiting=15"), "{first}");
    Stages { child, files, log }
}

/// A point first called after the watcher's first compilation runs on the interpreter
/// until the watcher is nudged by that call (or, polling, looks again within
/// `native::LAST_LOOK`, 250 ms), then natively; the
/// points never called are never compiled, also in a later build.
#[test]
fn a_point_called_later_is_compiled_when_it_is_first_called() {
    let Some(session) = session() else {
        return;
    };
    let Stages { child, files, log } = stages_after_first_compilation(&session, "info");
    let (tmp, home) = (&session.tmp, &session.home);
    let dir = tmp.path();
    std::fs::write(&files[1], b"").expect("create go1");
    wait_for_files(&[&files[2]], "application never freed");
    // cuMemFree: quota's one exit program there.
    let second = nth_log_line(&log, "policies compiled to native code", 2);
    assert!(second.contains("programs=1 waiting=14"), "{second}");
    // A later build is published on the interpreter too; the points this process has
    // called (cuMemAlloc, cuMemFree) are compiled at once, the new object's
    // (cuLaunchKernel) waits with quota's 14 others.
    let count = policy(dir, "tests/shim/count_launch.bpf.c");
    let j = ok_json(&cli(
        home,
        &[
            "-j",
            "load",
            count.to_str().expect("utf-8 path"),
            "--wait=60s",
        ],
    ));
    assert_eq!(j["acknowledged_by"], 1, "{j}");
    let third = nth_log_line(&log, "policies compiled to native code", 3);
    assert!(third.contains("programs=3 waiting=15"), "{third}");
    std::fs::write(&files[3], b"").expect("create go2");
    let pid = u64::from(child.id());
    let out = child.wait_with_output().expect("wait");
    let err = std::fs::read_to_string(&log).expect("read log");
    assert!(out.status.success(), "{err}");
    assert_eq!(
        stdout_lines(&out),
        [
            "stages alloc 0",
            "stages free 0",
            "mock alloc=1 free=1 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    assert_eq!(
        err.matches("policies compiled to native code").count(),
        3,
        "{err}"
    );
    // Charged on the interpreter and credited on it: nothing held, one free.
    let usage = dump(home, "proc_usage");
    assert_eq!(usage[&pid]["bytes"], 0, "{usage:?}");
    assert_eq!(usage[&pid]["frees"], 1, "{usage:?}");
}

/// The voluntary context switches of `pid`'s thread named `name` (`/proc/PID/task/*/comm`).
fn thread_switches(pid: u32, name: &str) -> Option<u64> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

/// While chains of points the process has not called stay interpreted, the watcher sleeps
/// until a call of one nudges it (on a kernel with `futex_waitv`): it used to look every
/// 250 ms for good. The point called later is still compiled right after its first call.
#[test]
fn the_watcher_sleeps_until_an_interpreted_point_is_called() {
    let Some(session) = session() else {
        return;
    };
    let Stages { child, files, log } = stages_after_first_compilation(&session, "debug");
    let before = thread_switches(child.id(), "gpubpf-watch").expect("watcher thread");
    std::thread::sleep(Duration::from_millis(1500));
    let after = thread_switches(child.id(), "gpubpf-watch").expect("watcher thread");
    // Read after the idle time: the watcher says it polls when its first wait finds no
    // futex_waitv, which may come after the compilation's log line.
    let err = std::fs::read_to_string(&log).expect("read log");
    if err.contains("no futex_waitv") {
        eprintln!("skipped the sleep check: this kernel has no futex_waitv (the watcher polls)");
    } else {
        // Polling: the doubling sleeps reach 250 ms and stay there, six wake-ups or more in
        // 1.5 s. A nudged watcher: none (one if its 10 s bound falls in the window).
        assert!(
            after - before <= 1,
            "the watcher woke {} times",
            after - before
        );
    }
    let nudged = Instant::now();
    std::fs::write(&files[1], b"").expect("create go1");
    wait_for_files(&[&files[2]], "application never freed");
    let second = nth_log_line(&log, "policies compiled to native code", 2);
    assert!(second.contains("programs=1 waiting=14"), "{second}");
    assert!(
        nudged.elapsed() < Duration::from_secs(5),
        "compiled {:?} after the call",
        nudged.elapsed()
    );
    std::fs::write(&files[3], b"").expect("create go2");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[test]
fn a_corrupt_registry_leaves_the_process_unpoliced_and_says_why_once() {
    let Some(Session {
        mock,
        tmp: _tmp,
        home,
    }) = session()
    else {
        return;
    };
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    std::fs::write(home.join("control"), b"not a control block").expect("write control");
    let out = mock
        .command(&mock.app_link, &home)
        .env("GPUBPF_LOG", "warn")
        .args(["link", "quota", "3", "100"])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(
        stdout_lines(&out),
        [
            "alloc 0 0",
            "alloc 1 0",
            "alloc 2 0",
            "free 0",
            "retry 0",
            "mock alloc=4 free=4 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("cannot open the gpubpf registry").count(),
        1,
        "{err}"
    );
}

#[test]
fn rtld_next_resolves_relative_to_the_real_caller() {
    if !have_cc() {
        eprintln!("skipped: cc not found");
        return;
    }
    let mock = mock_stack();
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = mock
        .command(&mock.next, tmp.path())
        .output()
        .expect("run next");
    assert_eq!(ok(&out), "B\n");
}

#[test]
fn the_library_exports_dlsym_both_resolvers_and_every_catalogued_symbol() {
    use object::{Object as _, ObjectSymbol as _};
    let bytes = std::fs::read(shim_library()).expect("read libgpubpf.so");
    let file = object::File::parse(&*bytes).expect("ELF");
    let exported: std::collections::BTreeSet<&str> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok())
        .collect();
    for name in ["dlsym", "cuGetProcAddress", "cuGetProcAddress_v2"] {
        assert!(exported.contains(name), "{name} not exported");
    }
    let mut n = 0;
    for p in attach::all() {
        for v in p.variants {
            assert!(exported.contains(v.symbol), "{} not exported", v.symbol);
            n += 1;
        }
    }
    assert_eq!(n, attach::generated::VARIANT_COUNT);
}

/// Under `LD_PRELOAD` the library's thread-local storage is part of every thread the
/// application creates, whether or not it ever calls the driver (the loader copies the
/// initial image into each new thread's static TLS). The shim keeps a thread's state on the
/// heap from its first driver call and the JIT compiler boxed, and builds Cranelift without
/// its `timing` feature (per-pass thread-locals, 784 B), so that this stays small (456 B
/// today): a state (~8.5 KiB) or a compiler (~8 KiB) moved back into a thread-local, or
/// `timing` on again, fails here.
#[test]
fn every_thread_carries_little_of_the_shim() {
    use object::elf::PT_TLS;
    use object::read::elf::{ElfFile64, ProgramHeader as _};
    let bytes = std::fs::read(shim_library()).expect("read libgpubpf.so");
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes).expect("ELF");
    let e = elf.endian();
    let tls: Vec<(u64, u64)> = elf
        .elf_program_headers()
        .iter()
        .filter(|h| h.p_type(e) == PT_TLS)
        .map(|h| (h.p_filesz(e), h.p_memsz(e)))
        .collect();
    let [(image, size)] = tls[..] else {
        panic!("one PT_TLS segment expected: {tls:?}");
    };
    assert!(
        size <= 1024 && image <= 512,
        "the shim's TLS is {size} bytes per thread ({image} of them copied at each thread's \
         creation): keep large per-thread state on the heap"
    );
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// RCU under load: 8 threads launch without pause while the counting policy is replaced
/// 1 000 times (the object republished in the registry; the process applies the newest
/// generation whenever its watcher wakes, and the test waits for it every tenth
/// replacement, so at least 100 of them publish a freshly verified and compiled program
/// and retire the old one while the threads run); every launch runs exactly one version of the program
/// (the count, kept in a map that replacements keep by name, equals the launches made),
/// nothing crashes, and the process does not grow with the replacements.
#[test]
fn swap_under_load_counts_every_call_exactly_once() {
    const REPLACEMENTS: usize = 1000;
    const WARM_UP: usize = 100;
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let count = policy(tmp.path(), "tests/shim/count_launch.bpf.c");
    load(&home, &count, &[]);
    let stop = tmp.path().join("stop");
    let child = mock
        .command(&mock.app_link, &home)
        .args(["link", "hammer", "8"])
        .arg(&stop)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let reg = Registry::open(&home).expect("open registry");
    let record = reg.object("count_launch").expect("loaded");
    let bytes = reg.object_bytes("count_launch").expect("object bytes");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut rss_after_warmup = 0;
    for i in 0..REPLACEMENTS {
        let mut w = reg.writer().expect("writer");
        w.publish_object(&record, &bytes).expect("republish");
        let g = w.commit();
        if (i + 1) % 10 == 0 {
            wait_acked(&home, pid, g, deadline);
        }
        if i + 1 == WARM_UP {
            rss_after_warmup = vm_rss_kib(pid);
        }
    }
    let rss_end = vm_rss_kib(pid);
    std::fs::write(&stop, b"").expect("create stop");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let lines = stdout_lines(&out);
    let made: u64 = lines[0]
        .strip_prefix("launches ")
        .and_then(|n| n.parse().ok())
        .expect("launch total");
    assert!(made > 0);
    assert_eq!(
        lines[1],
        format!("mock alloc=0 free=0 launch={made} launch_ptsz=0 getinfo=0")
    );
    assert_eq!(dump(&home, "launches")[&0], made);
    eprintln!(
        "{made} launches; RSS {rss_after_warmup} KiB after warm-up, {rss_end} KiB at the end"
    );
    // 900 more replacements after warm-up: a leaked chain (code pages, map mappings) per
    // replacement would show; allow allocator noise.
    assert!(
        rss_end < rss_after_warmup + 8 * 1024,
        "RSS grew from {rss_after_warmup} KiB to {rss_end} KiB over {} replacements",
        REPLACEMENTS - WARM_UP
    );
}

/// A forked child is policed as its own process: the quota counts it under its own pid
/// (the cached pid was refreshed) with its own limit, and its denials happen in the child.
#[test]
fn a_forked_child_is_policed_as_its_own_process() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    load(&home, &quota, &["limit_bytes=350", "log_denials=0"]);
    let out = mock.run_app(&home, "link", &["fork", "4", "100"]);
    let lines = stdout_lines(&out);
    let child_pid: u64 = lines[1]
        .strip_prefix("child pid ")
        .and_then(|p| p.parse().ok())
        .expect("child pid line");
    assert_eq!(
        lines[2..],
        [
            "child alloc 0 0",
            "child alloc 1 0",
            "child alloc 2 0",
            "child alloc 3 2",
            "child exit 0",
            // The mock's counters are per process: the parent's one allocation.
            "mock alloc=1 free=0 launch=0 launch_ptsz=0 getinfo=0",
        ]
    );
    assert_eq!(lines[0], "parent alloc 0");
    let usage = dump(&home, "proc_usage");
    assert_eq!(usage[&child_pid]["bytes"], 300);
    assert_eq!(usage[&child_pid]["denied"], 1);
    assert_eq!(usage.len(), 2, "{usage:?}");
}

/// `gpubpf run`: loads the policies, starts the command with the shim (found beside the
/// `gpubpf` binary) preloaded, and exits with the command's status.
#[test]
fn gpubpf_run_loads_policies_preloads_the_shim_and_keeps_the_exit_status() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    shim_library(); // built beside the gpubpf binary
    let gpubpf = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(common::cli::gpubpf())
            .args(args)
            .env("GPUBPF_HOME", &home)
            .env("GPUBPF_CUDA_LIBRARY", &mock.libcuda)
            .env("LD_LIBRARY_PATH", &mock.dir)
            .env_remove("GPUBPF_SHIM")
            .env_remove("LD_PRELOAD")
            .env_remove("RUST_LOG")
            .output()
            .expect("run gpubpf")
    };
    let out = gpubpf(&[
        "run".as_ref(),
        "--policy".as_ref(),
        quota.as_os_str(),
        "--set".as_ref(),
        "limit_bytes=250".as_ref(),
        "--set".as_ref(),
        "log_denials=0".as_ref(),
        "--".as_ref(),
        mock.app_link.as_os_str(),
        "link".as_ref(),
        "quota".as_ref(),
        "3".as_ref(),
        "100".as_ref(),
    ]);
    assert_eq!(
        ok(&out),
        "alloc 0 0\nalloc 1 0\nalloc 2 2\nfree 0\nretry 0\n\
         mock alloc=3 free=3 launch=0 launch_ptsz=0 getinfo=0\n"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("loaded quota"));
    let out = gpubpf(&[
        "run".as_ref(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        "exit 7".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(7));
}
