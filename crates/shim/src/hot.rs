//! The hot path every generated wrapper runs.
//!
//! A wrapper (`generated.rs`) does, for its attach point `P` and variant `V`:
//!
//! 1. [`armed`]`(P)`: one relaxed atomic load of the point's *hint* pointer. Null — the
//!    common case, nothing attached — and the wrapper calls the real driver function
//!    ([`real`]`(V)`: one more load of the cached, lazily resolved address) and returns its
//!    result. Nothing else happens: no syscall, lock, allocation or `getenv`.
//! 2. Otherwise (a chain is published, or the shim is not initialised yet, which the
//!    [`UNINIT`] sentinel marks) the wrapper builds the ctx, an array of 64-bit words on its
//!    stack sized by the catalog, with the argument slots at the offsets `docs/ctx-abi.md`
//!    fixes, and calls [`enter`] (out of line, shared by every wrapper). Unless this thread
//!    is already inside a policy or the shim's own initialisation (re-entrant calls go
//!    straight to the driver), it initialises lazily ([`crate::init::ensure`], skipped once
//!    `HOT.ready` says it is done), then holds the point's chain for the whole call: the
//!    outermost policed call of a thread through the thread's chain cache (an `Arc` per
//!    point, refreshed with `load_full` only when the point's hint no longer names the
//!    cached chain, so a steady state costs no atomic read-modify-write), a call nested in
//!    another one's driver call on the same thread by a reference of its own (`load_full`).
//!    Either keeps that chain alive until the call has left, however often the watcher
//!    thread publishes a new one meanwhile (RCU). A thread's cache keeps the last chain it
//!    used per point alive until the thread uses that point again or exits. It then fills
//!    the header and runs the entry programs (a non-zero verdict skips the real call). An
//!    outermost call reads what it needs of its chain (flags, statistics slot, a lone
//!    native program's entry point) from the chain's summary in its thread's state
//!    (`gpubpf_runtime::dispatch::ChainSummary`, set with the thread's last chain), not
//!    from the chain's and the program's own lines: two dependent cache misses fewer.
//! 3. The real call with writable arguments read back from their slots. A call whose
//!    chain has no exit program (and which is not recorded) has ended in [`enter`], which
//!    then returns `None`: the wrapper only calls the driver and returns its result. Any
//!    other reads its out-values after success ([`read_out`]), runs [`Policed::exit`] (exit
//!    programs, which may override the result; out of line too; it releases the chain),
//!    and writes back writable out-values ([`write_out`]).
//!
//! Rare branches (a nested call, a changed chain, the first call of a thread, the device
//! or capture questions, refusals, faults, recording) are `#[cold]` functions, so that the
//! common path is a few contiguous cache lines (docs/shim.md, "Cache lines of a policed
//! call").
//!
//! The BPF stack is per thread (`ThreadState`). A program fault counts as verdict 0 and is
//! logged once per process; nothing here panics or unwinds into the application (the
//! engines are entered through `catch_unwind`).

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_void, CStr};
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use gpubpf_runtime::attach::abi::{W_API_ID_PHASE, W_DEVICE_FLAGS, W_PID_TID, W_RESULT_VARIANT};
use gpubpf_runtime::dispatch::{Chain, ChainSummary, Stack};
use gpubpf_runtime::helper_table::STACK_SIZE;
use gpubpf_runtime::registry::monotonic_ns;
use gpubpf_runtime::registry::procstats::{Counter, OwnShard};

use crate::abi_types::CUresult;
use crate::generated::{POINT_COUNT, VARIANTS, VARIANT_COUNT};

/// What a wrapper returns when the real driver function cannot be called: the driver
/// library could not be opened or does not export the symbol (`CUDA_ERROR_NOT_FOUND`,
/// "a named symbol was not found").
pub const NO_DRIVER: CUresult = 500;

/// The code address of a wrapper, for the routing tables.
#[derive(Clone, Copy, Debug)]
pub struct Wrapper(pub *const c_void);

// SAFETY: a code address, never dereferenced as data; sharing it between threads is as safe
// as sharing a function pointer.
unsafe impl Sync for Wrapper {}

/// One exported driver symbol: its name, attach point and wrapper.
#[derive(Debug)]
pub struct VariantEntry {
    /// Exported symbol, e.g. `cuMemAlloc_v2`.
    pub symbol: &'static CStr,
    /// Index of its attach point in `gpubpf_runtime::attach::all()`.
    pub point: u16,
    /// The shim's wrapper of that symbol.
    pub wrapper: Wrapper,
}

/// Per attach point: the published chain and a plain pointer to it for the one-load test.
struct Slot {
    /// Null when nothing is attached, [`UNINIT`] before initialisation, else the address
    /// of the chain in `chain` (only compared, never dereferenced).
    hint: AtomicPtr<Published>,
    chain: ArcSwapOption<Published>,
}

