//! Time, randomness and identity helpers.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Once;

/// Bumped in every child after `fork`, so that per-thread caches of pid/tid are refreshed.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(1);
static ATFORK: Once = Once::new();

/// The process id for [`pid`]: 0 until first asked, and again in a child after `fork`.
static PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    PID.store(0, Ordering::Relaxed);
}

/// Registers [`after_fork_in_child`] (once per process).
fn watch_forks() {
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function without captured state.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// The calling process's id, without a system call: one load of a process-wide word (not
/// a thread-local, which a shared library reaches through `__tls_get_addr`, a call into the
/// dynamic loader and two more pages per use).
#[inline]
pub(super) fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => pid_first(),
        p => p,
    }
}

#[cold]
#[inline(never)]
fn pid_first() -> u32 {
    // Registered before the id is cached, so that a fork after the store resets it.
    watch_forks();
    // SAFETY: getpid cannot fail.
    let p = unsafe { libc::getpid() }.unsigned_abs();
    PID.store(p, Ordering::Relaxed);
    p
}

thread_local! {
    /// (fork generation, pid << 32 | tid)
    static PID_TGID: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    static PRNG: Cell<u64> = const { Cell::new(0) };
}

/// `u64 bpf_ktime_get_ns(void)`: `CLOCK_MONOTONIC` in nanoseconds, read from the time stamp
/// counter between anchors where it can stand in for the kernel's clock (`clock`).
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    super::clock::now_ns()
}

/// `u32 bpf_get_prandom_u32(void)`: a per-thread xorshift64* stream seeded from the
/// kernel's random pool.
pub extern "C" fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    PRNG.with(|s| {
        let mut x = s.get();
        if x == 0 {
            let mut b = [0u8; 8];
            // SAFETY: writes at most 8 bytes into `b`.
            let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, libc::GRND_NONBLOCK) };
            x = if n == 8 { u64::from_ne_bytes(b) } else { 0 };
            x ^= ktime_get_ns(0, 0, 0, 0, 0) ^ (u64::from(std::process::id()) << 17);
            x |= 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) & 0xffff_ffff
    })
}

/// `u64 bpf_get_current_pid_tgid(void)`: process id (tgid) high, thread id low. Cached per
/// thread (no syscall on the hot path), refreshed after `fork`.
pub extern "C" fn get_current_pid_tgid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let gen = FORK_GENERATION.load(Ordering::Relaxed);
    PID_TGID.with(|c| {
        let (g, v) = c.get();
        if g == gen {
            return v;
        }
        watch_forks();
        // SAFETY: getpid and gettid cannot fail.
        let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
        let v = (u64::from(pid) << 32) | u64::from(tid);
        c.set((FORK_GENERATION.load(Ordering::Relaxed), v));
        v
    })
}

/// The process's real ids as `bpf_get_current_uid_gid` returns them; [`UID_GID_UNSET`]
/// until the first call.
static UID_GID: AtomicU64 = AtomicU64::new(UID_GID_UNSET);
/// No uid/gid pair is all ones (-1 is not a valid id).
const UID_GID_UNSET: u64 = u64::MAX;

/// `u64 bpf_get_current_uid_gid(void)`: gid high, uid low (real ids, as in Linux). Read once
/// per process and cached (no syscall on the hot path); a child of `fork` inherits both the
/// ids and the cache. A `setuid`/`setgid` made by the application after its first policed
/// call is not seen: policies keep attributing it to the ids it started with (a process
/// that changes identity to escape a per-user quota keeps being charged to the first one).
pub extern "C" fn get_current_uid_gid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let v = UID_GID.load(Ordering::Relaxed);
    if v != UID_GID_UNSET {
        return v;
    }
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let v = (u64::from(gid) << 32) | u64::from(uid);
    UID_GID.store(v, Ordering::Relaxed);
    v
}

/// `long bpf_get_current_comm(void *buf, u32 size)`: the thread's name, NUL-terminated
/// and truncated to `size`; the rest of `buf` is zeroed. The name is cached per thread for
/// one tick of the coarse monotonic clock ([`current_comm`]): no syscall per call.
pub extern "C" fn get_current_comm(buf: u64, size: u64, _: u64, _: u64, _: u64) -> u64 {
    if buf == 0 || size == 0 {
        return super::neg_errno(libc::EINVAL);
    }
    let name = current_comm();
    let size = size as usize;
    // SAFETY: the verifier proved `buf` writable for `size` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) };
    out.fill(0);
    let len = name
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(16)
        .min(size - 1);
    out[..len].copy_from_slice(&name[..len]);
    0
}

thread_local! {
    /// This thread's name as `PR_GET_NAME` last gave it, and the coarse clock's reading
    /// then ([`COMM_UNREAD`] before the first).
    static COMM: Cell<([u8; 16], u64)> = const { Cell::new(([0; 16], COMM_UNREAD)) };
}
/// No coarse clock reading is all ones.
const COMM_UNREAD: u64 = u64::MAX;

/// The calling thread's name (16 bytes, NUL-padded; a name of 16 bytes has none). Asking
/// the kernel is a `prctl` system call (~130 ns on the development VM, against ~5 ns for a
/// vDSO read of `CLOCK_MONOTONIC_COARSE`), so the answer is reused while the coarse clock
/// reads the same value: a thread renamed (`pthread_setname_np`, `PR_SET_NAME`, a write to
/// `/proc/self/task/TID/comm`) is seen under its new name one tick later at most (1–10 ms,
/// the kernel's `HZ`); Linux's own helper reads the name the task has at that moment.
pub fn current_comm() -> [u8; 16] {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC_COARSE is answered by the vDSO.
    let tick = if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } == 0 {
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    } else {
        COMM_UNREAD
    };
    let cached = COMM.try_with(Cell::get).ok();
    if let Some((name, at)) = cached {
        if at == tick && tick != COMM_UNREAD {
            return name;
        }
    }
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes (and a NUL) into `name`.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let mut comm = [0u8; 16];
    comm.copy_from_slice(&name[..16]);
    let _ = COMM.try_with(|c| c.set((comm, tick)));
    comm
}

/// `long gpubpf_delay_ns(u64 ns)`: sleeps `ns` nanoseconds, at most
/// [`gpubpf_verifier::helpers::GPUBPF_MAX_DELAY_NS`]; returns the bounded request.
pub extern "C" fn delay_ns(ns: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let ns = bounded_delay(ns);
    if ns > 0 {
        // Resumes after a signal until the whole time has passed.
        std::thread::sleep(std::time::Duration::from_nanos(ns));
    }
    ns
}

/// What `gpubpf_delay_ns` sleeps for a request of `ns`.
pub fn bounded_delay(ns: u64) -> u64 {
    ns.min(gpubpf_verifier::helpers::GPUBPF_MAX_DELAY_NS)
}
