//! The process's cache of kernel names, by launch handle, for `gpubpf_get_kernel_name`.
//!
//! Naming a PyTorch launch takes two driver calls: `cuFuncGetName`, which refuses the
//! library's `CUkernel` that CUDA 12+ cudart launches, then `cuKernelGetName`. On the H100
//! of 2026-12-07 a trace that emits events (a kernel name each) added ~4–6 µs per launch to
//! a PyTorch training step, and ~0 with events off (docs/gpu-runs.md); the same events on
//! the mock driver cost ~150 ns. The two driver calls are the likely difference, not a
//! measured one. So a name is asked of the driver once per handle and copied here, and
//! later launches of that handle read the copy.
//!
//! A handle names its kernel until its module, library or context goes
//! (`cuModuleUnload`, `cuLibraryUnload`, `cuCtxDestroy`, `cuGreenCtxDestroy`,
//! `cuDevicePrimaryCtxRelease`/`Reset`); then the driver may give its address to another
//! kernel. The shim's wrappers of those calls hold an [`Unloading`] guard across the real
//! call: while one is held nothing is read from or written to the cache, and when it ends
//! every entry made before is dead (the entries carry the epoch they were made in, which the
//! guard's end advances). A name made stale by an unload the shim does not see (a
//! driver-internal route) is the one cost: the copy is ours, so a stale entry gives an old
//! name, never a read of freed memory.
//!
//! Entries are direct-mapped by handle and written under a per-entry sequence lock: a
//! reader that meets a write in progress misses and asks the driver; a writer that meets
//! another gives up (the next miss writes again). Names longer than [`NAME_BYTES`] are
//! served from the cache only to buffers that truncate them within the copy.

use std::ffi::c_char;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Entries in the cache (a power of two).
const ENTRIES: usize = 1024;
/// Bytes of a name kept per entry (trace's events take 63).
pub(super) const NAME_BYTES: usize = 120;
const WORDS: usize = NAME_BYTES / 8;
/// The longest name length measured (`strnlen`'s bound when a name is copied in).
const LENGTH_BOUND: usize = 4096;

/// Advanced at the end of every [`Unloading`], and when a resolver is installed.
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// [`Unloading`] guards alive now.
static UNLOADING: AtomicU32 = AtomicU32::new(0);

struct Entry {
    /// Even: stable; odd: a write is in progress.
    seq: AtomicU32,
    /// The name's length (`strnlen` up to [`LENGTH_BOUND`]).
    len: AtomicU32,
    handle: AtomicU64,
    /// The epoch the entry was made in (0: never written).
    epoch: AtomicU64,
    /// The name's first bytes, zero-padded.
    words: [AtomicU64; WORDS],
}

impl Entry {
    const fn new() -> Self {
        Entry {
            seq: AtomicU32::new(0),
            len: AtomicU32::new(0),
            handle: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; WORDS],
        }
    }
}

static CACHE: [Entry; ENTRIES] = [const { Entry::new() }; ENTRIES];

fn entry(handle: u64) -> &'static Entry {
    // Handles are driver pointers: mix the bits above their alignment into the index.
    let h = handle.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54;
    &CACHE[h as usize % ENTRIES]
}

/// Held by the shim across a driver call that may free kernels (module, library or
/// context unloads): the cache is bypassed while any guard lives, and its entries die when
/// one ends.
#[must_use = "the cache is invalidated when the guard is dropped, after the driver call"]
#[derive(Debug)]
pub struct Unloading(());

/// Starts an [`Unloading`]: hold it across the real call. Never inlined into another
/// crate (nor the guard's drop): that would export `UNLOADING` and `EPOCH` from the rlib,
/// and every name lookup would then reach them through GOT slots (`tests/shim_got.rs`).
#[inline(never)]
pub fn unloading() -> Unloading {
    UNLOADING.fetch_add(1, Ordering::SeqCst);
    Unloading(())
}

