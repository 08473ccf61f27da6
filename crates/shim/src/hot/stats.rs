//! The process's statistics (`gpubpf ps`: calls, refusals and program runs counted into
//! this thread's shard of the stats file) and audit ring, as the hot path reaches them.

use std::fmt::Write as _;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use gpubpf_runtime::dispatch::{AttachedProgram, Decision, RunRecorder};
use gpubpf_runtime::helpers::text::Text;
use gpubpf_runtime::maps::Map;
use gpubpf_runtime::registry::audit::AuditRecordRef;
use gpubpf_runtime::registry::monotonic_ns;
use gpubpf_runtime::registry::procstats::{Counter, Counters, ProcStats};

use super::{ThreadState, HOT};

/// This process's stats file (`gpubpf ps`), leaked so that a call may use it without a
/// reference count; null when the process has none (unregistered, or a forked child that
/// has not re-initialised yet).
static STATS: AtomicPtr<ProcStats> = AtomicPtr::new(null_mut());

/// The registry's audit ring (`gpubpf audit`), leaked; null when the process has none.
static AUDIT: AtomicPtr<Map> = AtomicPtr::new(null_mut());

/// Makes `ring` the audit ring decisions are written to (leaked: calls in flight may still
/// write to it).
pub fn set_audit(ring: Arc<Map>) {
    let old = AUDIT.swap(Arc::into_raw(ring).cast_mut(), Ordering::AcqRel);
    // The old ring, if any, is leaked on purpose: a call in flight may still hold it.
    let _ = old;
}

/// Writes one decision to the audit ring (a full ring drops it and counts the drop).
#[cold]
#[inline(never)]
fn audit(ctx: &[u64], prog: &AttachedProgram, d: Decision) {
    let p = AUDIT.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: a non-null value was leaked by `set_audit` and is never freed.
    let ring = unsafe { &*p };
    let w0 = ctx.first().copied().unwrap_or(0);
    let w2 = ctx.get(2).copied().unwrap_or(0);
    let api_id = w0 as u32;
    // Names are borrowed and the record is encoded on the stack: a policy refusing every
    // call (an application retrying a refused allocation) allocates nothing here.
    let mut unknown = Text::<16>::new();
    let api = match gpubpf_runtime::attach::by_id(api_id) {
        Some(a) => a.name,
        None => {
            let _ = write!(unknown, "api#{api_id}");
            unknown.as_str()
        }
    };
    let rec = AuditRecordRef {
        time_ns: monotonic_ns(),
        realtime_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)),
        pid: w2 as u32,
        tid: (w2 >> 32) as u32,
        api_id,
        api,
        phase: prog.phase.as_str(),
        object: &prog.object,
        program: &prog.name,
        verdict: d.verdict,
        previous: d.previous,
        shadow: d.shadow,
    };
    let mut buf = [0u8; 1024];
    match rec.encode_into(&mut buf) {
        Some(n) => {
            let _ = ring.ringbuf_output_raw(&buf[..n]);
        }
        // Names longer than the buffer (object and program names are not bounded).
        None => {
            let _ = ring.ringbuf_output_raw(&rec.encode());
        }
    }
}

/// Makes `stats` this process's stats file (leaked: calls in flight may still count into
/// it, so it is never unmapped) and `until` the registry's statistics switch.
#[inline(never)]
pub fn set_stats(stats: Option<ProcStats>, until: &'static AtomicU64) {
    HOT.stats_until
        .store((until as *const AtomicU64).cast_mut(), Ordering::Release);
    let p = stats.map_or(null_mut(), |s| Box::into_raw(Box::new(s)));
    STATS.store(p, Ordering::Release);
    // SAFETY: a non-null `p` was just leaked and is never freed.
    let counters = unsafe { p.as_ref() }.map_or(null_mut(), |s| s.counters().as_ptr().cast_mut());
    HOT.counters.store(counters, Ordering::Release);
}

/// Stops counting into the stats file (a forked child, until it has one of its own).
/// Async-signal-safe.
pub(super) fn forget_stats() {
    HOT.counters.store(null_mut(), Ordering::Release);
    STATS.store(null_mut(), Ordering::Release);
}

/// This process's stats file, if it has one.
#[inline(never)]
pub fn current_stats() -> Option<&'static ProcStats> {
    stats()
}

pub(super) fn stats() -> Option<&'static ProcStats> {
    let p = STATS.load(Ordering::Acquire);
    // SAFETY: a non-null value was leaked by `set_stats` and is never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The counters of this process's stats file, if it has one.