/// Hint value before the shim is initialised: sends the first call of every wrapper to
/// the slow path, which initialises. No chain is ever at this (dangling, aligned) address.
pub const UNINIT: *mut Published = NonNull::<Published>::dangling().as_ptr();

static SLOTS: [Slot; POINT_COUNT] = [const {
    Slot {
        hint: AtomicPtr::new(UNINIT),
        chain: ArcSwapOption::const_empty(),
    }
}; POINT_COUNT];

/// Real driver function per variant, resolved on first use; [`MISSING`] when the driver
/// has no such symbol.
static REAL: [AtomicPtr<c_void>; VARIANT_COUNT] =
    [const { AtomicPtr::new(null_mut()) }; VARIANT_COUNT];

/// Marks a symbol the driver does not export (so it is not looked up again).
const MISSING: *mut c_void = NonNull::<u64>::dangling().as_ptr().cast();

/// What every policed call reads of the process's state, in one cache line: in a real
/// CUDA application the driver's own work between two calls evicts most of what a call
/// touched, so each line a call reads costs a miss (docs/shim.md, "Cache lines of a
/// policed call"). The public functions that touch it are `#[inline(never)]`: one another
/// crate could inline would export it from the rlib, and code then reaches an exported
/// static through a GOT slot, one more dependent load per call (`tests/shim_got.rs`).
#[repr(C, align(64))]
struct Hot {
    /// Process id for `hdr.pid`, set at initialisation and in a forked child.
    pid: AtomicU32,
    /// The process records its calls (`GPUBPF_RECORD`).
    recording: AtomicBool,
    /// Initialised ([`crate::init::ensure`] has nothing to do; cleared in a forked child
    /// until it has re-initialised): a call's only test of the initialisation state.
    ready: AtomicBool,
    /// The registry's "collect run statistics until" word (control block), null before
    /// initialisation.
    stats_until: AtomicPtr<AtomicU64>,
    /// The last statistics deadline this process found expired: later calls skip the
    /// clock until the registry's switch holds another one. Kept here, not by clearing the
    /// shared word: another user's process maps a system registry's control block
    /// read-only, and a store there would fault inside the application.
    expired: AtomicU64,
    /// The counters of this process's stats file (`Counters::as_ptr` of the one
    /// `set_stats` leaked), null when it has none.
    counters: AtomicPtr<AtomicU64>,
}

static HOT: Hot = Hot {
    pid: AtomicU32::new(0),
    recording: AtomicBool::new(false),
    ready: AtomicBool::new(false),
    stats_until: AtomicPtr::new(null_mut()),
    expired: AtomicU64::new(0),
    counters: AtomicPtr::new(null_mut()),
};

/// Whether this process records its calls.
#[inline(always)]
pub(crate) fn recording() -> bool {
    HOT.recording.load(Ordering::Relaxed)
}

/// Marks the process initialised (`true`, once [`crate::init::ensure`] has completed) or
/// not (`false`: a forked child, until its first call re-initialises it). Async-signal-safe.
#[inline(never)]
pub fn set_ready(ready: bool) {
    HOT.ready.store(ready, Ordering::Release);
}

/// Makes this process record its calls (`crate::record::start`, once its sink is set).
#[inline(never)]
pub fn set_recording() {
    HOT.recording.store(true, Ordering::Release);
}

/// `ThreadState::last_point` before a thread's first policed call.
const NO_POINT: u32 = u32::MAX;

/// Shard value of a thread that has not claimed a counter shard yet.
const UNCLAIMED: u32 = u32::MAX;

/// Per-call state kept in the thread's state rather than in the wrapper's handle (so that
/// the handle stays two words): one frame per nesting depth of policed calls on a thread;
/// calls nested deeper than that share the last frame.
const FRAMES: usize = 8;

/// Low bits of a [`Policed`] handle's chain address that hold the call's depth (chains are
/// at least 8-byte aligned).
const DEPTH_MASK: usize = FRAMES - 1;
/// The bit of a [`Policed`] handle's chain address that says an entry program refused the
/// call (its verdict is in the call's frame): a wrapper tests it in a register.
const REFUSED: usize = FRAMES;
const _: () = assert!(std::mem::align_of::<Published>() >= 2 * FRAMES);

/// What a policed call remembers between its entry and exit programs.
#[derive(Clone, Copy, Debug, Default)]
struct Frame {
    /// Monotonic time at entry when the process records its calls (`GPUBPF_RECORD`), else 0.
    t_entry: u64,
    /// The verdict an entry program refused the call with (a driver error, never 0), or 0.
    verdict: CUresult,
    /// The application's return address, when a program of the chain asks for it
    /// (`gpubpf_get_caller`), else 0.
    caller: u64,
}

