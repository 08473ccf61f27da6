//! Reading and writing a call's arguments: out-values behind the application's pointers
//! and the launch block of a `CUlaunchConfig` (the generated wrappers call these).

use std::ffi::c_void;

/// The value behind out-pointer `p` (`size` bytes, sign-extended when `signed`); 0 for NULL.
///
/// # Safety
/// `p` is NULL or valid for reading `size` bytes.
#[inline]
pub unsafe fn read_out(p: *mut c_void, size: u8, signed: bool) -> u64 {
    if p.is_null() {
        return 0;
    }
    // SAFETY: non-null and readable for `size` bytes (the caller's contract); unaligned
    // reads because the application's pointer may be.
    unsafe {
        match (size, signed) {
            (1, _) => u64::from(p.cast::<u8>().read_unaligned()),
            (2, _) => u64::from(p.cast::<u16>().read_unaligned()),
            (4, false) => u64::from(p.cast::<u32>().read_unaligned()),
            (4, true) => i64::from(p.cast::<i32>().read_unaligned()) as u64,
            _ => p.cast::<u64>().read_unaligned(),
        }
    }
}

/// Writes the low `size` bytes of `value` through out-pointer `p`; nothing for NULL.
///
/// # Safety
/// `p` is NULL or valid for writing `size` bytes.
#[inline]
pub unsafe fn write_out(p: *mut c_void, size: u8, value: u64) {
    if p.is_null() {
        return;
    }
    // SAFETY: non-null and writable for `size` bytes (the caller's contract).
    unsafe {
        match size {
            1 => p.cast::<u8>().write_unaligned(value as u8),
            2 => p.cast::<u16>().write_unaligned(value as u16),
            4 => p.cast::<u32>().write_unaligned(value as u32),
            _ => p.cast::<u64>().write_unaligned(value),
        }
    }
}

/// Fills `grid_x..=stream` of the launch block from a `CUlaunchConfig` (seven `unsigned
/// int`s, then `CUstream hStream` at offset 32); leaves them zero for NULL.
///
/// # Safety
/// `config` is NULL or points to a readable `CUlaunchConfig`.
pub unsafe fn launch_from_config(config: *mut c_void, launch: &mut [u64]) {
    if config.is_null() {
        return;
    }
    if let [gx, gy, gz, bx, by, bz, shmem, stream] = launch {
        let base = config.cast::<u32>();
        // SAFETY: a `CUlaunchConfig` starts with seven `unsigned int`s and has its stream
        // handle at byte offset 32 (the caller's contract makes it readable).
        unsafe {
            for (i, dst) in [gx, gy, gz, bx, by, bz, shmem].into_iter().enumerate() {
                *dst = u64::from(base.add(i).read_unaligned());
            }
            *stream = config.cast::<u8>().add(32).cast::<u64>().read_unaligned();
        }
    }
}