#[inline(always)]
fn counters() -> Option<Counters<'static>> {
    let p = HOT.counters.load(Ordering::Acquire);
    // SAFETY: a non-null value is `Counters::as_ptr` of a stats file `set_stats` leaked.
    (!p.is_null()).then(|| unsafe { Counters::from_ptr(p) })
}

/// Whether run statistics are being collected now: the registry's switch holds a deadline
/// in the future.
#[inline]
fn timing() -> bool {
    let p = HOT.stats_until.load(Ordering::Relaxed);
    if p.is_null() {
        return false;
    }
    // SAFETY: set from the registry's control block, which lives (leaked in a `OnceLock`)
    // for the rest of the process.
    let until = unsafe { &*p };
    let deadline = until.load(Ordering::Relaxed);
    if deadline == 0 || deadline == HOT.expired.load(Ordering::Relaxed) {
        return false;
    }
    timing_until(deadline)
}

/// Whether `deadline` (set, not known to be expired) is still in the future; records it as
/// expired when it is not. Out of line: statistics are off on almost every call.
#[cold]
#[inline(never)]
fn timing_until(deadline: u64) -> bool {
    if monotonic_ns() < deadline {
        return true;
    }
    HOT.expired.store(deadline, Ordering::Relaxed);
    false
}

/// Adds one to counter `c(slot)` of `thread`'s shard of the stats file (nothing without a
/// slot or a stats file). A thread with a shard of its own adds in line: one load of the
/// shard's address from its state, one load and one store of the counter.
#[inline(always)]
pub(super) fn count(thread: &ThreadState, c: impl FnOnce(u32) -> Counter, slot: Option<u32>) {
    count_n(thread, c, slot, 1);
}

#[inline(always)]
fn count_n(thread: &ThreadState, c: impl FnOnce(u32) -> Counter, slot: Option<u32>, v: u64) {
    let Some(slot) = slot else {
        return;
    };
    match thread.own.get() {
        Some(own) => own.add(c(slot), v),
        None => count_shared(thread, c(slot), v),
    }
}

/// [`count`] for a thread without a shard of its own yet (it claims one here), on the
/// shared shard 0 (atomic addition), or in a process without a stats file.
#[cold]
#[inline(never)]
fn count_shared(thread: &ThreadState, c: Counter, v: u64) {
    let Some(counters) = counters() else {
        return;
    };
    if let Some(shard) = thread.shard() {
        counters.add(shard, c, v);
    }
}

/// What a run reports to the stats file: timed runs while the registry's statistics switch
/// is on, faults always, into the thread's shard ([`count`]).
pub(super) struct Recorder {
    thread: &'static ThreadState,
    timing: bool,
}

impl Recorder {
    #[inline(always)]
    pub(super) fn new(thread: &'static ThreadState) -> Self {
        Recorder {
            thread,
            timing: timing(),
        }
    }

    /// A run that was timed or failed: counts it (out of line, as both are rare).
    #[cold]
    #[inline(never)]
    fn finish_counted(&self, slot: Option<u32>, start: Option<u64>, fault: bool) {
        if let Some(t0) = start {
            count(self.thread, Counter::runs, slot);
            let ns = monotonic_ns().saturating_sub(t0);
            count_n(self.thread, Counter::run_ns, slot, ns);
        }
        if fault {
            count(self.thread, Counter::faults, slot);
        }
    }

    /// Adds one to counter `c(slot)` ([`count`]).
    pub(super) fn add(&self, c: impl FnOnce(u32) -> Counter, slot: Option<u32>) {
        count(self.thread, c, slot);
    }
}

impl RunRecorder for Recorder {
    /// Runs are counted one by one only while run statistics are collected; a failed run
    /// is counted either way (`finish`).
    #[inline(always)]
    fn counts_runs(&self) -> bool {
        self.timing
    }

    #[inline]
    fn start(&mut self) -> Option<u64> {
        self.timing.then(monotonic_ns)
    }

    #[inline]
    fn finish(&mut self, slot: Option<u32>, start: Option<u64>, fault: bool) {
        if start.is_some() || fault {
            self.finish_counted(slot, start, fault);
        }
    }

    fn decision(&mut self, ctx: &[u64], prog: &AttachedProgram, d: Decision) {
        if d.shadow {
            self.add(Counter::shadow_denied, prog.stats_slot);
        }
        audit(ctx, prog, d);
    }
}
