//! The shim's handling of symbol names from `dlsym` and `cuGetProcAddress` (fuzz target
//! `shim_names`; stable twin `crates/shim/tests/fuzz_names.rs`). Input: 4 bytes CUDA
//! version (LE), 1 byte flags, 8 bytes the address the driver's resolver "returns", then
//! the symbol name (up to the first NUL).

use std::ffi::{c_int, c_void, CString};
use std::ptr::null_mut;

use gpubpf::driver;
use gpubpf::generated::VARIANTS;
use gpubpf::route;

thread_local! {
    static ANSWER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A stand-in for the driver's `cuGetProcAddress`: answers the address under test.
extern "C" fn fake_resolver(_: *mut c_void, pfn: *mut c_void, _: c_int, _: u64) -> u32 {
    if !pfn.is_null() {
        // SAFETY: the caller passes a valid `void **`.
        unsafe {
            pfn.cast::<usize>()
                .write_unaligned(ANSWER.with(|a| a.get()))
        };
    }
    0
}

/// Names and addresses never make the shim panic, a catalogued name maps to the variant
/// of exactly that symbol, a `dlsym` on a handle that is not the driver's is always
/// forwarded, and `cuGetProcAddress` hands back either the driver's answer untouched or
/// one of the shim's wrappers.
pub fn shim_names(data: &[u8]) {
    if data.len() < 13 {
        return;
    }
    let version = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let flags = u64::from(data[4]);
    let mut addr = [0u8; 8];
    addr.copy_from_slice(&data[5..13]);
    let addr = usize::from_le_bytes(addr);
    let raw = &data[13..];
    let name = raw.split(|b| *b == 0).next().unwrap_or(&[]);

    if let Some(v) = driver::variant_by_symbol(name) {
        let e = VARIANTS.get(v).expect("variant index in range");
        assert_eq!(e.symbol.to_bytes(), name, "variant of another symbol");
    }
    let _ = driver::variant_at(addr as *mut c_void, name, version, flags & 2 != 0);

    let c = CString::new(name).expect("no NUL inside");
    let mut not_driver = 0u8;
    for handle in [
        null_mut(),
        (&raw mut not_driver).cast::<c_void>(),
        libc::RTLD_NEXT,
    ] {
        let r = route::dlsym_route(handle, c.as_ptr());
        assert!(r.answer.is_null(), "answered a lookup outside the driver");
        assert!(!r.forward.is_null());
    }

    ANSWER.with(|a| a.set(addr));
    let mut pfn: usize = 0;
    // SAFETY: `fake_resolver` has the resolver's signature; the name is NUL-terminated and
    // `pfn` a valid `void **`.
    let r = unsafe {
        route::get_proc_address(
            fake_resolver as *mut c_void,
            c.as_ptr() as *mut c_void,
            (&raw mut pfn).cast(),
            c_int::try_from(version).unwrap_or(c_int::MAX),
            flags,
        )
    };
    assert_eq!(r, 0);
    assert!(
        pfn == addr || VARIANTS.iter().any(|e| e.wrapper.0 as usize == pfn),
        "cuGetProcAddress answered {pfn:#x}, neither the driver's answer nor a wrapper"
    );
}
