//! The real driver: `libcuda.so.1` (or `GPUBPF_CUDA_LIBRARY`), its exported functions,
//! and the map from a function address back to the exported symbol it is.
//!
//! The shim exports its own `dlsym`, so every lookup here goes through the *real* `dlsym`,
//! found with `dlvsym(RTLD_NEXT, "dlsym", …)` (never through the `dlsym` symbol, which
//! would resolve to the shim itself).

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::OnceLock;

use crate::generated::{VARIANTS, VARIANT_COUNT};

/// Environment variable naming the driver library (tests point it at the mock driver).
pub const LIBRARY_ENV: &str = "GPUBPF_CUDA_LIBRARY";
/// The driver library's soname.
pub const DEFAULT_LIBRARY: &str = "libcuda.so.1";

/// `dlsym`'s C signature.
pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static HANDLE: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static OPEN_FAILED_LOGGED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread runs `dlopen` of the driver (whose constructors may call
    /// `dlsym`, which must not try to open it again).
    static OPENING: Cell<bool> = const { Cell::new(false) };
}

/// The C library's `dlsym`: the next definition after the shim, by symbol version
/// (`GLIBC_2.34` since glibc merged libdl, `GLIBC_2.2.5` before, on x86-64).
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: both strings are NUL-terminated; `dlvsym` has no other preconditions.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: `p` is the C library's `dlsym`, which has this signature.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

/// Whether the driver library has been opened.
pub fn is_open() -> bool {
    !HANDLE.load(Ordering::Acquire).is_null()
}

/// The driver library's handle, opening it on first use (`None` when it cannot be opened,
/// or while this thread is opening it).
pub fn handle() -> Option<*mut c_void> {
    let h = HANDLE.load(Ordering::Acquire);
    if !h.is_null() {
        return Some(h);
    }
    if OPENING.try_with(Cell::get).unwrap_or(true) {
        return None;
    }
    let path = std::env::var_os(LIBRARY_ENV).unwrap_or_else(|| DEFAULT_LIBRARY.into());
    let cpath =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()?;
    let _ = OPENING.try_with(|o| o.set(true));
    // SAFETY: `cpath` is NUL-terminated; `dlopen` has no other preconditions.
    let h = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    let _ = OPENING.try_with(|o| o.set(false));
    if h.is_null() {
        if !OPEN_FAILED_LOGGED.swap(true, Ordering::Relaxed) {
            // SAFETY: `dlerror` returns NULL or a NUL-terminated thread-local string.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                String::new()
            } else {
                // SAFETY: non-null, NUL-terminated (above).
                unsafe { CStr::from_ptr(why) }
                    .to_string_lossy()
                    .into_owned()
            };
            tracing::error!(library = ?path, error = %why, "cannot open the CUDA driver; driver calls fail with CUDA_ERROR_NOT_FOUND");
        }
        return None;
    }
    match HANDLE.compare_exchange(null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(h),
        // Another thread opened it first: same library, one more reference, kept.
        Err(existing) => Some(existing),
    }
}

/// The driver's export `symbol`, through the real `dlsym`.
pub fn lookup(symbol: &CStr) -> Option<*mut c_void> {
    let h = handle()?;
    let dlsym = real_dlsym()?;
    // SAFETY: `h` is a live handle from `dlopen`, `symbol` is NUL-terminated.
    let p = unsafe { dlsym(h, symbol.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Every catalogued symbol the driver exports, as (address, variant index), sorted by
/// address; built on first use (the first `cuGetProcAddress`).
fn by_address() -> &'static [(usize, u16)] {
    static TABLE: OnceLock<Vec<(usize, u16)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Vec::with_capacity(VARIANT_COUNT);
        for v in 0..VARIANT_COUNT {
            if let (Some(p), Ok(i)) = (crate::hot::real(v), u16::try_from(v)) {
                t.push((p as usize, i));
            }
        }
        t.sort_unstable();
        t
    })
}