/// Everything a thread keeps for the shim, in one heap block ([`ThreadSlot`]) whose
/// address a policed call reads through [`thread_ptr`] (a TLS descriptor, not
/// `__tls_get_addr`).
///
/// `repr(C, align(64))`: what every policed call reads and writes (the counters, ids,
/// the stack's flag, the last chain used, the outermost call's frame) is the first cache
/// line; the chain cache (one line per 8 points) and the BPF stack follow.
#[repr(C, align(64))]
struct ThreadState {
    /// Depth of policy runs and shim initialisation on this thread; non-zero makes every
    /// driver call go straight to the driver.
    busy: Cell<u32>,
    /// Policed calls in flight on this thread (a call made while another one is inside its
    /// driver call, e.g. from a callback, nests).
    calls: Cell<u32>,
    /// This thread's id for `hdr.tid`; 0 until first needed.
    tid: Cell<u32>,
    /// This thread's counter shard in the stats file ([`UNCLAIMED`] until first needed).
    shard: Cell<u32>,
    /// The attach point of this thread's last outermost policed call, and the chain its
    /// cache entry held then ([`NO_POINT`] and null before the first): a call at the same
    /// point whose hint still names that chain takes it without reading the cache's own
    /// line. Valid because only `hold` replaces a cache entry (through `refresh`), and it
    /// clears this pair first and sets it to the entry's new chain after.
    last_point: Cell<u32>,
    last_chain: Cell<*const Published>,
    /// This thread's own shard of the stats file's counters, once claimed (`None` before,
    /// without a stats file, and for a thread on the shared shard 0): what counting a call
    /// adds to ([`stats::count`]).
    own: Cell<Option<OwnShard<'static>>>,
    /// Entry time and refusal of the calls in flight, by depth.
    frames: [Cell<Frame>; FRAMES],
    /// [`Chain::summary`] of `last_chain`, set with the pair (a line of its own): what an
    /// outermost call reads of its chain, without the chain's and its programs' lines.
    summary: SummaryLine,
    /// The chain this thread last used, per attach point. Only an outermost policed call
    /// (`calls` was 0) touches it, and nothing replaces the entry it holds until it has
    /// left (nested calls hold their chains by references of their own).
    cache: UnsafeCell<[Option<Arc<Published>>; POINT_COUNT]>,
    /// The BPF stack of this thread's policy runs.
    stack: UnsafeCell<Stack>,
}

/// A [`ChainSummary`] on a cache line of its own.
#[repr(C, align(64))]
struct SummaryLine(Cell<ChainSummary>);

// The fields before `frames` and the outermost call's frame share the first line.
const _: () =
    assert!(std::mem::offset_of!(ThreadState, frames) + std::mem::size_of::<Frame>() <= 64);

impl ThreadState {
    /// A thread's state before its first policed call.
    fn new() -> Self {
        ThreadState {
            busy: Cell::new(0),
            calls: Cell::new(0),
            tid: Cell::new(0),
            shard: Cell::new(UNCLAIMED),
            last_point: Cell::new(NO_POINT),
            last_chain: Cell::new(std::ptr::null()),
            own: Cell::new(None),
            frames: [const {
                Cell::new(Frame {
                    t_entry: 0,
                    verdict: 0,
                    caller: 0,
                })
            }; FRAMES],
            summary: SummaryLine(Cell::new(ChainSummary::EMPTY)),
            cache: UnsafeCell::new([const { None }; POINT_COUNT]),
            stack: UnsafeCell::new(Stack([0; STACK_SIZE])),
        }
    }
}

/// Owns a thread's [`ThreadState`], allocated on the thread's first driver call and freed
/// by the thread-local's destructor. On the heap, not in the thread-local itself: the
/// state is ~8.5 KiB (the chain cache, the BPF stack) with a non-zero initial image, which
/// the loader would copy into the static TLS of every thread the application creates,
/// including the many that never call the driver.
struct ThreadSlot(Cell<*mut ThreadState>);

thread_local! {
    static THREAD: ThreadSlot = const { ThreadSlot(Cell::new(std::ptr::null_mut())) };
}

/// This thread's state, `None` while the thread is being torn down.
#[inline(always)]
fn thread_state() -> Option<&'static ThreadState> {
    let p = thread_ptr::get();
    if p.is_null() {
        return thread_state_first();
    }
    // SAFETY: a non-null pointer was recorded by `thread_state_first` from this thread's
    // live state and is nulled by its destructor before the state goes away; see there.
    Some(unsafe { &*p })
}

