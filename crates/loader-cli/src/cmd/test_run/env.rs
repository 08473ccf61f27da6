//! The world a `test-run` program sees through its helpers, made deterministic so that the
//! interpreter and the JIT can be compared run for run and a test's output does not depend
//! on the machine:
//!
//! - `bpf_get_current_pid_tgid`: `hdr.pid << 32 | hdr.tid` of the synthetic ctx (the
//!   process the call is pretended to come from), not `gpubpf`'s own;
//! - `bpf_get_current_uid_gid`: `--uid`/`--gid` (default: the caller's real ids);
//! - `bpf_ktime_get_ns`: a clock at `run` seconds that advances 1 µs per call;
//! - `bpf_get_prandom_u32`: a xorshift stream from `--seed` and the run number (the same
//!   for the same pair, another for each run of `--repeat`);
//! - `gpubpf_get_kernel_name`: `--kernel-name` for every non-NULL `CUfunction`, else
//!   `-ENOENT`;
//! - `gpubpf_delay_ns`: does not sleep; the clock moves on by the (bounded) delay;
//! - `bpf_trace_printk`: formatted as everywhere else, but collected (message only) for the
//!   report instead of going to the trace sink.
//!
//! Helpers are plain `extern "C"` functions without an environment pointer (both engines
//! call through the same table), so the state lives in process-wide statics; `test-run` is
//! single-threaded and sets it before each engine's run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use gpubpf_runtime::helper_table::HelperTable;
use gpubpf_runtime::helpers::{read_user_str, standard_helpers, trace};

static PID_TGID: AtomicU64 = AtomicU64::new(0);
static UID_GID: AtomicU64 = AtomicU64::new(0);
static CLOCK_NS: AtomicU64 = AtomicU64::new(0);
static PRNG: AtomicU64 = AtomicU64::new(1);
static PRINTK: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Nanoseconds the fake clock advances per `bpf_ktime_get_ns` call.
pub const CLOCK_STEP_NS: u64 = 1_000;

/// Ids of the helpers replaced here (Linux ids).
const KTIME_GET_NS: i32 = 5;
const TRACE_PRINTK: i32 = 6;
const GET_PRANDOM_U32: i32 = 7;
const GET_CURRENT_PID_TGID: i32 = 14;
const GET_CURRENT_UID_GID: i32 = 15;
const DELAY_NS: i32 = gpubpf_verifier::helpers::GPUBPF_HELPER_BASE + 1;

/// What one run of one engine starts from.
#[derive(Debug, Clone, Copy)]
pub struct RunEnv {
    pub pid: u32,
    pub tid: u32,
    pub uid: u32,
    pub gid: u32,
    /// 1-based run number: the clock starts at `run` seconds.
    pub run: u64,
    pub seed: u64,
}

impl RunEnv {
    /// Resets every helper's state for a run and clears the collected `bpf_printk` lines.
    pub fn install(&self) {
        PID_TGID.store(
            (u64::from(self.pid) << 32) | u64::from(self.tid),
            Ordering::Relaxed,
        );
        UID_GID.store(
            (u64::from(self.gid) << 32) | u64::from(self.uid),
            Ordering::Relaxed,
        );
        CLOCK_NS.store(self.run.saturating_mul(1_000_000_000), Ordering::Relaxed);
        PRNG.store(run_seed(self.seed, self.run), Ordering::Relaxed);
        lock_printk().clear();
    }
}

/// Sets the fake clock (`gpubpf replay`: the recorded timestamp of the call).
pub fn set_clock(ns: u64) {
    CLOCK_NS.store(ns, Ordering::Relaxed);
}

/// The PRNG state of run `run` (1-based) of `--seed seed`: the same for the same pair, a
/// different stream for each run (so `--repeat N` samples a probability N times), never 0.
fn run_seed(seed: u64, run: u64) -> u64 {
    // splitmix64 of the pair.
    let mut z = seed ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

fn lock_printk() -> std::sync::MutexGuard<'static, Vec<String>> {
    PRINTK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `bpf_printk` messages of the run since [`RunEnv::install`].
pub fn take_printk() -> Vec<String> {
    std::mem::take(&mut *lock_printk())
}

extern "C" fn pid_tgid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    PID_TGID.load(Ordering::Relaxed)
}

extern "C" fn uid_gid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    UID_GID.load(Ordering::Relaxed)
}

extern "C" fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    CLOCK_NS.fetch_add(CLOCK_STEP_NS, Ordering::Relaxed)
}

extern "C" fn prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let mut x = PRNG.load(Ordering::Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    PRNG.store(x, Ordering::Relaxed);
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) & 0xffff_ffff
}