impl Drop for Unloading {
    #[inline(never)]
    fn drop(&mut self) {
        EPOCH.fetch_add(1, Ordering::SeqCst);
        UNLOADING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every entry made so far dies (a resolver was installed or removed).
pub(super) fn invalidate() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// The epoch a lookup may use, or `None` while an unload is in progress. `UNLOADING` is
/// read first: an unload that ended between the two reads has advanced `EPOCH` before its
/// count went back to 0, so the epoch read second is the new one.
pub(super) fn usable_epoch() -> Option<u64> {
    if UNLOADING.load(Ordering::SeqCst) != 0 {
        return None;
    }
    Some(EPOCH.load(Ordering::SeqCst))
}

/// The cached name of `handle` made in `epoch` into `out` (NUL-terminated, truncated,
/// the rest zero, as `kernel_name`: every byte of `out` is written), with its return value;
/// `None` on a miss, `out` untouched.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub(super) fn get(handle: u64, epoch: u64, out: &mut [u8]) -> Option<usize> {
    let e = entry(handle);
    let s1 = e.seq.load(Ordering::Acquire);
    if s1 & 1 != 0 {
        return None;
    }
    let mut bytes = [0u8; NAME_BYTES];
    let found =
        e.handle.load(Ordering::Relaxed) == handle && e.epoch.load(Ordering::Relaxed) == epoch;
    let len = e.len.load(Ordering::Relaxed) as usize;
    for (chunk, w) in bytes.chunks_exact_mut(8).zip(&e.words) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    fence(Ordering::Acquire);
    // The entry is whole, and no unload began (or began and ended) while it was read: one
    // that began before the handle's launch could have freed it, and the address could
    // name a kernel loaded since.
    if !found || e.seq.load(Ordering::Relaxed) != s1 || !still(epoch) {
        return None;
    }
    let max = out.len().checked_sub(1)?;
    let n = len.min(max);
    if n > NAME_BYTES {
        return None;
    }
    // The name and then zeros over the whole buffer, a byte at a time: no `memcpy` and
    // `memset` calls for the small buffers programs pass (each a jump into libc's code,
    // on pages of its own, per traced launch: benches/pages/run.sh).
    for (i, b) in out.iter_mut().enumerate() {
        *b = if i < n {
            bytes.get(i).copied().unwrap_or(0)
        } else {
            0
        };
    }
    Some(if len < max { n + 1 } else { out.len() })
}

/// Copies `name` (the driver's, NUL-terminated) into `handle`'s entry as made in `epoch`,
/// unless another write to the entry is in progress.
///
/// # Safety
/// `name` must be a readable NUL-terminated string.
pub(super) unsafe fn put(handle: u64, epoch: u64, name: *const c_char) {
    // SAFETY: per contract `name` is NUL-terminated; strnlen stops at the NUL or the bound.
    let len = unsafe { libc::strnlen(name, LENGTH_BOUND) };
    let mut bytes = [0u8; NAME_BYTES];
    let n = len.min(NAME_BYTES);
    // SAFETY: the first `n <= len` bytes of `name` were just measured as readable.
    unsafe { std::ptr::copy_nonoverlapping(name.cast::<u8>(), bytes.as_mut_ptr(), n) };
    let e = entry(handle);
    let s = e.seq.load(Ordering::Relaxed);
    if s & 1 != 0
        || e.seq
            .compare_exchange(s, s.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    fence(Ordering::Release);
    e.handle.store(handle, Ordering::Relaxed);
    e.epoch.store(epoch, Ordering::Relaxed);
    e.len.store(len as u32, Ordering::Relaxed);
    for (chunk, w) in bytes.chunks_exact(8).zip(&e.words) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        w.store(u64::from_le_bytes(word), Ordering::Relaxed);
    }
    e.seq.store(s.wrapping_add(2), Ordering::Release);
}

/// Whether what a lookup made in `epoch` read or resolved still holds: no unload began or
/// ended since (`get` checks it after copying an entry, `kernel_name` before keeping a
/// name).
pub(super) fn still(epoch: u64) -> bool {
    usable_epoch() == Some(epoch)
}