impl ThreadState {
    #[inline(always)]
    fn as_busy<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        self.busy.set(self.busy.get().saturating_add(1));
        let r = catch_unwind(AssertUnwindSafe(f)).ok();
        self.busy.set(self.busy.get().saturating_sub(1));
        r
    }

    /// Runs `f` on the BPF stack, marked busy; `None` when the thread is busy already (the
    /// stack may be in use) or `f` panicked.
    ///
    /// The stack is lent only here and only while `busy` is the 1 set here: a driver call
    /// `f` makes, and a signal handler that interrupts `f`, find the thread busy and do not
    /// come here; a handler that interrupts before the store of 1 returns with `busy` back
    /// at 0 and its own use of the stack over. The compiler fences keep the stack's use
    /// between the two stores (a signal handler is this thread, so no CPU fence is needed).
    #[inline(always)]
    fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> Option<R> {
        if self.busy.get() != 0 {
            return None;
        }
        self.busy.set(1);
        compiler_fence(Ordering::SeqCst);
        // SAFETY: `busy` was 0, so no reference to the stack exists (only this function
        // makes one, while `busy` is 1, and drops it before `busy` is back at 0, also when
        // `f` panics: the panic is caught); the state is this thread's alone.
        let stack = unsafe { &mut *self.stack.get() };
        let r = catch_unwind(AssertUnwindSafe(|| f(stack))).ok();
        compiler_fence(Ordering::SeqCst);
        self.busy.set(0);
        r
    }

    /// This thread's counter shard in the stats file, claimed on first use; `None` while
    /// the process has no stats file.
    #[inline(always)]
    fn shard(&self) -> Option<u32> {
        let s = self.shard.get();
        if s != UNCLAIMED {
            return Some(s);
        }
        self.claim_shard()
    }

    #[cold]
    #[inline(never)]
    fn claim_shard(&self) -> Option<u32> {
        let stats = stats()?;
        let s = stats.claim_shard(self.tid());
        self.shard.set(s);
        self.own.set(stats.counters().own_shard(s));
        Some(s)
    }

    #[inline(always)]
    fn tid(&self) -> u32 {
        match self.tid.get() {
            0 => self.fetch_tid(),
            t => t,
        }
    }

    #[cold]
    #[inline(never)]
    fn fetch_tid(&self) -> u32 {
        // SAFETY: `gettid` has no preconditions and cannot fail.
        let t = unsafe { libc::gettid() }.unsigned_abs();
        self.tid.set(t);
        t
    }
}

/// The real driver function of variant `v`, resolved (and cached) on first use.
#[inline(always)]
pub(crate) fn real(v: usize) -> Option<*mut c_void> {
    let p = REAL.get(v)?.load(Ordering::Acquire);
    if p.is_null() {
        return resolve_real(v);
    }
    (p != MISSING).then_some(p)
}

/// [`real`] for code outside this crate (tests): the real driver function of variant `v`.
///
/// The hot-path items (`real`, `armed`, `enter`, `Policed::exit`, `recording`) are
/// crate-private on purpose: an item another crate could inline must be exported from the
/// rlib, and an exported item is reached through the GOT (one more dependent load, one more
/// cache line per call) even from inside `libgpubpf.so`.
pub fn real_function(v: usize) -> Option<*mut c_void> {
    real(v)
}

#[cold]
#[inline(never)]
fn resolve_real(v: usize) -> Option<*mut c_void> {
    let entry = VARIANTS.get(v)?;
    let cell = REAL.get(v)?;
    match crate::driver::lookup(entry.symbol) {
        Some(p) => {
            cell.store(p, Ordering::Release);
            Some(p)
        }
        None => {
            // Only cache a miss once the library itself is open (a missing library is
            // retried, so that a later `dlopen` path or environment can still succeed).
            if crate::driver::is_open() {
                cell.store(MISSING, Ordering::Release);
            }
            None
        }
    }
}

/// Whether a call at attach point `point` goes through [`enter`]: a chain is published
/// there, or the shim is not initialised yet. One relaxed load.
#[inline(always)]
pub(crate) fn armed(point: usize) -> bool {
    SLOTS
        .get(point)
        .is_some_and(|s| !s.hint.load(Ordering::Relaxed).is_null())
}

