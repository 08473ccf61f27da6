//! The routes into the driver besides direct ELF binding (INTERCEPTION.md §2–4):
//!
//! - an exported `dlsym` that answers catalogued CUDA names looked up in the driver
//!   library's handle with the shim's wrappers, and forwards everything else to the C
//!   library's `dlsym` with a **tail jump**, so that the caller's return address — which
//!   glibc uses to resolve `RTLD_NEXT` — is the caller's, not the shim's;
//! - `cuGetProcAddress` / `cuGetProcAddress_v2` (their generated wrappers call
//!   [`get_proc_address`] / [`get_proc_address_v2`] as the "real call"): the real resolver
//!   runs, the **returned pointer** is mapped to the exported symbol it is, and that
//!   symbol's wrapper is handed back (the self-lookup of `cuGetProcAddress` therefore gets
//!   the shim's own); pointers that are no catalogued export pass through untouched.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

use crate::abi_types::CUresult;
use crate::driver;
use crate::generated::VARIANTS;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_FLAG: u64 = 0x2;

/// What the exported `dlsym` does: return `answer` when it is non-null, else jump to
/// `forward` with the caller's arguments.
#[repr(C)]
#[derive(Debug)]
pub struct DlsymRoute {
    /// The wrapper to return, or NULL.
    pub answer: *mut c_void,
    /// The function to tail-jump to: the real `dlsym` (or one that returns NULL when it
    /// cannot be found).
    pub forward: *mut c_void,
}

extern "C" fn dlsym_unavailable(_handle: *mut c_void, _symbol: *const c_char) -> *mut c_void {
    null_mut()
}

/// Decides a `dlsym(handle, symbol)` call (called by the exported `dlsym`; never panics).
pub extern "C" fn dlsym_route(handle: *mut c_void, symbol: *const c_char) -> DlsymRoute {
    let forward =
        driver::real_dlsym().map_or(dlsym_unavailable as *mut c_void, |f| f as *mut c_void);
    let answer = std::panic::catch_unwind(|| dlsym_answer(handle, symbol)).unwrap_or(null_mut());
    DlsymRoute { answer, forward }
}

/// The wrapper for `symbol` when `handle` is the driver library's and the driver exports
/// that catalogued symbol; NULL otherwise (the lookup is forwarded).
fn dlsym_answer(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // RTLD_DEFAULT (0) and RTLD_NEXT (-1) search the global scope, where the shim's exports
    // come first anyway.
    if symbol.is_null() || handle.is_null() || handle == libc::RTLD_NEXT {
        return null_mut();
    }
    // SAFETY: `dlsym`'s contract: `symbol` is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !name.starts_with(b"cu") {
        return null_mut();
    }
    let Some(v) = driver::variant_by_symbol(name) else {
        return null_mut();
    };
    if driver::handle() != Some(handle) || crate::hot::real(v).is_none() {
        return null_mut();
    }
    VARIANTS
        .get(v)
        .map_or(null_mut(), |e| e.wrapper.0.cast_mut())
}

/// The exported `dlsym`: a naked function that asks [`dlsym_route`] and either returns its
/// answer or jumps (not calls) to the real `dlsym`, arguments and return address intact.
///
/// # Safety
/// `dlsym`'s contract: `symbol` is a NUL-terminated string, `handle` a handle from `dlopen`
/// or a pseudo-handle.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // On entry rsp = 8 mod 16; after two pushes and 8 bytes it is 16-aligned for the call.
    // `dlsym_route` returns its two-pointer struct in rax (answer) and rdx (forward).
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {route}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "jmp rdx",
        "2:",
        "ret",
        route = sym dlsym_route,
    )
}

/// The exported `dlsym` on targets without the tail-jump implementation: forwards with an
/// ordinary call, so `dlsym(RTLD_NEXT, …)` from other libraries resolves relative to the
/// shim (a documented limitation of these targets).
///
/// # Safety
/// As for the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let r = dlsym_route(handle, symbol);
    if !r.answer.is_null() {
        return r.answer;
    }
    // SAFETY: `forward` is the real `dlsym` or `dlsym_unavailable`, both with this signature.
    unsafe { std::mem::transmute::<*mut c_void, driver::DlsymFn>(r.forward)(handle, symbol) }
}

/// Replaces `*pfn`, the real resolver's answer for `symbol`, by the wrapper of the exported
/// symbol it is (unknown addresses stay).
///
/// # Safety
/// `pfn` is NULL or a valid `void **`; `symbol` is NULL or NUL-terminated.
unsafe fn substitute(symbol: *mut c_void, pfn: *mut c_void, version: c_int, flags: u64) {
    if pfn.is_null() {
        return;
    }
    let pfn = pfn.cast::<*mut c_void>();
    // SAFETY: valid `void **` (the caller's contract).
    let addr = unsafe { pfn.read_unaligned() };
    if addr.is_null() {
        return;
    }
    let requested = if symbol.is_null() {
        &b""[..]
    } else {
        // SAFETY: NUL-terminated (the caller's contract).
        unsafe { CStr::from_ptr(symbol.cast::<c_char>()) }.to_bytes()
    };
    let version = u32::try_from(version).unwrap_or(0);
    if let Some(w) = driver::variant_at(addr, requested, version, flags & PER_THREAD_FLAG != 0)
        .and_then(|v| VARIANTS.get(v))
    {
        // SAFETY: as above.
        unsafe { pfn.write_unaligned(w.wrapper.0.cast_mut()) };
    }
}

/// `cuGetProcAddress(symbol, pfn, cudaVersion, flags)` through the real resolver `real`,
/// with the answer mapped to the shim's wrapper.
///
/// # Safety
/// `real` is the driver's `cuGetProcAddress`; the arguments are the caller's.
pub unsafe fn get_proc_address(
    real: *mut c_void,
    symbol: *mut c_void,
    pfn: *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    type Real = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int, u64) -> CUresult;
    // SAFETY: `real` has this signature (the caller's contract).
    let r = unsafe { std::mem::transmute::<*mut c_void, Real>(real)(symbol, pfn, version, flags) };
    if r == 0 {
        // SAFETY: the driver accepted the arguments, so `pfn` and `symbol` are valid.
        let _ = crate::hot::as_busy(|| unsafe { substitute(symbol, pfn, version, flags) });
    }
    r
}

/// `cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus)` through the real
/// resolver `real`, with the answer mapped to the shim's wrapper.
///
/// # Safety
/// `real` is the driver's `cuGetProcAddress_v2`; the arguments are the caller's.
pub unsafe fn get_proc_address_v2(
    real: *mut c_void,
    symbol: *mut c_void,
    pfn: *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_void,
) -> CUresult {
    type Real = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int, u64, *mut c_void) -> CUresult;
    // SAFETY: `real` has this signature (the caller's contract).
    let r = unsafe {
        std::mem::transmute::<*mut c_void, Real>(real)(symbol, pfn, version, flags, status)
    };
    if r == 0 {
        // SAFETY: the driver accepted the arguments, so `pfn` and `symbol` are valid.
        let _ = crate::hot::as_busy(|| unsafe { substitute(symbol, pfn, version, flags) });
    }
    r
}
