//! `gpubpf_get_kernel_name`: the name of a `CUfunction`, through resolvers that whoever
//! hosts the runtime installs. The shim installs the real driver's `cuFuncGetName` and
//! `cuKernelGetName` (looked up in the driver itself, not through wrappers, so the calls are
//! not policed again): a launch's handle is a `CUfunction` (`cuModuleGetFunction`, Triton,
//! cuBLAS) or a library's `CUkernel` cast to one (CUDA 12+ cudart, hence PyTorch:
//! `cuLibraryGetKernel`), which `cuFuncGetName` refuses and `cuKernelGetName` names.
//! `gpubpf test-run --kernel-name` installs a fixed name. Without a resolver the helper
//! answers `-ENOENT`.

use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::kernel_cache;
use super::neg_errno;

pub use super::kernel_cache::{unloading, Unloading};

/// `CUresult cuFuncGetName(const char **name, CUfunction hfunc)`, and `cuKernelGetName`
/// (the same with a `CUkernel`).
pub type FuncGetNameFn = unsafe extern "C" fn(*mut *const c_char, u64) -> i32;

/// The installed resolvers as addresses (0: none): `cuFuncGetName`'s, `cuKernelGetName`'s.
static RESOLVER: AtomicUsize = AtomicUsize::new(0);
static KERNEL_RESOLVER: AtomicUsize = AtomicUsize::new(0);

/// Installs (or, with `None`, removes) the function that names a `CUfunction`. It must
/// behave as `cuFuncGetName`: 0 and a NUL-terminated string that stays valid while the
/// function is loaded, or a non-zero `CUresult`.
pub fn set_kernel_name_resolver(f: Option<FuncGetNameFn>) {
    RESOLVER.store(f.map_or(0, |f| f as usize), Ordering::Release);
    kernel_cache::invalidate();
}

/// Installs (or removes) the function that names a library's `CUkernel`, asked when the
/// other one refuses a handle: it must behave as `cuKernelGetName`.
pub fn set_library_kernel_name_resolver(f: Option<FuncGetNameFn>) {
    KERNEL_RESOLVER.store(f.map_or(0, |f| f as usize), Ordering::Release);
    kernel_cache::invalidate();
}

/// A resolver from a symbol's address (what `dlsym` returns); `None` for null.
///
/// # Safety
/// `addr` must be null or a function with the signature of `cuFuncGetName` that stays
/// loaded.
pub unsafe fn resolver_at(addr: *mut std::ffi::c_void) -> Option<FuncGetNameFn> {
    // SAFETY: the caller promises `addr` is such a function (non-null: checked).
    (!addr.is_null())
        .then(|| unsafe { std::mem::transmute::<*mut std::ffi::c_void, FuncGetNameFn>(addr) })
}

fn installed(slot: &AtomicUsize) -> Option<FuncGetNameFn> {
    let a = slot.load(Ordering::Acquire);
    if a == 0 {
        return None;
    }
    // SAFETY: a non-zero value was stored from a `FuncGetNameFn` by one of the setters;
    // function pointers round-trip through `usize`.
    Some(unsafe { std::mem::transmute::<usize, FuncGetNameFn>(a) })
}

/// The driver's string naming `f`: `cuFuncGetName`'s, else `cuKernelGetName`'s; `ENOENT`
/// when neither names it (or none is installed). Always in this order, although a cudart
/// application then makes two driver calls per launch: `cuFuncGetName` was seen on the real
/// driver to refuse a `CUkernel` cleanly (docs/gpu-runs.md, 2026-12-06), while nothing
/// says that `cuKernelGetName` checks that a handle is a `CUkernel` before reading it, so
/// it is only given handles `cuFuncGetName` refused.
fn resolve(f: u64) -> Result<*const c_char, i32> {
    for slot in [&RESOLVER, &KERNEL_RESOLVER] {
        let Some(resolve) = installed(slot) else {
            continue;
        };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: `resolve` behaves as cuFuncGetName (see the setters): it writes one
        // pointer into `name`. An invalid handle makes the driver answer an error, not fault.
        let rc = unsafe { resolve(&mut name, f) };
        if rc == 0 && !name.is_null() {
            return Ok(name);
        }
    }
    Err(libc::ENOENT)
}

