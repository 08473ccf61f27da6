//! `gpubpf_get_caller`: where the application called the hooked driver function from.
//!
//! A program cannot walk the application's stack (it runs below the shim's wrapper, in
//! JIT-compiled code without unwind information). The shim walks it instead, before the
//! programs of a chain that calls this helper run ([`set_caller`], per thread), and the
//! helper describes that address as `module+0xoffset`: the file name of the module that
//! made the call and the offset in it of the call instruction's last byte (the return
//! address minus one, as `addr2line -e MODULE OFFSET` wants it), which stays meaningful
//! after the process has exited, whatever address the module was loaded at.

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::fmt::Write as _;

use super::neg_errno;
use super::text::Text;

thread_local! {
    /// The return address of the application's call being policed on this thread; 0 when
    /// unknown.
    static CALLER: Cell<u64> = const { Cell::new(0) };
}

/// Sets this thread's caller address for the programs about to run (0: unknown).
pub fn set_caller(return_address: u64) {
    let _ = CALLER.try_with(|c| c.set(return_address));
}

/// This thread's caller address (0: unknown).
pub fn caller() -> u64 {
    CALLER.try_with(Cell::get).unwrap_or(0)
}

/// `module+0xoffset` of the call whose return address is `return_address`, when a loaded
/// module contains it.
pub fn describe(return_address: u64) -> Option<String> {
    let mut text = Text::<SITE_LEN>::new();
    describe_into(return_address, &mut text)?;
    Some(text.as_str().to_owned())
}

/// Longest `module+0xoffset` kept (a module's file name is at most 255 bytes).
const SITE_LEN: usize = 320;

/// [`describe`] into `out`, without allocating (the helper runs on the policed call).
fn describe_into<const N: usize>(return_address: u64, out: &mut Text<N>) -> Option<()> {
    let at = return_address.checked_sub(1)?;
    // SAFETY: `Dl_info` is plain data; all-zero is a valid value for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the dynamic loader's tables to describe the address; it
    // does not dereference it. `info` is valid for writing.
    if unsafe { libc::dladdr(at as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr succeeded: `dli_fname` is the loader's NUL-terminated path of the
    // module, valid while the module stays loaded (through this call).
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let name = path
        .rsplit(|b| *b == b'/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(b"?");
    let offset = at.checked_sub(info.dli_fbase as u64)?;
    out.push_lossy(name);
    // Writing into a `Text` cannot fail.
    let _ = write!(out, "+{offset:#x}");
    Some(())
}

/// This thread's caller into `out` (NUL-terminated, truncated, zero-padded): its length
/// including the NUL, or `ENOENT` when unknown. `out` is all zeros on error.
pub fn caller_site(out: &mut [u8]) -> Result<usize, i32> {
    out.fill(0);
    if out.is_empty() {
        return Err(libc::EINVAL);
    }
    let mut text = Text::<SITE_LEN>::new();
    describe_into(caller(), &mut text).ok_or(libc::ENOENT)?;
    let n = text.len().min(out.len() - 1);
    out[..n].copy_from_slice(&text.as_str().as_bytes()[..n]);
    Ok(n + 1)
}

/// `long gpubpf_get_caller(char *buf, u32 size)`.
pub extern "C" fn get_caller(buf: u64, size: u64, _: u64, _: u64, _: u64) -> u64 {
    if buf == 0 || size == 0 {
        return neg_errno(libc::EINVAL);
    }
    // SAFETY: the verifier proved `buf` writable for `size` bytes (WritableMem + ConstSize).
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size as usize) };
    match caller_site(out) {
        Ok(n) => n as u64,
        Err(e) => neg_errno(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_callers_are_enoent_with_a_zeroed_buffer() {
        set_caller(0);
        let mut buf = [7u8; 16];
        assert_eq!(caller_site(&mut buf), Err(libc::ENOENT));
        assert_eq!(buf, [0; 16]);
    }

    #[test]
    fn a_known_caller_is_its_module_and_offset() {
        // An address inside this test binary: a function of it, plus one (a return address).
        let f = a_known_caller_is_its_module_and_offset as *const () as usize as u64;
        set_caller(f + 1);
        let mut buf = [0u8; 128];
        let n = caller_site(&mut buf).expect("described");
        let text = std::str::from_utf8(&buf[..n - 1]).expect("utf-8");
        let exe = std::env::current_exe().expect("exe");
        let name = exe.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(text.starts_with(&format!("{name}+0x")), "{text}");
        // Truncated to the buffer, NUL-terminated.
        let mut small = [9u8; 5];
        assert_eq!(caller_site(&mut small), Ok(5));
        assert_eq!(
            &small,
            &[
                name.as_bytes()[0],
                name.as_bytes()[1],
                name.as_bytes()[2],
                name.as_bytes()[3],
                0
            ]
        );
        set_caller(0);
    }
}