/// Starts a policed call at `point` on the ctx `c` the wrapper built (the header's constant
/// words, [`header_constants`], and the argument slots): holds the point's chain, fills in
/// the rest of the header (and, for a call on a stream, `Some((stream, per-thread
/// variant))`, whether the stream is being captured) and runs the entry programs.
///
/// `None` when the shim has nothing more to do with the call: the wrapper calls the driver
/// (with the arguments in `c`'s slots, which entry programs may have rewritten) and returns
/// its result, a tail call. That is a call that goes straight to the driver (a re-entrant
/// call, a thread being torn down, nothing attached after all), and also the common policed
/// one: its entry programs let it through, its chain has no exit program and the process
/// does not record it. Such a call has ended here (its chain and frame are not read again),
/// so the driver call that follows is not nested in it, and after the driver call the
/// wrapper touches none of the lines the driver's work has evicted meanwhile.
///
/// Otherwise the call's handle, whose [`Policed::refusal`] is the verdict of a refusal and
/// whose [`Policed::exit`] ends it. Out of line, shared by every wrapper: a wrapper's own
/// code is only its ctx and its real call. Returns the handle in two registers (a refusal
/// is a bit of it, its verdict in the thread's state), not through memory.
#[inline(never)]
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub(crate) fn enter(
    point: usize,
    c: &mut [u64],
    stream: Option<(*mut c_void, bool)>,
) -> Option<Policed> {
    let policed = hold(point)?;
    if policed.is_nested() {
        return policed.enter_nested(c, stream);
    }
    let s = policed.outer_summary() as *const ChainSummary;
    // SAFETY: an outermost call's summary is its chain's, in its thread's state, unchanged
    // until the call is dropped (`Policed::outer_summary`).
    unsafe { policed.enter_summarized(&*s, c, stream) }
}

/// The chain of attach point `point` when policies must run for this call.
#[inline(always)]
fn hold(point: usize) -> Option<Policed> {
    let thread = thread_state()?;
    if thread.busy.get() != 0 {
        return None;
    }
    if !HOT.ready.load(Ordering::Acquire) {
        crate::init::ensure();
    }
    let slot = SLOTS.get(point)?;
    let depth = thread.calls.get();
    // The chain's address with the call's depth in its low bits (0 for the outermost call).
    let tagged = if depth == 0 {
        let hint = slot.hint.load(Ordering::Acquire).cast_const();
        let chain = if thread.last_chain.get() == hint && thread.last_point.get() as usize == point
        {
            // The cache entry of `point` holds this chain (see `ThreadState::last_chain`).
            hint
        } else {
            // SAFETY: no policed call is in flight on this thread (`calls` is 0), so
            // nothing holds a reference into the cache; the cache is this thread's alone.
            let entry = unsafe { &mut *thread.cache.get() }.get_mut(point)?;
            let chain = match entry {
                Some(cached) if Arc::as_ptr(cached) == hint => Arc::as_ptr(cached),
                _ => {
                    // The entry changes: the pair must not name its old chain any more,
                    // whether or not a new one is taken.
                    thread.last_point.set(NO_POINT);
                    refresh(entry, slot)?
                }
            };
            summarize(thread, chain);
            thread
                .last_point
                .set(u32::try_from(point).unwrap_or(NO_POINT));
            thread.last_chain.set(chain);
            chain
        };
        NonZeroUsize::new(chain as usize)?
    } else {
        NonZeroUsize::new(nested(slot)? as usize | (depth as usize).min(DEPTH_MASK))?
    };
    // Policed calls nest no deeper than the thread's stack allows: far below `u32::MAX`.
    thread.calls.set(depth.wrapping_add(1));
    // Only a recording process reads a frame's entry time and refusal (`Policed::exit`);
    // the caller's address is written by `capture_caller` before it is read. A process
    // never stops recording, so a frame not written here still holds no entry time.
    if recording() {
        record_start(thread, tagged.get() & DEPTH_MASK);
    }
    Some(Policed { tagged, thread })
}

/// Sets the thread's summary to `chain`'s, whose cache entry was just taken (the pair is
/// about to name it): a copy of the line taken at publication. Out of line: only when the
/// thread's last chain changes.
#[cold]
#[inline(never)]
fn summarize(thread: &ThreadState, chain: *const Published) {
    // SAFETY: the thread's cache entry holds `chain` (alive until the entry is replaced).
    thread.summary.0.set(*unsafe { &*chain }.summary());
}

/// The published chain changed (or was never cached): takes a reference of our own into
/// the thread's cache entry. The chain it replaces is not in use on this thread.
#[cold]
#[inline(never)]
fn refresh(entry: &mut Option<Arc<Published>>, slot: &Slot) -> Option<*const Published> {
    *entry = slot.chain.load_full();
    entry.as_ref().map(Arc::as_ptr)
}

/// Nested in another policed call's driver call: the cache entry of that call must stay
/// as it is, so this call holds a reference of its own.
#[cold]
#[inline(never)]
fn nested(slot: &Slot) -> Option<*const Published> {
    Some(Arc::into_raw(slot.chain.load_full()?))
}

/// Starts the frame of a recorded call at depth `tag`.
#[cold]
#[inline(never)]
fn record_start(thread: &ThreadState, tag: usize) {
    if let Some(f) = thread.frames.get(tag) {
        f.set(Frame {
            t_entry: monotonic_ns().max(1),
            verdict: 0,
            caller: 0,
        });
    }
}

