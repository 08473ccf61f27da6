//! The `shim_names` property (fuzz/props/shim.rs) with the mock driver of `tests/shim/`
//! loaded, so that the address-to-symbol map of `cuGetProcAddress` is populated: the
//! resolver "returns" the mock's real exports (and addresses next to them) for catalogued
//! and random names, and the shim must hand back the wrapper of a variant whose real
//! function is at that address. Needs `cc`; prints `skipped: …` without it.

#[path = "../../../fuzz/props/shim.rs"]
mod props;

use std::ffi::{c_int, c_void, CString};
use std::process::Command;

use gpubpf::driver;
use gpubpf::generated::{BY_SYMBOL, VARIANTS};
use gpubpf::{hot, route};

/// A resolver that succeeds and leaves `*pfn` as the caller set it (the driver's answer).
extern "C" fn resolver(_: *mut c_void, _: *mut c_void, _: c_int, _: u64) -> u32 {
    0
}

fn input(version: u32, flags: u8, addr: u64, name: &[u8]) -> Vec<u8> {
    let mut v = version.to_le_bytes().to_vec();
    v.push(flags);
    v.extend_from_slice(&addr.to_le_bytes());
    v.extend_from_slice(name);
    v
}

#[test]
fn names_and_addresses_with_the_mock_driver() {
    if !Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: cc not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libcuda.so.1");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/shim/mock_cuda.c");
    let out = Command::new("cc")
        .args([
            "-O1",
            "-shared",
            "-fPIC",
            "-Wl,-Bsymbolic",
            "-Wl,-soname,libcuda.so.1",
            "-o",
        ])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The only test of this binary: no other thread reads the environment yet.
    std::env::set_var(driver::LIBRARY_ENV, &lib);
    let handle = driver::handle().expect("mock driver opens");

    let mut exported = 0;
    for (sym, v) in BY_SYMBOL.iter() {
        let v = usize::from(*v);
        let c = CString::new(*sym).unwrap();
        let Some(real) = driver::lookup(&c) else {
            continue;
        };
        exported += 1;
        // dlsym on the driver's handle answers the wrapper; anything else is forwarded.
        let r = route::dlsym_route(handle, c.as_ptr());
        assert_eq!(r.answer, VARIANTS[v].wrapper.0.cast_mut(), "{c:?}");
        for (version, flags) in [(12000, 0), (12000, 2), (0, 0)] {
            let mut pfn = real as usize;
            // SAFETY: `resolver` has the resolver's signature and leaves `pfn` (the driver's
            // answer) as it is; the name is NUL-terminated.
            let rc = unsafe {
                route::get_proc_address(
                    resolver as *mut c_void,
                    c.as_ptr() as *mut c_void,
                    (&raw mut pfn).cast(),
                    version,
                    flags,
                )
            };
            assert_eq!(rc, 0);
            let w = VARIANTS
                .iter()
                .enumerate()
                .find(|(_, e)| e.wrapper.0 as usize == pfn)
                .unwrap_or_else(|| panic!("{c:?}: the driver's pointer was not replaced"));
            assert_eq!(
                hot::real_function(w.0).map(|p| p as usize),
                Some(real as usize),
                "{c:?}: a wrapper of another function"
            );
        }
        for delta in [0u64, 1, 8, u64::MAX] {
            let addr = (real as u64).wrapping_add(delta);
            props::shim_names(&input(12000, 2, addr, sym));
            props::shim_names(&input(11000, 0, addr, b"cuNotAFunction"));
            props::shim_names(&input(0, 0, addr, b""));
        }
    }
    assert!(
        exported > 10,
        "the mock exports only {exported} catalogued symbols"
    );
}
