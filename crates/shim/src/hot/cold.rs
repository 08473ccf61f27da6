//! The out-of-line parts of a policed call (`#[cold]`, so that the common path stays a few
//! contiguous cache lines: docs/shim.md, "Cache lines of a policed call"): the driver
//! questions a chain may need answered for its ctx header (`hdr.device`, the capture flag),
//! a refusal's bookkeeping, recording, the application's call site, a fault's log line,
//! and a thread's first call and exit.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use gpubpf_runtime::attach::abi::FLAG_CAPTURING;
use gpubpf_runtime::dispatch::EntryVerdict;
use gpubpf_runtime::registry::monotonic_ns;
use gpubpf_runtime::registry::procstats::Counter;

use super::stats::{stats, Recorder};
use super::{
    note_faults, real, thread_ptr, Frame, Policed, ThreadSlot, ThreadState, THREAD, UNCLAIMED,
};
use crate::abi_types::CUresult;
use crate::generated::{CTX_GET_DEVICE, STREAM_IS_CAPTURING};

/// `CU_STREAM_PER_THREAD`: the per-thread default stream's handle.
const CU_STREAM_PER_THREAD: usize = 0x2;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
const CU_STREAM_CAPTURE_STATUS_ACTIVE: u32 = 1;

/// Ordinal of the current context's device, -1 when there is none. Out of line: asked
/// only when a program reads `hdr.device`.
#[cold]
#[inline(never)]
pub(super) fn current_device() -> i32 {
    let Some(f) = real(CTX_GET_DEVICE) else {
        return -1;
    };
    let mut dev: i32 = -1;
    // SAFETY: `f` is the driver's `cuCtxGetDevice(CUdevice *device)`; `dev` is a valid
    // `int` for the call.
    let r = unsafe {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32) -> CUresult>(f)(&mut dev)
    };
    if r == 0 {
        dev
    } else {
        -1
    }
}

/// Sets `GPUBPF_CTX_F_CAPTURING` in `hdr.flags` when `stream` is being captured
/// ([`Policed::capturing`]). Out of line: asked only when a program reads `hdr.flags`.
#[cold]
#[inline(never)]
pub(super) fn capture_flag(c: &mut [u64], stream: *mut c_void, per_thread: bool) {
    let Some(f) = real(STREAM_IS_CAPTURING) else {
        return;
    };
    let stream = if stream.is_null() && per_thread {
        CU_STREAM_PER_THREAD as *mut c_void
    } else {
        stream
    };
    let mut status: u32 = 0;
    // SAFETY: `f` is the driver's `cuStreamIsCapturing(CUstream, CUstreamCaptureStatus*)`;
    // `status` is a valid `enum` (int-sized) for the call. Made while this thread is not
    // marked busy, but the real function is called directly, not through a wrapper.
    let r = unsafe {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, *mut u32) -> CUresult>(
            f,
        )(stream, &mut status)
    };
    if r == 0 && status == CU_STREAM_CAPTURE_STATUS_ACTIVE {
        if let Some(w) = c.get_mut(gpubpf_runtime::attach::abi::W_DEVICE_FLAGS) {
            *w |= u64::from(FLAG_CAPTURING) << 32;
        }
    }
}

static FAULT_LOGGED: AtomicBool = AtomicBool::new(false);

#[cold]
#[inline(never)]
pub(super) fn log_fault_once() {
    // Read before swapping: a program that faults on every call then costs no locked
    // read-modify-write per call after the first.
    if !FAULT_LOGGED.load(Ordering::Relaxed) && !FAULT_LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "a policy program failed at run time; it counts as verdict 0 (logged once per process)"
        );
    }
}

/// The thread's first call (or one during its teardown): allocates the thread's state
/// and records its address for the next calls ([`thread_ptr`]). `None` once the
/// thread-local's destructor has run (or is running), and when the allocation fails.
#[cold]
#[inline(never)]
pub(super) fn thread_state_first() -> Option<&'static ThreadState> {
    let p = THREAD
        .try_with(|slot| {
            if slot.0.get().is_null() {
                // A failed allocation leaves the thread unpoliced rather than aborting the
                // application (`try_reserve` is the fallible way to a box).
                let mut v: Vec<ThreadState> = Vec::new();
                v.try_reserve_exact(1).ok()?;
                v.push(ThreadState::new());
                let b = v.into_boxed_slice();
                slot.0.set(Box::into_raw(b).cast::<ThreadState>());
            }
            Some(slot.0.get().cast_const())
        })
        .ok()
        .flatten()?;
    thread_ptr::set(p);
    // SAFETY: `p` is this thread's live state: allocated above and freed only by the
    // thread-local's destructor (`Drop for ThreadSlot`), which nulls the recorded pointer
    // first and which `try_with` no longer reaches once it has started; the reference is
    // only used by this thread (`Policed`, which carries it, is neither `Send` nor `Sync`)
    // and never outlives the driver call that took it, during which the thread's
    // destructors cannot run.
    Some(unsafe { &*p })
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        let p = self.0.replace(std::ptr::null_mut());
        if p.is_null() {
            return;
        }
        thread_ptr::set(std::ptr::null());
        // SAFETY: `p` came from `Box::into_raw` of a one-element boxed slice in
        // `thread_state_first` and is freed only here (the slot was nulled above); no
        // reference to it is alive: the recorded pointer is null, and a thread's
        // destructors do not run while one of its driver calls is in flight.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, 1)) });
    }
}

impl Drop for ThreadState {
    /// Gives the thread's counter shard back (the recorded pointer was nulled by
    /// `Drop for ThreadSlot`, the state's only owner).
    fn drop(&mut self) {
        let shard = self.shard.replace(UNCLAIMED);
        if shard != UNCLAIMED {
            if let Some(stats) = stats() {
                stats.release_shard(shard);
            }
        }
    }
}

impl Policed {
    /// An entry program refused the call or failed: logs a fault once and counts the
    /// refusal, whose verdict [`enter`](super::enter) keeps in the call's frame.
    #[cold]
    #[inline(never)]
    pub(super) fn entry_stopped(&self, v: EntryVerdict, rec: &Recorder) -> Option<CUresult> {
        note_faults(v.faults);
        if v.verdict == 0 {
            return None;
        }
        rec.add(Counter::denied, self.chain().stats_slot);
        Some(v.verdict)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn record(
        &self,
        c: &[u64],
        frame: Frame,
        result: CUresult,
        returned: CUresult,
        out_valid: bool,
    ) {
        let call = crate::record::Call {
            ctx: c,
            t_entry: frame.t_entry,
            t_exit: monotonic_ns(),
            result,
            returned,
            refused: frame.verdict != 0,
            out_valid,
        };
        let _ = self.thread.as_busy(|| crate::record::call(&call));
    }

    /// Walks the stack for the application's call site (for `gpubpf_get_caller`) and keeps
    /// it in this call's frame for the exit programs.
    #[cold]
    #[inline(never)]
    pub(super) fn capture_caller(&self) {
        let ip = self.thread.as_busy(crate::caller::capture).unwrap_or(0);
        if let Some(f) = self.frame() {
            f.set(Frame {
                caller: ip,
                ..f.get()
            });
        }
        gpubpf_runtime::helpers::caller::set_caller(ip);
    }
}
