//! `CLOCK_MONOTONIC` for `bpf_ktime_get_ns`, read from the time stamp counter between
//! anchors (docs/design-decisions.md, "bpf_ktime_get_ns").
//!
//! In a real application the driver's work evicts what a policed call touched, and
//! `clock_gettime` then costs its glibc wrapper's lines, the vDSO's code and its data page:
//! ~80 ns a call on a cold path (docs/shim.md, "The cold path, rung by rung"). Here a read
//! is `lfence; rdtsc`, one line of parameters and a multiply. The parameters describe a
//! line through (`tsc0`, `ns0`) of slope `mult` (ns per tick, 32.32 fixed point), valid up
//! to tick `until` (~10 ms on). The first call past it re-anchors from `clock_gettime`:
//! the new line starts at the old line's value at that tick (continuous, so that no thread
//! sees time go back: a policy computes `now - start`) and its slope is chosen to meet
//! `CLOCK_MONOTONIC` at the end of the next interval, within [rate/2, 2·rate], so the line
//! stays within microseconds of the kernel's clock across processes; a gap over 1 ms ahead
//! of the line is jumped (forward only). The rate comes from two `clock_gettime` samples 1–2 s
//! apart (until there is one at least 1 ms old, every call reads `clock_gettime`). Without an
//! invariant TSC, with a kernel clocksource other than `tsc`, and off x86-64 every call
//! reads `clock_gettime`.
//!
//! The parameters are a seqlock: a writer (one re-anchoring call, by compare-and-swap)
//! makes `seq` odd, writes, makes it even; a reader retries when `seq` moved or was odd.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::registry::monotonic_ns;

/// How long a line is used before it is re-anchored.
const INTERVAL_NS: u64 = 10_000_000;
/// A gap between the kernel's clock and the line beyond which the line jumps (forward).
const JUMP_NS: u64 = 1_000_000;
/// The shortest calibration baseline, and when the newer sample moves on.
const MIN_BASE_NS: u64 = 1_000_000;
const ROLL_NS: u64 = 1_000_000_000;
/// Readers wait this many rounds for a writer before reading `clock_gettime` themselves.
const SPINS: u32 = 10_000;

#[repr(C, align(64))]
struct Params {
    seq: AtomicU32,
    tsc0: AtomicU64,
    ns0: AtomicU64,
    mult: AtomicU64,
    until: AtomicU64,
    /// Calibration samples (tick, ns): the older one and the newer one; written by the
    /// writer only, under `seq`.
    cal: [AtomicU64; 4],
}

static P: Params = Params {
    seq: AtomicU32::new(0),
    tsc0: AtomicU64::new(0),
    ns0: AtomicU64::new(0),
    mult: AtomicU64::new(0),
    until: AtomicU64::new(0),
    cal: [const { AtomicU64::new(0) }; 4],
};

/// 0: not decided yet, 1: the TSC is used, 2: `clock_gettime` only.
static MODE: AtomicU8 = AtomicU8::new(0);

/// What one look at the parameters found.
enum Look {
    /// The time.
    Time(u64),
    /// The line has expired (or there is none yet): `seq` was this.
    Expired(u32),
    /// A writer is at work, or the parameters changed while they were read.
    Busy,
}

/// One seqlock read of the parameters and the counter.
#[inline(always)]
fn look() -> Look {
    let s1 = P.seq.load(Ordering::Acquire);
    if s1 & 1 != 0 {
        return Look::Busy;
    }
    let tsc0 = P.tsc0.load(Ordering::Relaxed);
    let ns0 = P.ns0.load(Ordering::Relaxed);
    let mult = P.mult.load(Ordering::Relaxed);
    let until = P.until.load(Ordering::Relaxed);
    let t = tsc();
    fence(Ordering::Acquire);
    if P.seq.load(Ordering::Relaxed) != s1 {
        return Look::Busy;
    }
    if t >= until {
        return Look::Expired(s1);
    }
    Look::Time(line_at(t, tsc0, ns0, mult))
}

