//! The application's call site for `gpubpf_get_caller`: the first return address on this
//! thread's stack outside the shim (the application's code, or the library that called the
//! driver, e.g. a dynamically linked cudart).
//!
//! Walked with the `backtrace` crate (libgcc's unwinder over the modules' unwind tables)
//! before the programs of a chain that calls the helper run, never otherwise: it costs
//! microseconds, and is meant for debugging policies such as leak_check.

use std::ffi::c_void;
use std::sync::OnceLock;

/// The address range of this library's code: `[start, end)`.
fn own_range() -> (usize, usize) {
    static RANGE: OnceLock<(usize, usize)> = OnceLock::new();
    *RANGE.get_or_init(|| {
        let here = own_range as *const () as usize;
        let mut found = (here, here + 1);
        let mut data = (here, &mut found);
        // SAFETY: dl_iterate_phdr calls `visit` once per loaded object with a valid
        // `dl_phdr_info` and our `data` pointer; `visit` only reads them.
        unsafe {
            libc::dl_iterate_phdr(
                Some(visit),
                (&mut data as *mut (usize, &mut (usize, usize))).cast(),
            );
        }
        found
    })
}

/// `dl_iterate_phdr` callback: when the object contains `data.0`, its loaded extent.
unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
    // SAFETY: `data` is the `(usize, &mut (usize, usize))` own_range passed.
    let (here, found) = unsafe { &mut *data.cast::<(usize, &mut (usize, usize))>() };
    // SAFETY: `info` is the loader's description of one object, valid during this call.
    let info = unsafe { &*info };
    let base = info.dlpi_addr as usize;
    // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD) {
        let start = base.wrapping_add(h.p_vaddr as usize);
        lo = lo.min(start);
        hi = hi.max(start.wrapping_add(h.p_memsz as usize));
    }
    if (lo..hi).contains(here) {
        **found = (lo, hi);
        return 1;
    }
    0
}

/// The first return address on this thread's stack that lies outside the shim; 0 when the
/// walk finds none.
pub fn capture() -> u64 {
    let (lo, hi) = own_range();
    let mut caller = 0u64;
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if ip == 0 {
            return false;
        }
        if (lo..hi).contains(&ip) {
            return true;
        }
        caller = ip as u64;
        false
    });
    caller
}