/// `bpf_trace_printk` that collects the message: its length, or `-EINVAL` for a format it
/// cannot print (as the real helper).
extern "C" fn trace_printk(fmt: u64, fmt_size: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    let einval = (-i64::from(libc::EINVAL)) as u64;
    if fmt == 0 || fmt_size == 0 {
        return einval;
    }
    // SAFETY: the verifier proved `fmt` readable for `fmt_size` bytes (a constant string
    // in the program's `.rodata`).
    let f = unsafe { std::slice::from_raw_parts(fmt as *const u8, fmt_size as usize) };
    let read_str = |p: u64| {
        let mut b = vec![0u8; 128];
        let n = read_user_str(&mut b, p).ok()?;
        b.truncate(n.saturating_sub(1));
        Some(b)
    };
    match trace::format(f, [a1, a2, a3], read_str) {
        Some(msg) => {
            let len = msg.len() as u64;
            lock_printk().push(msg.trim_end_matches('\n').to_string());
            len
        }
        None => einval,
    }
}

/// `gpubpf_delay_ns` without sleeping: the fake clock moves on by the bounded delay.
extern "C" fn delay_ns(ns: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let ns = ns.min(gpubpf_verifier::helpers::GPUBPF_MAX_DELAY_NS);
    CLOCK_NS.fetch_add(ns, Ordering::Relaxed);
    ns
}

/// The name `--kernel-name` gives every non-NULL `CUfunction`.
static KERNEL_NAME: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

/// A `cuFuncGetName` that answers `--kernel-name` (CUDA_ERROR_NOT_FOUND without one).
unsafe extern "C" fn fixed_kernel_name(name: *mut *const std::ffi::c_char, _f: u64) -> i32 {
    match KERNEL_NAME.get() {
        Some(n) => {
            // SAFETY: the runtime passes a writable out-pointer, as to cuFuncGetName.
            unsafe { *name = n.as_ptr() };
            0
        }
        None => 500,
    }
}

/// Makes `gpubpf_get_kernel_name` answer `name` for every `CUfunction` but NULL (without
/// it the helper answers `-ENOENT`, as outside the shim). A name with a NUL is an error.
pub fn set_kernel_name(name: &str) -> Result<(), String> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| format!("--kernel-name {name:?}: contains a NUL byte"))?;
    let _ = KERNEL_NAME.set(c);
    gpubpf_runtime::helpers::set_kernel_name_resolver(Some(fixed_kernel_name));
    Ok(())
}

/// The standard helper table with the deterministic replacements above.
pub fn helpers() -> HelperTable {
    let mut t = standard_helpers();
    for (id, name, f, args) in [
        (
            KTIME_GET_NS,
            "bpf_ktime_get_ns",
            ktime_get_ns as extern "C" fn(u64, u64, u64, u64, u64) -> u64,
            0u8,
        ),
        (TRACE_PRINTK, "bpf_trace_printk", trace_printk, 5),
        (GET_PRANDOM_U32, "bpf_get_prandom_u32", prandom_u32, 0),
        (DELAY_NS, "gpubpf_delay_ns", delay_ns, 1),
        (
            GET_CURRENT_PID_TGID,
            "bpf_get_current_pid_tgid",
            pid_tgid,
            0,
        ),
        (GET_CURRENT_UID_GID, "bpf_get_current_uid_gid", uid_gid, 0),
    ] {
        let args = t.arg_count(id).unwrap_or(args);
        t.register_with_args(id, name, f, args);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replacements_follow_the_installed_run() {
        let env = RunEnv {
            pid: 42,
            tid: 43,
            uid: 1000,
            gid: 100,
            run: 2,
            seed: 7,
        };
        env.install();
        assert_eq!(pid_tgid(0, 0, 0, 0, 0), (42 << 32) | 43);
        assert_eq!(uid_gid(0, 0, 0, 0, 0), (100 << 32) | 1000);
        assert_eq!(ktime_get_ns(0, 0, 0, 0, 0), 2_000_000_000);
        assert_eq!(ktime_get_ns(0, 0, 0, 0, 0), 2_000_000_000 + CLOCK_STEP_NS);
        let a = prandom_u32(0, 0, 0, 0, 0);
        let fmt = b"n=%d\0";
        assert_eq!(trace_printk(fmt.as_ptr() as u64, 5, 5, 0, 0), 3);
        assert_eq!(take_printk(), ["n=5"]);
        env.install();
        assert_eq!(
            prandom_u32(0, 0, 0, 0, 0),
            a,
            "the same run of the same seed gives the same stream"
        );
        RunEnv { run: 3, ..env }.install();
        assert_ne!(prandom_u32(0, 0, 0, 0, 0), a, "each run its own stream");
        env.install();
        let t = helpers();
        assert_eq!(
            t.get(GET_CURRENT_PID_TGID).map(|f| f(0, 0, 0, 0, 0)),
            Some((42 << 32) | 43)
        );
    }
}