/// The name of `f` into `out` (NUL-terminated, truncated, zero-padded): its length including
/// the NUL, or an errno (`EINVAL`: an empty `out`; `ENOENT`: no resolver, a NULL handle or
/// the driver has no name). `out` is all zeros on error.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub fn kernel_name(f: u64, out: &mut [u8]) -> Result<usize, i32> {
    if out.is_empty() {
        return Err(libc::EINVAL);
    }
    if f == 0 {
        out.fill(0);
        return Err(libc::ENOENT);
    }
    // Asked of the driver once per handle (kernel_cache.rs says why and when a copy dies).
    // A hit writes all of `out`; anything else starts from zeros.
    let epoch = kernel_cache::usable_epoch();
    if let Some(n) = epoch.and_then(|e| kernel_cache::get(f, e, out)) {
        return Ok(n);
    }
    out.fill(0);
    let name = resolve(f)?;
    // The string is the driver's own and valid while the function is loaded
    // (`cuFuncGetName`'s contract; the call at hand names a function it just accepted), so
    // it is read directly: no system call per launch (a fault-safe `process_vm_readv` read
    // cost two, which dominated a traced launch). Its length is found with libc's
    // vectorised `strnlen` and the bytes copied at once: a byte-by-byte copy cost ~0.4 ns a
    // byte, and the mangled names of PyTorch's kernels fill trace's whole 64-byte buffer
    // (`cargo bench --bench maps -- get_kernel_name`: 31.8 -> 7.3 ns, docs/maps.md).
    let max = out.len() - 1;
    // SAFETY: `name` is a NUL-terminated string (see above); `strnlen` reads it up to its
    // NUL or `max` bytes, whichever comes first.
    let n = unsafe { libc::strnlen(name, max) };
    // SAFETY: the first `n <= max` bytes of `name` were just measured as readable, and
    // `out` has room for `max + 1` bytes; driver memory and our buffer do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(name.cast::<u8>(), out.as_mut_ptr(), n) };
    if let Some(e) = epoch.filter(|&e| kernel_cache::still(e)) {
        // SAFETY: `name` is the NUL-terminated string the driver just gave (see above).
        unsafe { kernel_cache::put(f, e, name) };
    }
    // `out[n]` is the NUL (zeroed above): a name of `max` bytes or more is truncated.
    Ok(if n < max { n + 1 } else { out.len() })
}

