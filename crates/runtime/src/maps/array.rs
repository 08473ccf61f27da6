//! Array maps: `max_entries` values of `round8(value_size)` bytes, indexed by a `u32` key.
//! Lookups are a bounds check and an address computation; no locks anywhere. Updates copy
//! the value in place (as Linux does for arrays): a concurrent reader may observe a
//! partially copied value, while BPF atomics on the value stay exact.

use super::{MapError, BPF_EXIST, BPF_NOEXIST};

#[derive(Debug)]
pub(super) struct ArrayMap {
    pub(super) data: *mut u8,
    pub(super) stride: usize,
    pub(super) value_size: usize,
    pub(super) max_entries: u32,
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

    /// # Safety
    /// `key` readable for 4 bytes, `value` readable for `value_size` bytes.
    pub(super) unsafe fn update(
        &self,
        key: *const u8,
        value: *const u8,
        flags: u64,
    ) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::InvalidArgument {
                reason: format!("unknown update flags {flags:#x}"),
            });
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
