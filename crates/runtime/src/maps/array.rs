//! Array maps: `max_entries` values of `round8(value_size)` bytes, indexed by a `u32` key.
//! Lookups are a bounds check and an address computation; no locks anywhere. Updates copy
//! the value in place (as Linux does for arrays): a concurrent reader may observe a
//! partially copied value, while BPF atomics on the value stay exact.
//!
//! Updates of some fields only (`gpubpf maps update M --value field=…`) are a
//! read-modify-write of the named bits, serialised by a robust writer lock in the shared
//! state; whole-value updates (programs, `bpf_map_update_elem`) take no lock, as in Linux.
//! Files created before the lock existed have no ready word; their masked updates go
//! without it (still touching only the named bits).

use std::sync::atomic::{AtomicU32, Ordering};

use super::lock::{SharedMutex, SharedMutexGuard, LOCK_SLOT};
use super::{MapError, BPF_EXIST, BPF_NOEXIST};

/// Offset of the ready word after the writer lock, in the shared state.
const LOCK_READY: usize = LOCK_SLOT;
/// Value of the ready word once the writer lock is initialised.
const READY_MAGIC: u32 = u32::from_le_bytes(*b"LOCK");

#[derive(Debug)]
pub(super) struct ArrayMap {
    pub(super) data: *mut u8,
    pub(super) stride: usize,
    pub(super) value_size: usize,
    pub(super) max_entries: u32,
    /// The shared state (`layout::STATE_OFFSET`): writer lock, then its ready word.
    pub(super) state: *mut u8,
    pub(super) name: String,
}

impl ArrayMap {
    /// Address of the value of index `*key`, or null.
    ///
    /// # Safety
    /// `key` must be readable for 4 bytes; `data` must map `max_entries * stride` bytes.
    #[inline(always)]
    pub(super) unsafe fn lookup(&self, key: *const u8) -> *mut u8 {
        // SAFETY: caller guarantees 4 readable bytes.
        let idx = unsafe { key.cast::<u32>().read_unaligned() };
        if idx < self.max_entries {
            // SAFETY: idx < max_entries keeps the offset inside the data region.
            unsafe { self.data.add(idx as usize * self.stride) }
        } else {
            std::ptr::null_mut()
        }
    }

    /// Sets up the writer lock of a freshly created (zeroed) map.
    ///
    /// # Safety
    /// Only on a freshly created file nobody else has mapped.
    pub(super) unsafe fn init(&self) -> Result<(), MapError> {
        // SAFETY: the state region has room for a lock and the ready word; nobody else
        // uses the file yet.
        unsafe { SharedMutex::init(self.state.cast::<SharedMutex>()) }.map_err(|source| {
            MapError::Lock {
                name: self.name.clone(),
                source,
            }
        })?;
        self.ready().store(READY_MAGIC, Ordering::Release);
        Ok(())
    }

    fn ready(&self) -> &AtomicU32 {
        // SAFETY: the ready word lies in the state region, 4-aligned; the mapping
        // outlives `self`.
        unsafe { &*self.state.add(LOCK_READY).cast::<AtomicU32>() }
    }

    /// The writer lock, or `None` for files created before it existed.
    fn writer_lock(&self) -> Result<Option<SharedMutexGuard<'_>>, MapError> {
        if self.ready().load(Ordering::Acquire) != READY_MAGIC {
            return Ok(None);
        }
        // SAFETY: initialised by `init` (the ready word says so).
        let lock = unsafe { &*self.state.cast::<SharedMutex>() };
        lock.lock().map(Some).map_err(|source| MapError::Lock {
            name: self.name.clone(),
            source,
        })
    }

    /// # Safety
    /// `key` readable for 4 bytes, `value` readable for `value_size` bytes, `mask` (when
    /// given) `value_size` bytes long.
    pub(super) unsafe fn update(
        &self,
        key: *const u8,
        value: *const u8,
        mask: Option<&[u8]>,
        flags: u64,
    ) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::UnknownFlags { flags });
        }
        // SAFETY: forwarded contract.
        let dst = unsafe { self.lookup(key) };
        if dst.is_null() {
            return Err(MapError::Full);
        }
        if flags == BPF_NOEXIST {
            // Every index of an array exists.
            return Err(MapError::KeyExists);
        }
        if let Some(mask) = mask {
            let _guard = self.writer_lock()?;
            // SAFETY: forwarded contract; `dst` has `stride >= value_size` bytes.
            unsafe {
                let v = std::slice::from_raw_parts(value, self.value_size);
                super::apply_masked(dst, v, mask);
            }
            return Ok(());
        }
        // SAFETY: `dst` has `stride >= value_size` bytes; `value` is readable and private to
        // the caller, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(value, dst, self.value_size) };
        Ok(())
    }

    /// Zeroes every value.
    pub(super) fn clear(&self) {
        // SAFETY: the data region spans `max_entries * stride` bytes.
        unsafe { std::ptr::write_bytes(self.data, 0, self.max_entries as usize * self.stride) };
    }
}