/// `long gpubpf_get_kernel_name(u64 f, char *buf, u32 size)`.
// Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
#[link_section = ".text.hot.gpubpf"]
pub extern "C" fn get_kernel_name(f: u64, buf: u64, size: u64, _: u64, _: u64) -> u64 {
    if buf == 0 || size == 0 {
        return neg_errno(libc::EINVAL);
    }
    // SAFETY: the verifier proved `buf` writable for `size` bytes (WritableMem + ConstSize).
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size as usize) };
    match kernel_name(f, out) {
        Ok(n) => n as u64,
        Err(e) => neg_errno(e),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Serialises the tests that install a resolver (one per process).
    pub(crate) static RESOLVER_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// `N - 1` bytes `b` and a NUL: a name of a chosen length.
    pub(crate) const fn filled<const N: usize>(b: u8) -> [u8; N] {
        let mut a = [b; N];
        a[N - 1] = 0;
        a
    }

    /// Takes [`RESOLVER_LOCK`] and installs `f` as the only resolver.
    pub(crate) fn only_resolver(f: FuncGetNameFn) -> std::sync::MutexGuard<'static, ()> {
        let serial = RESOLVER_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set_library_kernel_name_resolver(None);
        set_kernel_name_resolver(Some(f));
        serial
    }

    /// A mangled name as long as PyTorch's (96 bytes): longer than trace's buffer.
    static LONG: &[u8] =
        b"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_\0";

    /// What a resolver stand-in answers: `s` through the out-pointer `name`, or
    /// `CUDA_ERROR_INVALID_HANDLE` for a handle it does not know.
    ///
    /// # Safety
    /// `name` must be writable (the resolver's caller passes one).
    pub(crate) unsafe fn answer(name: *mut *const c_char, s: Option<&'static [u8]>) -> i32 {
        let Some(s) = s else {
            return 400; // CUDA_ERROR_INVALID_HANDLE
        };
        // SAFETY: per contract `name` is writable.
        unsafe { *name = s.as_ptr().cast() };
        0
    }

    unsafe extern "C" fn fake(name: *mut *const c_char, f: u64) -> i32 {
        static NAME: &[u8] = b"vector_add\0";
        let s = match f {
            0x1234 => Some(NAME),
            0x5678 => Some(LONG),
            _ => None,
        };
        // SAFETY: the caller passes a writable out-pointer.
        unsafe { answer(name, s) }
    }

    #[test]
    fn names_through_the_resolver_and_enoent_without() {
        let _serial = RESOLVER_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buf = [0xffu8; 16];
        set_kernel_name_resolver(None);
        assert_eq!(kernel_name(0x1234, &mut buf), Err(libc::ENOENT));
        assert_eq!(buf, [0; 16], "zeroed on error");
        set_kernel_name_resolver(Some(fake));
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(&buf[..12], b"vector_add\0\0");
        assert_eq!(kernel_name(0x9999, &mut buf), Err(libc::ENOENT));
        assert_eq!(kernel_name(0, &mut buf), Err(libc::ENOENT));
        let mut small = [0xffu8; 4];
        assert_eq!(kernel_name(0x1234, &mut small), Ok(4));
        assert_eq!(&small, b"vec\0", "truncated, NUL-terminated");
        let r = get_kernel_name(0x1234, buf.as_mut_ptr() as u64, 16, 0, 0);
        assert_eq!(r, 11);
        let mut trace_buf = [0xffu8; 64];
        assert_eq!(kernel_name(0x5678, &mut trace_buf), Ok(64));
        assert_eq!(&trace_buf[..63], &LONG[..63], "the name's first 63 bytes");
        assert_eq!(trace_buf[63], 0, "then the NUL");
        let mut exact = [0xffu8; 11];
        assert_eq!(kernel_name(0x1234, &mut exact), Ok(11));
        assert_eq!(&exact, b"vector_add\0", "fits exactly with its NUL");
        set_kernel_name_resolver(None);
        let r = get_kernel_name(0x1234, buf.as_mut_ptr() as u64, 16, 0, 0);
        assert_eq!(r as i64, -i64::from(libc::ENOENT));
    }

    /// Calls of [`library`], the `cuKernelGetName` stand-in.
    static LIBRARY_CALLS: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn library(name: *mut *const c_char, k: u64) -> i32 {
        static NAME: &[u8] = b"library_kernel\0";
        LIBRARY_CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller passes a writable out-pointer.
        unsafe { answer(name, (k == 0xab00).then_some(NAME)) }
    }

    #[test]
    fn library_kernels_are_named_by_the_second_resolver_only_after_the_first_refused() {
        let _serial = RESOLVER_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buf = [0u8; 32];
        set_kernel_name_resolver(Some(fake));
        set_library_kernel_name_resolver(None);
        assert_eq!(
            kernel_name(0xab00, &mut buf),
            Err(libc::ENOENT),
            "no library resolver"
        );
        set_library_kernel_name_resolver(Some(library));
        assert_eq!(kernel_name(0xab00, &mut buf), Ok(15));
        assert_eq!(&buf[..15], b"library_kernel\0");
        // A function's handle is never shown to the library resolver.
        let before = LIBRARY_CALLS.load(Ordering::Relaxed);
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(&buf[..11], b"vector_add\0");
        assert_eq!(LIBRARY_CALLS.load(Ordering::Relaxed), before);
        assert_eq!(kernel_name(0x9999, &mut buf), Err(libc::ENOENT));
        set_kernel_name_resolver(None);
        assert_eq!(
            kernel_name(0xab00, &mut buf),
            Ok(15),
            "the library resolver alone"
        );
        set_library_kernel_name_resolver(None);
        assert_eq!(kernel_name(0xab00, &mut buf), Err(libc::ENOENT));
    }
}

#[cfg(test)]
mod cached {
    use super::kernel_cache::NAME_BYTES;
    use super::tests::{answer, filled, only_resolver};
    use super::*;