/// Runs `f` marked busy on this thread (driver calls it makes go straight to the driver),
/// catching panics: `None` when `f` panicked (or the thread is being torn down).
pub fn as_busy<R>(f: impl FnOnce() -> R) -> Option<R> {
    thread_state()?.as_busy(f)
}

#[inline(always)]
fn note_faults(faults: u32) {
    if faults > 0 {
        log_fault_once();
    }
}

/// Sets the cached process id (at initialisation and in a forked child) and forgets the
/// calling thread's cached thread id and counter shard; a forked child also stops counting
/// into its parent's stats file until it has one of its own. Async-signal-safe.
#[inline(never)]
pub fn set_pid(pid: u32) {
    HOT.pid.store(pid, Ordering::Relaxed);
    stats::forget_stats();
    if let Some(t) = thread_state() {
        t.tid.set(0);
        t.shard.set(UNCLAIMED);
        t.own.set(None);
    }
}

/// Writes the current device into `hdr.device`, the low half of its word (the wrapper wrote
/// -1 there, "unknown").
#[inline(always)]
fn set_device(c: &mut [u64]) {
    if let Some(w) = c.get_mut(W_DEVICE_FLAGS) {
        *w = (*w & !u64::from(u32::MAX)) | u64::from(current_device() as u32);
    }
}

/// The ctx header's words that are the same on every call of a wrapper, as `(word, value)`:
/// the api id (`hdr.api_id`; the phase, the high half, is set when programs run), the
/// variant's `GPUBPF_CTX_F_*` bits with the device unknown (`hdr.flags`, `hdr.device` =
/// -1), the exported variant's index among its point's variants (`hdr.variant`; the
/// result, the low half, is set at exit). The generator writes them into each wrapper's
/// ctx literal ([`crate::codegen`]); [`enter`] fills in pid and tid, and the device and
/// the capturing flag where a program reads them.
pub const fn header_constants(api_id: u32, variant: u32, flags: u32) -> [(usize, u64); 3] {
    [
        (W_API_ID_PHASE, api_id as u64),
        (W_DEVICE_FLAGS, ((flags as u64) << 32) | u32::MAX as u64),
        (W_RESULT_VARIANT, (variant as u64) << 32),
    ]
}

/// A call that runs policies: holds the chain alive until the call has left.
pub struct Policed {
    /// The chain's address, its low bits ([`DEPTH_MASK`]) holding the call's nesting depth
    /// on this thread (clamped): 0, the outermost call, holds the chain through the
    /// thread's cache; any other depth owns one reference (`Arc::into_raw`).
    tagged: NonZeroUsize,
    thread: &'static ThreadState,
}

impl Drop for Policed {
    fn drop(&mut self) {
        let t = self.thread;
        // Never below 0: every handle counted itself in `hold`.
        t.calls.set(t.calls.get().wrapping_sub(1));
        if self.tagged.get() & DEPTH_MASK != 0 {
            // SAFETY: a nested call owns the reference `hold` made with
            // `Arc::into_raw` for exactly this address; it is released once, here.
            drop(unsafe { Arc::from_raw(self.chain_ptr()) });
        }
    }
}

impl std::fmt::Debug for Policed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policed").finish_non_exhaustive()
    }
}

impl Policed {
    #[inline(always)]
    fn chain_ptr(&self) -> *const Published {
        (self.tagged.get() & !(DEPTH_MASK | REFUSED)) as *const Published
    }

    /// The verdict an entry program refused this call with, `None` when the call goes on
    /// to the driver.
    #[inline(always)]
    pub(crate) fn refusal(&self) -> Option<CUresult> {
        if self.tagged.get() & REFUSED == 0 {
            return None;
        }
        self.refused_with()
    }

    #[cold]
    #[inline(never)]
    fn refused_with(&self) -> Option<CUresult> {
        self.frame().map(|f| f.get().verdict).filter(|v| *v != 0)
    }

    /// This call, refused with `verdict` (kept in its frame).
    #[cold]
    #[inline(never)]
    fn refused(mut self, verdict: CUresult) -> Policed {
        if let Some(f) = self.frame() {
            f.set(Frame { verdict, ..f.get() });
        }
        if let Some(t) = NonZeroUsize::new(self.tagged.get() | REFUSED) {
            self.tagged = t;
        }
        self
    }

    /// The published chain this call runs, with its summary.
    #[inline(always)]
    fn published(&self) -> &Published {
        // SAFETY: the chain is kept alive for as long as `self` lives, by the thread's
        // cache entry (outermost call: no other call replaces it meanwhile) or by the
        // reference `self` owns (nested call).
        unsafe { &*self.chain_ptr() }
    }