/// The line through (`tsc0`, `ns0`) of slope `mult` at tick `t`; its start for a `t` before
/// `tsc0` (this processor's counter a hair behind the anchoring one's).
#[inline(always)]
fn line_at(t: u64, tsc0: u64, ns0: u64, mult: u64) -> u64 {
    match t.checked_sub(tsc0) {
        Some(ticks) => ns0.wrapping_add(scale(ticks, mult)),
        None => ns0,
    }
}

/// `bpf_ktime_get_ns`: `CLOCK_MONOTONIC` in nanoseconds (see the module's notes).
#[inline]
pub(crate) fn now_ns() -> u64 {
    match look() {
        Look::Time(v) => v,
        Look::Expired(s) => reanchor(s),
        Look::Busy => wait_for_writer(),
    }
}

/// A writer is at work: waits for its line (bounded: a writer preempted for long, or one
/// that will never finish, leaves this call the kernel's clock, which may read up to the
/// line's small lead behind what the line gave before).
#[cold]
#[inline(never)]
fn wait_for_writer() -> u64 {
    for _ in 0..SPINS {
        match look() {
            Look::Time(v) => return v,
            Look::Expired(s) => return reanchor(s),
            Look::Busy => std::hint::spin_loop(),
        }
    }
    monotonic_ns()
}

/// `ticks` × `mult` (32.32) in ns.
#[inline(always)]
fn scale(ticks: u64, mult: u64) -> u64 {
    ((u128::from(ticks) * u128::from(mult)) >> 32) as u64
}

/// The time stamp counter, ordered after the loads before it; 0 where there is none.
#[inline(always)]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` and `rdtsc` exist on every x86-64 processor and have no operands.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// Whether the TSC can stand in for the kernel's clock here (decided once).
fn tsc_usable() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = invariant_tsc() && kernel_uses_tsc();
            MODE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            if ok {
                // SAFETY: registers a handler that only stores to atomics.
                unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
            }
            ok
        }
    }
}

/// A forked child may have been forked while another thread held `seq` odd: it starts
/// over (every call reads `clock_gettime` until it has calibrated again).
extern "C" fn forked_child() {
    for c in &P.cal {
        c.store(0, Ordering::Relaxed);
    }
    P.until.store(0, Ordering::Relaxed);
    P.seq.store(0, Ordering::Release);
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    // Leaf 0x8000_0000 says which extended leaves exist; 0x8000_0007 EDX bit 8: invariant TSC.
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// Whether the kernel keeps time with the TSC itself (a kernel that found it unreliable
/// switched to another clocksource).
fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// The line in `seq` state `s` did not cover now: reads the kernel's clock and, as the one
/// writer (or after waiting for another), anchors a new line; returns the time.
#[cold]
#[inline(never)]
fn reanchor(s: u32) -> u64 {
    if !tsc_usable() {
        return monotonic_ns();
    }
    if P.seq
        .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Another thread is re-anchoring (or just did): read its line.
        return wait_for_writer();
    }
    fence(Ordering::Release);
    let (t, ns) = sample();
    let v = write_line(t, ns);
    P.seq.store(s.wrapping_add(2), Ordering::Release);
    v
}

/// A (tick, ns) pair from the counter and the kernel's clock: the counter's midpoint around
/// `clock_gettime`, the tightest of three tries (a thread preempted between the two reads
/// would pair a tick with a time milliseconds later).
fn sample() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..3 {
        let t1 = tsc();
        let ns = monotonic_ns();
        let t2 = tsc();
        let width = t2.wrapping_sub(t1);
        if width < best.0 {
            best = (width, t1.wrapping_add(width / 2), ns);
        }
    }
    (best.1, best.2)
}