    /// Calls of [`counting`].
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    /// A name longer than an entry keeps (200 bytes and the NUL).
    static LONGER: [u8; 201] = filled(b'k');

    /// A `cuFuncGetName` stand-in that counts its calls: 0x1234 is `vector_add`, 0x4321
    /// the 200-byte name.
    unsafe extern "C" fn counting(name: *mut *const c_char, f: u64) -> i32 {
        static NAME: &[u8] = b"vector_add\0";
        CALLS.fetch_add(1, Ordering::Relaxed);
        let s: Option<&'static [u8]> = match f {
            0x1234 => Some(NAME),
            0x4321 => Some(&LONGER),
            _ => None,
        };
        // SAFETY: the caller passes a writable out-pointer.
        unsafe { answer(name, s) }
    }

    fn calls() -> usize {
        CALLS.load(Ordering::Relaxed)
    }

    /// The driver is asked once per handle; the copy answers every buffer size exactly as
    /// the driver's string would.
    #[test]
    fn a_handle_is_named_by_the_driver_once() {
        let _serial = only_resolver(counting);
        let before = calls();
        let mut buf = [0xffu8; 16];
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before + 1);
        for _ in 0..3 {
            buf.fill(0xff);
            assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
            assert_eq!(&buf, b"vector_add\0\0\0\0\0\0", "zero-padded");
        }
        let mut small = [0xffu8; 4];
        assert_eq!(kernel_name(0x1234, &mut small), Ok(4));
        assert_eq!(&small, b"vec\0", "truncated from the copy");
        let mut exact = [0xffu8; 11];
        assert_eq!(kernel_name(0x1234, &mut exact), Ok(11));
        assert_eq!(&exact, b"vector_add\0");
        assert_eq!(calls(), before + 1, "every later call answered by the copy");
        // A refused handle is asked again each time (nothing to copy).
        assert_eq!(kernel_name(0x9999, &mut buf), Err(libc::ENOENT));
        assert_eq!(kernel_name(0x9999, &mut buf), Err(libc::ENOENT));
        assert_eq!(calls(), before + 3);
        // Installing a resolver forgets every copy.
        set_kernel_name_resolver(Some(counting));
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before + 4);
        set_kernel_name_resolver(None);
        assert_eq!(
            kernel_name(0x1234, &mut buf),
            Err(libc::ENOENT),
            "no stale copy"
        );
    }

    /// While an unload is in progress the driver is asked every time and nothing is
    /// copied; after it every earlier copy is dead.
    #[test]
    fn an_unload_kills_every_copy() {
        let _serial = only_resolver(counting);
        let mut buf = [0u8; 64];
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        let before = calls();
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before, "copied");
        let guard = unloading();
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before + 2, "bypassed during the unload");
        drop(guard);
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before + 3, "the copy died with the unload");
        assert_eq!(kernel_name(0x1234, &mut buf), Ok(11));
        assert_eq!(calls(), before + 3, "copied again");
        set_kernel_name_resolver(None);
    }

    /// A name longer than an entry keeps: a buffer that truncates it within the copy is
    /// answered from it, a larger one by the driver.
    #[test]
    fn a_long_name_is_copied_only_as_far_as_it_is_kept() {
        let _serial = only_resolver(counting);
        let mut trace_buf = [0xffu8; 64];
        assert_eq!(kernel_name(0x4321, &mut trace_buf), Ok(64));
        let before = calls();
        trace_buf.fill(0xff);
        assert_eq!(kernel_name(0x4321, &mut trace_buf), Ok(64));
        assert_eq!(&trace_buf[..63], &LONGER[..63]);
        assert_eq!(trace_buf[63], 0);
        assert_eq!(calls(), before, "64 bytes come from the copy");
        let mut kept = [0xffu8; NAME_BYTES + 1];
        assert_eq!(kernel_name(0x4321, &mut kept), Ok(NAME_BYTES + 1));
        assert_eq!(&kept[..NAME_BYTES], &LONGER[..NAME_BYTES]);
        assert_eq!(calls(), before, "as much as the copy keeps");
        let mut whole = [0xffu8; 256];
        assert_eq!(kernel_name(0x4321, &mut whole), Ok(201));
        assert_eq!(&whole[..201], &LONGER[..]);
        assert_eq!(whole[201..], [0u8; 55]);
        assert_eq!(calls(), before + 1, "the whole name from the driver");
        set_kernel_name_resolver(None);
    }
}

