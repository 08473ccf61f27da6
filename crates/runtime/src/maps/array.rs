//! Array maps: `max_entries` values of `round8(value_size)` bytes, indexed by a `u32` key.
//! Lookups are a bounds check and an address computation; no locks anywhere. Updates copy
//! the value in place (as Linux does for arrays): a concurrent reader may observe a
//! partially copied value, while BPF atomics on the value stay exact.
//!
//! Updates of some fields only (`gpubpf maps update M --value field=…`) are a
//! read-modify-write of the named bits, serialised by a writer lock ([`MapLock`]) at the
//! start of the shared state; whole-value updates (programs, `bpf_map_update_elem`) take no
//! lock, as in Linux.

use super::lease::Lease;
use super::lock::{MapLock, MapLockGuard};
use super::{MapError, BPF_EXIST, BPF_NOEXIST};

#[derive(Debug)]
pub(super) struct ArrayMap {
    pub(super) data: *mut u8,
    pub(super) stride: usize,
    pub(super) value_size: usize,
    pub(super) max_entries: u32,
    /// The shared state (`layout::STATE_OFFSET`), which starts with the writer lock.
    pub(super) state: *mut u8,
    /// This process's lease for the writer lock.
    pub(super) lease: Lease,
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

    fn writer_lock(&self) -> MapLockGuard<'_> {
        // SAFETY: the state region starts with the writer lock (free as zeroes); the
        // mapping outlives `self`.
        let lock = unsafe { &*self.state.cast::<MapLock>() };
        lock.lock(&self.lease)
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
            let _guard = self.writer_lock();
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