    /// The chain this call runs.
    #[inline(always)]
    fn chain(&self) -> &Chain {
        self.published().chain()
    }

    /// Whether this is a call nested in another policed call on this thread.
    #[inline(always)]
    fn is_nested(&self) -> bool {
        self.tagged.get() & DEPTH_MASK != 0
    }

    /// The summary of an outermost call's chain, in the thread's state (set with the
    /// last-chain pair, which names this chain for the whole call: only an outermost
    /// call's `hold` changes it), read in place: a copy would be a 64-byte store to the
    /// stack, a line the driver's work may have evicted. A nested call reads its chain's
    /// publication's instead, out of line ([`Policed::enter_nested`],
    /// [`Policed::exit_nested`]): kept apart so that an outermost call tests for nesting once
    /// and its path stays short.
    #[inline(always)]
    fn outer_summary(&self) -> &ChainSummary {
        debug_assert!(!self.is_nested());
        // SAFETY: only `hold` of an outermost call writes the summary, and none runs on this
        // thread while this outermost call is in flight (`calls` is non-zero); the state is
        // this thread's alone (`Policed` is neither `Send` nor `Sync`).
        unsafe { &*self.thread.summary.0.as_ptr() }
    }

    /// This call's frame in the thread's state.
    #[inline(always)]
    fn frame(&self) -> Option<&Cell<Frame>> {
        self.thread.frames.get(self.tagged.get() & DEPTH_MASK)
    }

    /// This call's frame when the process records it (an entry time was taken).
    #[inline(always)]
    fn recorded(&self) -> Option<Frame> {
        self.frame().map(Cell::get).filter(|f| f.t_entry != 0)
    }

    /// Fills in the ctx header's words that vary between calls ([`header_constants`] has
    /// the rest): pid and tid. The device and the capturing flag, where a program reads
    /// them, are [`Policed::answer`]'s.
    #[inline(always)]
    fn header(&self, c: &mut [u64]) {
        if let Some(w) = c.get_mut(W_PID_TID) {
            *w = u64::from(HOT.pid.load(Ordering::Relaxed)) | (u64::from(self.thread.tid()) << 32);
        }
    }

    /// What some program of the chain asks ([`ChainSummary::asks`]), each at the cost of a
    /// driver call or a stack walk, so only when asked (the verifier reports every ctx
    /// field a program reads): the current device in `hdr.device` (the wrapper's -1,
    /// "unknown", stays otherwise); `GPUBPF_CTX_F_CAPTURING` in `hdr.flags` when the call's
    /// stream is being captured into a graph (`cuStreamIsCapturing` says
    /// `CU_STREAM_CAPTURE_STATUS_ACTIVE`; on a per-thread variant a NULL stream is the
    /// thread's default stream, `CU_STREAM_PER_THREAD`); the application's call site.
    #[cold]
    #[inline(never)]
    fn answer(&self, s: &ChainSummary, c: &mut [u64], stream: Option<(*mut c_void, bool)>) {
        if s.reads_device() {
            set_device(c);
        }
        if s.reads_flags() {
            if let Some((stream, per_thread)) = stream {
                capture_flag(c, stream, per_thread);
            }
        }
        if s.wants_caller() {
            self.capture_caller();
        }
    }

    /// [`enter`] of a nested call, with its chain's summary from the publication.
    #[cold]
    #[inline(never)]
    fn enter_nested(self, c: &mut [u64], stream: Option<(*mut c_void, bool)>) -> Option<Policed> {
        let s = self.published().summary() as *const ChainSummary;
        // SAFETY: the summary of this call's chain, taken when it was published, alive as
        // long as the publication, which `self` holds until it is dropped.
        unsafe { self.enter_summarized(&*s, c, stream) }
    }

    /// [`enter`] after the chain is held, with `s`: the entry programs, then what is left
    /// of the call ([`enter`]'s result).
    ///
    /// # Safety
    /// `s` is the summary of this call's chain, alive until `self` is dropped.
    #[inline(always)]
    unsafe fn enter_summarized(
        self,
        s: &ChainSummary,
        c: &mut [u64],
        stream: Option<(*mut c_void, bool)>,
    ) -> Option<Policed> {
        // SAFETY: forwarded contract.
        let refusal = unsafe { self.enter_with(s, c, stream) };
        // Read right after the entry programs, while the summary's line is in the cache.
        let idle = s.exit_is_empty() && !recording();
        match refusal {
            Some(verdict) => Some(self.refused(verdict)),
            // Dropping the handle ends the call (`calls` down by one).
            None if idle => None,
            None => Some(self),
        }
    }