#[cfg(test)]
mod cached_threads {
    use super::tests::{answer, filled, only_resolver};
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// Unloads so far: the stand-in names 0x77 `alpha` after an even count, a 100-byte name
    /// after an odd one, and changes its answer only inside an [`unloading`] guard, as a
    /// driver reuses a freed handle only after the unload that freed it began.
    static GEN: AtomicU64 = AtomicU64::new(0);
    static BETA: [u8; 101] = filled(b'b');

    unsafe extern "C" fn by_generation(name: *mut *const c_char, f: u64) -> i32 {
        let s: &'static [u8] = if GEN.load(Ordering::SeqCst) % 2 == 0 {
            b"alpha\0"
        } else {
            &BETA
        };
        // SAFETY: the caller passes a writable out-pointer.
        unsafe { answer(name, (f == 0x77).then_some(s)) }
    }

    fn expected(generation: u64) -> Vec<u8> {
        let name: &[u8] = if generation % 2 == 0 {
            b"alpha"
        } else {
            &BETA[..100]
        };
        let mut v = name[..name.len().min(63)].to_vec();
        v.resize(64, 0);
        v
    }

    /// Readers racing an unloader never get a torn name, nor one older than the
    /// generation they saw before asking.
    #[test]
    fn readers_racing_unloads_get_whole_and_current_names() {
        let _serial = only_resolver(by_generation);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..2_000 {
                    let guard = unloading();
                    GEN.fetch_add(1, Ordering::SeqCst);
                    drop(guard);
                    std::thread::yield_now();
                }
                stop.store(true, Ordering::SeqCst);
            });
            for _ in 0..4 {
                s.spawn(|| {
                    let mut buf = [0u8; 64];
                    let mut checked = 0u64;
                    while !stop.load(Ordering::SeqCst) || checked < 1_000 {
                        let g1 = GEN.load(Ordering::SeqCst);
                        let r = kernel_name(0x77, &mut buf);
                        let g2 = GEN.load(Ordering::SeqCst);
                        assert!(r.is_ok(), "{r:?}");
                        let ok = (g1..=g2).any(|g| buf[..] == expected(g)[..]);
                        assert!(
                            ok,
                            "generations {g1}..={g2}: got {:?}",
                            String::from_utf8_lossy(&buf)
                        );
                        checked += 1;
                    }
                });
            }
        });
        set_kernel_name_resolver(None);
    }
}

#[cfg(test)]
mod page_end {
    use super::tests::only_resolver;
    use super::*;
    use std::sync::atomic::AtomicU64;

    static NAME_AT: AtomicU64 = AtomicU64::new(0);

    unsafe extern "C" fn at_page_end(name: *mut *const c_char, _: u64) -> i32 {
        // SAFETY: the caller passes a writable out-pointer.
        unsafe { *name = NAME_AT.load(Ordering::Relaxed) as *const c_char };
        0
    }

    /// A name whose NUL is the last byte before an unmapped page is read without touching
    /// that page (the read stops at the NUL), even into a larger buffer.
    #[test]
    fn a_name_ending_at_an_unmapped_page_is_read() {
        let _serial = only_resolver(at_page_end);
        let page = crate::maps::mapping::page_size();
        // SAFETY: an anonymous private mapping of two pages; the second is made
        // inaccessible and both are unmapped at the end of the test.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let name = b"edge\0";
        // SAFETY: the first page is writable; `name` ends at its last byte.
        unsafe {
            let at = base.cast::<u8>().add(page - name.len());
            std::ptr::copy_nonoverlapping(name.as_ptr(), at, name.len());
            assert_eq!(
                libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                0
            );
            NAME_AT.store(at as u64, Ordering::Relaxed);
        }
        let mut buf = [0xffu8; 64];
        assert_eq!(kernel_name(0x1, &mut buf), Ok(5));
        assert_eq!(&buf[..6], b"edge\0\0");
        set_kernel_name_resolver(None);
        // SAFETY: unmaps what was mapped above.
        unsafe { libc::munmap(base, 2 * page) };
    }
}
