//! Map and ring-buffer helpers.

use crate::maps::Map;

use super::neg_errno;

/// `BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP`: accepted, without effect (consumers poll).
const RB_WAKEUP_FLAGS: u64 = 3;

/// # Safety
/// `handle` is 0 or the address of a live `Map` (the verifier only lets map handles
/// produced by the prepare step reach helpers).
#[inline(always)]
unsafe fn map_ref<'a>(handle: u64) -> Option<&'a Map> {
    // SAFETY: per contract.
    unsafe { (handle as *const Map).as_ref() }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`map_lookup_elem`] on this thread (unit tests of the JIT's inlined
    /// lookups: which ones reach the helper).
    pub(crate) static LOOKUP_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// `void *bpf_map_lookup_elem(void *map, const void *key)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    #[cfg(test)]
    LOOKUP_CALLS.with(|c| c.set(c.get() + 1));
    // SAFETY: the verifier proved `map` is a map handle and `key` has key_size bytes.
    unsafe {
        match map_ref(map) {
            Some(m) => m.lookup_ptr(key as *const u8) as u64,
            None => 0,
        }
    }
}

/// `long bpf_map_update_elem(void *map, const void *key, const void *value, u64 flags)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn map_update_elem(map: u64, key: u64, value: u64, flags: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `map` is a map handle and `key`/`value` are readable for
    // the map's key/value sizes.
    unsafe {
        match map_ref(map) {
            Some(m) => m.update_raw(key as *const u8, value as *const u8, flags) as u64,
            None => neg_errno(libc::EINVAL),
        }
    }
}

/// `long bpf_map_delete_elem(void *map, const void *key)`.
pub extern "C" fn map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as for `map_lookup_elem`.
    unsafe {
        match map_ref(map) {
            Some(m) => m.delete_raw(key as *const u8) as u64,
            None => neg_errno(libc::EINVAL),
        }
    }
}

/// `long bpf_ringbuf_output(void *ringbuf, void *data, u64 size, u64 flags)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn ringbuf_output(rb: u64, data: u64, size: u64, flags: u64, _: u64) -> u64 {
    if flags & !RB_WAKEUP_FLAGS != 0 {
        return neg_errno(libc::EINVAL);
    }
    // SAFETY: the verifier proved `rb` is a ring-buffer handle and `data` readable for
    // `size` bytes.
    let (m, bytes) = unsafe {
        let Some(m) = map_ref(rb) else {
            return neg_errno(libc::EINVAL);
        };
        let bytes: &[u8] = if size == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(data as *const u8, size as usize)
        };
        (m, bytes)
    };
    m.ringbuf_output_raw(bytes) as u64
}

/// `void *bpf_ringbuf_reserve(void *ringbuf, u64 size, u64 flags)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn ringbuf_reserve(rb: u64, size: u64, flags: u64, _: u64, _: u64) -> u64 {
    if flags != 0 {
        return 0;
    }
    // SAFETY: the verifier proved `rb` is a ring-buffer handle.
    match unsafe { map_ref(rb) } {
        Some(m) => m.ringbuf_reserve_raw(size) as u64,
        None => 0,
    }
}

/// `void bpf_ringbuf_submit(void *data, u64 flags)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn ringbuf_submit(data: u64, _flags: u64, _: u64, _: u64, _: u64) -> u64 {
    if data != 0 {
        // SAFETY: the verifier tracks reservations: `data` came from `bpf_ringbuf_reserve`
        // and is released exactly once.
        unsafe { Map::ringbuf_commit(data as *mut u8, false) };
    }
    0
}

/// `void bpf_ringbuf_discard(void *data, u64 flags)`.
pub extern "C" fn ringbuf_discard(data: u64, _flags: u64, _: u64, _: u64, _: u64) -> u64 {
    if data != 0 {
        // SAFETY: as for `ringbuf_submit`.
        unsafe { Map::ringbuf_commit(data as *mut u8, true) };
    }
    0
}