    /// Fills the ctx header (and, for a call on `stream`, whether the stream is being
    /// captured: `Some((stream, per-thread variant))`), then runs the entry programs:
    /// `Some(verdict)` when one refused the call (the wrapper returns the verdict without
    /// calling the driver).
    ///
    /// # Safety
    /// `s` is the summary of this call's chain (it runs the programs `s` names).
    #[inline(always)]
    unsafe fn enter_with(
        &self,
        s: &ChainSummary,
        c: &mut [u64],
        stream: Option<(*mut c_void, bool)>,
    ) -> Option<CUresult> {
        self.header(c);
        if s.asks() {
            self.answer(s, c, stream);
        }
        stats::count(self.thread, Counter::calls, s.stats_slot);
        let mut rec = Recorder::new(self.thread);
        if s.interpreted() {
            // After the call is counted: the watcher compiles the chains of called points.
            crate::native::nudge_once(self.published());
        }
        if s.entry_is_idle() {
            return None;
        }
        let chain = self.chain();
        // SAFETY: `s` is the summary of `chain` (this function's contract).
        let v = self
            .thread
            .with_stack(|stack| unsafe { chain.entry_words_summarized(s, c, stack, &mut rec) })?;
        if v.verdict == 0 && v.faults == 0 {
            return None;
        }
        self.entry_stopped(v, &rec)
    }

    /// Exit programs: the result the caller gets. A recording process records the call.
    /// Ends the call (the chain is released here). Out of line, shared by every wrapper; a
    /// call with nothing to do at exit does not come here ([`enter`] ended it).
    #[inline(never)]
    // Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
    #[link_section = ".text.hot.gpubpf"]
    pub(crate) fn exit(self, c: &mut [u64], result: CUresult, out_valid: bool) -> CUresult {
        if self.is_nested() {
            return self.exit_nested(c, result, out_valid);
        }
        // SAFETY: an outermost call's summary is its chain's (`Policed::outer_summary`).
        unsafe { self.exit_with(self.outer_summary(), c, result, out_valid) }
    }

    /// [`Policed::exit`] of a nested call, with its chain's summary from the publication.
    #[cold]
    #[inline(never)]
    fn exit_nested(&self, c: &mut [u64], result: CUresult, out_valid: bool) -> CUresult {
        let p = self.published();
        // SAFETY: the summary of this call's chain, taken when it was published.
        unsafe { self.exit_with(p.summary(), c, result, out_valid) }
    }

    /// [`Policed::exit`] with `s`.
    ///
    /// # Safety
    /// `s` is the summary of this call's chain (it runs the programs `s` names).
    #[inline(always)]
    unsafe fn exit_with(
        &self,
        s: &ChainSummary,
        c: &mut [u64],
        result: CUresult,
        out_valid: bool,
    ) -> CUresult {
        let r = if s.exit_is_empty() {
            result
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.run_exit(s, c, result, out_valid) }
        };
        if let Some(frame) = self.recorded() {
            self.record(c, frame, result, r, out_valid);
        }
        r
    }

    /// The exit programs of this call's chain.
    ///
    /// # Safety
    /// As for [`Policed::exit_with`].
    #[inline(never)]
    // Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
    #[link_section = ".text.hot.gpubpf"]
    unsafe fn run_exit(
        &self,
        s: &ChainSummary,
        c: &mut [u64],
        result: CUresult,
        out_valid: bool,
    ) -> CUresult {
        let chain = self.chain();
        if s.wants_caller() {
            // A nested call's programs may have set another caller meanwhile.
            let ip = self.frame().map_or(0, |f| f.get().caller);
            gpubpf_runtime::helpers::caller::set_caller(ip);
        }
        let mut rec = Recorder::new(self.thread);
        // SAFETY: `s` is the summary of `chain` (this function's contract).
        match self.thread.with_stack(|stack| unsafe {
            chain.exit_words_summarized(s, c, stack, result, out_valid, &mut rec)
        }) {
            Some((r, faults)) => {
                note_faults(faults);
                r
            }
            None => result,
        }
    }
}

mod args;
mod cold;
mod publish;
mod stats;
mod thread_ptr;

pub use args::{launch_from_config, read_out, write_out};
use cold::{capture_flag, current_device, log_fault_once, thread_state_first};

pub use publish::{
    force_slow_path, publish, publish_all_broken, publish_nothing, published, replace, Published,
};
pub use stats::{current_stats, set_audit, set_stats};
use stats::{stats, Recorder};

#[cfg(test)]
mod tests;

// `.text.hot` starts on a page: an empty input section of that section family aligned to
// 4 KiB raises the output section's alignment (crates/shim/build.rs).
std::arch::global_asm!(
    ".pushsection .text.hot.gpubpf,\"ax\",%progbits",
    ".p2align 12",
    ".popsection"
);
