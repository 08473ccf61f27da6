//! Fault-safe reads of application memory.

use super::neg_errno;

/// Copies `dst.len()` bytes from application address `src` with `process_vm_readv` on our
/// own process: an unmapped or unreadable address fails instead of faulting.
pub fn read_user(dst: &mut [u8], src: u64) -> Result<(), i32> {
    if dst.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes our own writable buffer; the kernel validates `remote`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == dst.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// Copies a NUL-terminated string from `src` into `dst` (at most `dst.len()` bytes,
/// always NUL-terminated); returns its length including the NUL. Reads page by page, so a
/// string that ends right before an unmapped page is still read.
pub fn read_user_str(dst: &mut [u8], src: u64) -> Result<usize, i32> {
    if dst.is_empty() {
        return Ok(0);
    }
    let page = crate::maps::mapping::page_size() as u64;
    let mut done = 0usize;
    while done < dst.len() {
        let addr = src.checked_add(done as u64).ok_or(libc::EFAULT)?;
        let to_page_end = (page - addr % page) as usize;
        let n = to_page_end.min(dst.len() - done);
        read_user(&mut dst[done..done + n], addr)?;
        if let Some(z) = dst[done..done + n].iter().position(|b| *b == 0) {
            return Ok(done + z + 1);
        }
        done += n;
    }
    let last = dst.len() - 1;
    dst[last] = 0;
    Ok(dst.len())
}

/// `long bpf_probe_read_user(void *dst, u32 size, const void *unsafe_ptr)`.
pub extern "C" fn probe_read_user(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    // SAFETY: the verifier proved `dst` writable for `size` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size as usize) };
    match read_user(out, src) {
        Ok(()) => 0,
        Err(e) => {
            out.fill(0);
            neg_errno(e)
        }
    }
}

/// `long bpf_probe_read_user_str(void *dst, u32 size, const void *unsafe_ptr)`.
pub extern "C" fn probe_read_user_str(dst: u64, size: u64, src: u64, _: u64, _: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    // SAFETY: the verifier proved `dst` writable for `size` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size as usize) };
    match read_user_str(out, src) {
        Ok(n) => n as u64,
        Err(e) => {
            out.fill(0);
            neg_errno(e)
        }
    }
}