/// The variant whose real function is at `addr`. When several exported symbols share the
/// address, the one of the requested base name `requested` wins, and among those the
/// symbol the catalog says a request for (`version`, `per_thread`) resolves to.
pub fn variant_at(
    addr: *mut c_void,
    requested: &[u8],
    version: u32,
    per_thread: bool,
) -> Option<usize> {
    let table = by_address();
    let addr = addr as usize;
    let start = table.partition_point(|(a, _)| *a < addr);
    let same: Vec<usize> = table[start..]
        .iter()
        .take_while(|(a, _)| *a == addr)
        .map(|(_, v)| usize::from(*v))
        .collect();
    choose(&same, requested, version, per_thread)
}

/// Among variants `same` that share one address, the one to answer a request for base name
/// `requested` at (`version`, `per_thread`): the only one; else those of the requested base
/// name, preferring the symbol the catalog predicts for the request; else the first.
fn choose(same: &[usize], requested: &[u8], version: u32, per_thread: bool) -> Option<usize> {
    match same {
        [] => None,
        [one] => Some(*one),
        many => {
            let points = gpubpf_runtime::attach::all();
            let point_of = |v: usize| {
                VARIANTS
                    .get(v)
                    .and_then(|e| points.get(usize::from(e.point)))
            };
            let named: Vec<usize> = many
                .iter()
                .copied()
                .filter(|&v| point_of(v).is_some_and(|p| p.name.as_bytes() == requested))
                .collect();
            let pool = if named.is_empty() { many } else { &named[..] };
            let predicted = pool.iter().copied().find(|&v| {
                point_of(v)
                    .and_then(|p| p.variant_for_request(version, per_thread))
                    .zip(VARIANTS.get(v))
                    .is_some_and(|(want, e)| want.symbol.as_bytes() == e.symbol.to_bytes())
            });
            predicted.or_else(|| pool.first().copied())
        }
    }
}

/// The variant index of exported symbol `name`, if catalogued.
pub fn variant_by_symbol(name: &[u8]) -> Option<usize> {
    let t = &crate::generated::BY_SYMBOL;
    t.binary_search_by(|(s, _)| (*s).cmp(name))
        .ok()
        .and_then(|i| t.get(i))
        .map(|(_, v)| usize::from(*v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(symbol: &str) -> usize {
        variant_by_symbol(symbol.as_bytes()).expect("catalogued")
    }

    #[test]
    fn symbols_map_to_their_variant_and_attach_point() {
        let points = gpubpf_runtime::attach::all();
        let mut n = 0;
        for (pi, p) in points.iter().enumerate() {
            for variant in p.variants {
                let e = &VARIANTS[v(variant.symbol)];
                assert_eq!(e.symbol.to_bytes(), variant.symbol.as_bytes());
                assert_eq!(usize::from(e.point), pi);
                n += 1;
            }
        }
        assert_eq!(n, VARIANT_COUNT);
        assert_eq!(variant_by_symbol(b"cuNoSuchFunction"), None);
        assert_eq!(variant_by_symbol(b"dlsym"), None);
    }

    #[test]
    fn shared_addresses_resolve_to_the_requested_variant() {
        let (legacy, ptsz) = (v("cuLaunchKernel"), v("cuLaunchKernel_ptsz"));
        let alloc = v("cuMemAlloc_v2");
        assert_eq!(choose(&[], b"cuLaunchKernel", 13000, false), None);
        assert_eq!(
            choose(&[alloc], b"cuLaunchKernel", 13000, false),
            Some(alloc)
        );
        // One function exported under both names: the request's flags decide.
        assert_eq!(
            choose(&[legacy, ptsz], b"cuLaunchKernel", 13000, true),
            Some(ptsz)
        );
        assert_eq!(
            choose(&[ptsz, legacy], b"cuLaunchKernel", 13000, false),
            Some(legacy)
        );
        // Another base name's symbol at the same address loses to the requested one.
        assert_eq!(
            choose(&[alloc, legacy], b"cuLaunchKernel", 13000, false),
            Some(legacy)
        );
        // Nothing of the requested name: the first.
        assert_eq!(
            choose(&[alloc, legacy], b"cuFoo", 13000, false),
            Some(alloc)
        );
    }
}