/// Under the writer's `seq`: the new line anchored at tick `t`, where the kernel's clock
/// reads `ns`; returns the line's value at `t`.
fn write_line(t: u64, ns: u64) -> u64 {
    let [mut a_t, mut a_ns, mut b_t, mut b_ns] =
        [0, 1, 2, 3].map(|i| P.cal[i].load(Ordering::Relaxed));
    if b_ns == 0 || t < b_t {
        // First sample (or the counter went back): calibrate from here.
        [a_t, a_ns, b_t, b_ns] = [t, ns, t, ns];
    } else if ns.saturating_sub(b_ns) >= ROLL_NS {
        [a_t, a_ns, b_t, b_ns] = [b_t, b_ns, t, ns];
    }
    for (i, v) in [a_t, a_ns, b_t, b_ns].into_iter().enumerate() {
        P.cal[i].store(v, Ordering::Relaxed);
    }
    let base_ns = ns.saturating_sub(a_ns);
    let base_t = t.saturating_sub(a_t);
    if base_ns < MIN_BASE_NS || base_t == 0 {
        // Not calibrated yet: no line (every call reads the kernel's clock).
        P.until.store(0, Ordering::Relaxed);
        return ns;
    }
    let rate = ((u128::from(base_ns) << 32) / u128::from(base_t)).max(1) as u64;
    let (tsc0, ns0, mult, until) = (
        P.tsc0.load(Ordering::Relaxed),
        P.ns0.load(Ordering::Relaxed),
        P.mult.load(Ordering::Relaxed),
        P.until.load(Ordering::Relaxed),
    );
    // Where the old line is at `t` (continuity), unless there is none or it lags by more
    // than JUMP_NS (then the kernel's clock, a step forward).
    let on_old = (until != 0).then(|| line_at(t, tsc0, ns0, mult));
    let start = match on_old {
        Some(v) if v.saturating_add(JUMP_NS) >= ns => v,
        _ => ns,
    };
    let interval_t = ((u128::from(INTERVAL_NS) << 32) / u128::from(rate)).max(1) as u64;
    let target = ns + INTERVAL_NS;
    let want = ((u128::from(target.saturating_sub(start)) << 32) / u128::from(interval_t)) as u64;
    let new_mult = want.clamp(rate / 2, rate.saturating_mul(2));
    P.tsc0.store(t, Ordering::Relaxed);
    P.ns0.store(start, Ordering::Relaxed);
    P.mult.store(new_mult, Ordering::Relaxed);
    P.until
        .store(t.saturating_add(interval_t), Ordering::Relaxed);
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every thread's readings never go back, across many re-anchors, and stay within
    /// 20 µs of the kernel's clock read just before and after (49 ns on the development VM;
    /// the bound leaves room for a loaded machine).
    #[test]
    fn each_thread_sees_time_go_forward_close_to_the_kernels_clock() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let end = monotonic_ns() + 1_500_000_000;
                    let mut last = 0u64;
                    let mut worst = 0u64;
                    let mut n = 0u64;
                    loop {
                        let before = monotonic_ns();
                        let v = now_ns();
                        let after = monotonic_ns();
                        assert!(v >= last, "time went back: {last} then {v}");
                        last = v;
                        let off = if v < before {
                            before - v
                        } else {
                            v.saturating_sub(after)
                        };
                        worst = worst.max(off);
                        n += 1;
                        if after > end {
                            break;
                        }
                    }
                    (worst, n)
                })
            })
            .collect();
        for t in threads {
            let (worst, n) = t.join().expect("thread");
            eprintln!(
                "mode {}: {n} readings, at most {worst} ns outside the kernel's clock's bracket",
                MODE.load(Ordering::Relaxed)
            );
            assert!(n > 1000, "{n} readings");
            assert!(worst < 20_000, "{worst} ns from the kernel's clock");
        }
        if MODE.load(Ordering::Relaxed) == 1 {
            assert!(P.until.load(Ordering::Relaxed) != 0, "never calibrated");
        }
    }

    #[test]
    fn scale_is_32_32_fixed_point() {
        // 2^32 is one ns per tick.
        assert_eq!(scale(1_000, 1 << 32), 1_000);
        assert_eq!(scale(1_000, 3 << 31), 1_500);
        assert_eq!(scale(u64::MAX, 1 << 32), u64::MAX);
    }
}
