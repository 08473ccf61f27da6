//! The shim's cost per call and per process, on the mock CUDA driver of `tests/shim/`.
//!
//! `cargo bench --bench shim` (filter: `cargo bench --bench shim -- launch`). Needs `cc`
//! and clang, like the end-to-end tests.
//!
//! One process, side by side: the mock driver's functions called directly (through the
//! pointer `dlsym` gives for `libcuda.so.1`) and the same functions through the shim's
//! wrappers (`libgpubpf.so` `dlopen`ed with `RTLD_LOCAL`, so it interposes nothing else in
//! this process; it finds the mock through `GPUBPF_CUDA_LIBRARY`). The policies are loaded
//! with the real `gpubpf` CLI into a scratch registry while this process runs, with
//! `--wait`, so the shim's watcher has published them before the next group starts:
//!
//! - `cuLaunchKernel`: direct / nothing attached / an entry program that returns 0
//!   (`tests/shim/pass_launch.bpf.c`: what running any policy costs) / a JIT-compiled
//!   launch-counting policy (`tests/shim/count_launch.bpf.c`, one array-map atomic add);
//! - `cuMemAlloc+cuMemFree`: direct / nothing attached / `policies/quota.bpf.c`;
//! - `cuMemAlloc` alone (frees untimed, at most 4 096 allocations live): direct / quota;
//! - `startup`: a whole process (`app_link link count 0 0`: `cuInit`, one `cuMemGetInfo`)
//!   without the shim and under the shim with `quota` and `trace` loaded (a registry in
//!   /dev/shm, the default registry's filesystem) — the difference is the shim's
//!   initialisation (loading the library, registry, process table and stats file,
//!   re-verifying every program — answered from the registry's verification cache that
//!   `gpubpf load` filled, and once more with `GPUBPF_VERIFY_CACHE=off`, verified in the
//!   process — the watcher thread; JIT compilation follows on the watcher).
//!
//! The README's performance table quotes the differences between these figures.

// The end-to-end tests' support for the CLI and the mock stack (only those two parts;
// `shim` finds `cli` as `super::cli`).
#[allow(dead_code)]
#[path = "../tests/common/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "../tests/common/shim.rs"]
mod shim;

use std::ffi::{c_void, CStr, CString};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use criterion::Criterion;

type Launch = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> i32;
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
type Free = unsafe extern "C" fn(u64) -> i32;
type Init = unsafe extern "C" fn(u32) -> i32;

/// The driver functions the benchmark calls, from one library.
#[derive(Clone, Copy)]
struct Driver {
    launch: Launch,
    alloc: Alloc,
    free: Free,
}

fn open(path: &Path) -> *mut c_void {
    let c = CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: dlopen with a valid C string; the handle is kept for the whole process.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}: {}", path.display(), dl_error());
    h
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated (see above).
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

fn sym(h: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: `h` is a live handle, `c` a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "dlsym {name}: {}", dl_error());
    p
}

impl Driver {
    fn from(h: *mut c_void) -> Self {
        // SAFETY: each symbol is the C function of that name in the mock driver or the
        // shim, whose signature is the type it is transmuted to (the CUDA driver API's).
        unsafe {
            Driver {
                launch: std::mem::transmute::<*mut c_void, Launch>(sym(h, "cuLaunchKernel")),
                alloc: std::mem::transmute::<*mut c_void, Alloc>(sym(h, "cuMemAlloc_v2")),
                free: std::mem::transmute::<*mut c_void, Free>(sym(h, "cuMemFree_v2")),
            }
        }
    }

    fn launch(&self) {
        // SAFETY: the arguments every test application passes (the mock checks them).
        let r = unsafe {
            (self.launch)(
                0x1234 as *mut c_void,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, 0, "launch failed");
    }

    /// `iters` allocations, timed, in batches of at most 4 096 live ones, each batch freed
    /// untimed: what `cuMemAlloc` alone costs (the quota pair's entry + exit), without its
    /// free.
    fn alloc_only(&self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        let mut live = Vec::with_capacity(4096);
        let mut left = iters;
        while left > 0 {
            let n = left.min(4096);
            let t = std::time::Instant::now();
            for _ in 0..n {
                let mut d = 0u64;
                // SAFETY: `d` is a valid out-pointer.
                assert_eq!(unsafe { (self.alloc)(&mut d, 256) }, 0, "alloc failed");
                live.push(black_box(d));
            }
            total += t.elapsed();
            for d in live.drain(..) {
                // SAFETY: frees what was allocated above, once.
                assert_eq!(unsafe { (self.free)(d) }, 0, "free failed");
            }
            left -= n;
        }
        total
    }

    fn alloc_free(&self) {
        let mut d = 0u64;
        // SAFETY: `d` is a valid out-pointer; the pointer freed is the one allocated.
        unsafe {
            assert_eq!((self.alloc)(&mut d, 256), 0, "alloc failed");
            assert_eq!((self.free)(black_box(d)), 0, "free failed");
        }
    }
}

fn gpubpf(home: &Path, args: &[&str]) {
    let out = cli::run_with_registry(home, args);
    assert!(
        out.status.success(),
        "gpubpf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    let Some(shim::Session { mock, tmp, home }) = shim::session() else {
        return;
    };
    let shim = shim::shim_library();
    let policy = |src: &str| {
        cli::build_policy(tmp.path(), src)
            .expect("policy built")
            .to_str()
            .expect("utf-8 path")
            .to_owned()
    };
    let (pass, count, quota, trace) = (
        policy("tests/shim/pass_launch.bpf.c"),
        policy("tests/shim/count_launch.bpf.c"),
        policy("policies/quota.bpf.c"),
        policy("policies/trace.bpf.c"),
    );
    // An empty registry the shim in this process watches.
    drop(gpubpf_runtime::registry::Registry::open(&home).expect("create registry"));
    std::env::set_var("GPUBPF_HOME", &home);
    std::env::set_var("GPUBPF_CUDA_LIBRARY", &mock.libcuda);
    std::env::remove_var("GPUBPF_LOG");
    let direct = Driver::from(open(&mock.libcuda));
    let shim_handle = open(&shim);
    let through = Driver::from(shim_handle);
    // SAFETY: the shim's `cuInit(unsigned int)`; initialises the shim (registers this
    // process, starts its watcher).
    let init = unsafe { std::mem::transmute::<*mut c_void, Init>(sym(shim_handle, "cuInit")) };
    // SAFETY: see above.
    assert_eq!(unsafe { init(0) }, 0, "cuInit through the shim");

    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    let mut g = c.benchmark_group("cuLaunchKernel");
    g.bench_function("direct", |b| b.iter(|| direct.launch()));
    g.bench_function("shim, nothing attached", |b| b.iter(|| through.launch()));
    gpubpf(&home, &["load", &pass, "--wait=60s"]);
    g.bench_function("shim, entry program that returns 0", |b| {
        b.iter(|| through.launch())
    });
    gpubpf(&home, &["unload", "pass_launch", "--wait=60s"]);
    gpubpf(&home, &["load", &count, "--wait=60s"]);
    g.bench_function("shim, launch-counting policy", |b| {
        b.iter(|| through.launch())
    });
    g.finish();

    let mut g = c.benchmark_group("cuMemAlloc+cuMemFree");
    g.bench_function("direct", |b| b.iter(|| direct.alloc_free()));
    g.bench_function("shim, nothing attached", |b| {
        b.iter(|| through.alloc_free())
    });
    gpubpf(
        &home,
        &[
            "load",
            &quota,
            "--set",
            "limit_bytes=1TiB",
            "--set",
            "log_denials=0",
            "--wait=60s",
        ],
    );
    g.bench_function("shim, quota policy", |b| b.iter(|| through.alloc_free()));
    g.finish();

    // cuMemAlloc alone (issue 12's "entry + exit pair per cuMemAlloc"): frees untimed.
    let mut g = c.benchmark_group("cuMemAlloc");
    g.bench_function("direct", |b| b.iter_custom(|n| direct.alloc_only(n)));
    g.bench_function("shim, quota policy", |b| {
        b.iter_custom(|n| through.alloc_only(n))
    });
    g.finish();

    // Start-up: a registry of its own with quota and trace, so that the process above does
    // not count; in /dev/shm when there is one, where the default registry lives
    // (`registry::default_home`): on a disk filesystem, creating the process's stats file
    // (create, resize, map, rename) alone costs ~0.25 ms more (ext4 on the development VM).
    let shm = Path::new("/dev/shm");
    let startup_tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    };
    let home2 = startup_tmp.path().join("startup");
    gpubpf(
        &home2,
        &[
            "load",
            &quota,
            "--set",
            "limit_bytes=1TiB",
            "--set",
            "log_denials=0",
        ],
    );
    gpubpf(&home2, &["load", &trace]);
    let app = |preload: bool, cache: &str| {
        let mut cmd = Command::new(&mock.app_link);
        cmd.args(["link", "count", "0", "0"])
            .env("GPUBPF_HOME", &home2)
            .env("LD_LIBRARY_PATH", &mock.dir)
            .env("GPUBPF_CUDA_LIBRARY", &mock.libcuda)
            .env("GPUBPF_VERIFY_CACHE", cache);
        if preload {
            cmd.env("LD_PRELOAD", &shim);
        }
        let out = cmd.output().expect("run app");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut g = c.benchmark_group("startup");
    g.sample_size(20);
    g.bench_function("process without the shim", |b| b.iter(|| app(false, "on")));
    // What `gpubpf load` verified is in the registry's verification cache: the process
    // takes it from there (the default for a user registry).
    g.bench_function("process under the shim, quota+trace loaded", |b| {
        b.iter(|| app(true, "on"))
    });
    // Every program verified in the process (a system registry of a non-root owner, or
    // GPUBPF_VERIFY_CACHE=off).
    g.bench_function(
        "process under the shim, quota+trace loaded, cache off",
        |b| b.iter(|| app(true, "off")),
    );
    g.finish();
    c.final_summary();
}
