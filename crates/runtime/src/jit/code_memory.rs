//! W^X code memory: machine code is written into a private anonymous mapping that is
//! readable and writable, relocations are applied, and the mapping is then switched to
//! read + execute in one `mprotect`. The two states are two types ([`WritableCode`] and
//! [`ExecutableCode`]), so no code path can hold a mapping that is writable and executable
//! at once. [`ExecutableCode`] unmaps its pages on drop.
//!
//! `cranelift-jit`'s `JITModule` is not used: it does keep W^X (its system memory provider
//! maps pages RW and flips them to RX on finalize), but it `expect()`s on failures (a panic
//! inside the host process), leaks code memory unless `free_memory` is called on the whole
//! module, resolves unknown symbols through `dlsym`, and its module is not `Sync`. Owning
//! finalisation here costs ~150 lines and gives per-program ownership.

use std::ptr::NonNull;

use cranelift_codegen::binemit::Reloc;

use super::JitError;

/// A relocation to patch in the code image, targets already resolved to image offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageReloc {
    /// Offset of the patched bytes in the image.
    pub at: usize,
    /// Relocation kind.
    pub kind: Reloc,
    /// Offset of the target in the image.
    pub target: usize,
    /// Addend.
    pub addend: i64,
}

fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

/// A fresh read-write mapping that the code image is copied into.
#[derive(Debug)]
pub(crate) struct WritableCode {
    ptr: NonNull<u8>,
    len: usize,
}

impl WritableCode {
    /// Maps at least `size` bytes (rounded up to pages) readable and writable.
    pub fn new(size: usize) -> Result<Self, JitError> {
        let page = page_size();
        let len = size
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or(JitError::CodeTooLarge { bytes: size })?;
        // SAFETY: an anonymous private mapping with a null hint touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(JitError::Memory {
                op: "mmap",
                source: std::io::Error::last_os_error(),
            });
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(JitError::Memory {
            op: "mmap",
            source: std::io::Error::other("null mapping"),
        })?;
        Ok(Self { ptr, len })
    }

    /// The writable bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live RW mapping of `len` bytes owned exclusively by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Patches `relocs` into the image. Targets are image offsets; the absolute address of
    /// offset `o` is `base + o`, `base` being this mapping's address (it does not move when
    /// its protection changes).
    pub fn apply_relocs(&mut self, relocs: &[ImageReloc]) -> Result<(), JitError> {
        let base = self.ptr.as_ptr() as u64;
        let len = self.len;
        let bytes = self.bytes_mut();
        for r in relocs {
            let bad = || JitError::Relocation {
                kind: format!("{:?}", r.kind),
                offset: r.at,
            };
            if r.target >= len {
                return Err(bad());
            }
            let target = base
                .wrapping_add(r.target as u64)
                .wrapping_add(r.addend as u64);
            let at_addr = base.wrapping_add(r.at as u64);
            match r.kind {
                Reloc::Abs8 => {
                    let dst = bytes.get_mut(r.at..r.at + 8).ok_or_else(bad)?;
                    dst.copy_from_slice(&target.to_le_bytes());
                }
                Reloc::X86PCRel4 | Reloc::X86CallPCRel4 => {
                    let rel =
                        i32::try_from(target.wrapping_sub(at_addr) as i64).map_err(|_| bad())?;
                    let dst = bytes.get_mut(r.at..r.at + 4).ok_or_else(bad)?;
                    dst.copy_from_slice(&rel.to_le_bytes());
                }
                Reloc::Arm64Call => {
                    let diff = target.wrapping_sub(at_addr) as i64;
                    if diff % 4 != 0 || !(-(1i64 << 27)..(1i64 << 27)).contains(&diff) {
                        return Err(bad());
                    }
                    let dst = bytes.get_mut(r.at..r.at + 4).ok_or_else(bad)?;
                    let mut w = [0u8; 4];
                    w.copy_from_slice(dst);
                    let insn = u32::from_le_bytes(w);
                    let imm26 = ((diff >> 2) as u32) & 0x03ff_ffff;
                    dst.copy_from_slice(&((insn & 0xfc00_0000) | imm26).to_le_bytes());
                }
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    /// Switches the mapping to read + execute.
    pub fn into_executable(self) -> Result<ExecutableCode, JitError> {
        let (ptr, len) = (self.ptr, self.len);
        std::mem::forget(self);
        // From here on `code` owns the mapping and unmaps it on every path.
        let code = ExecutableCode { ptr, len };
        // SAFETY: `ptr..ptr+len` is the page-aligned mapping created in `new`, owned by `code`.
        let rc =
            unsafe { libc::mprotect(ptr.as_ptr().cast(), len, libc::PROT_READ | libc::PROT_EXEC) };
        if rc != 0 {
            return Err(JitError::Memory {
                op: "mprotect",
                source: std::io::Error::last_os_error(),
            });
        }
        flush_icache(ptr.as_ptr(), len);
        Ok(code)
    }
}

impl Drop for WritableCode {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `mmap` in `new` and is unmapped exactly once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(target_arch = "aarch64")]
fn flush_icache(ptr: *mut u8, len: usize) {
    extern "C" {
        fn __clear_cache(start: *mut libc::c_char, end: *mut libc::c_char);
    }
    // SAFETY: the range is our own mapping; `__clear_cache` only performs cache maintenance.
    unsafe { __clear_cache(ptr.cast(), ptr.add(len).cast()) };
}

#[cfg(not(target_arch = "aarch64"))]
fn flush_icache(_ptr: *mut u8, _len: usize) {
    // x86-64 keeps instruction and data caches coherent; the `mprotect` call serialises.
}

/// Read + execute code pages, unmapped on drop.
#[derive(Debug)]
pub(crate) struct ExecutableCode {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is immutable after `into_executable` (read + execute only) and owned
// by this value; sharing the address between threads is sound.
unsafe impl Send for ExecutableCode {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for ExecutableCode {}

impl ExecutableCode {
    /// Address of image offset `off`.
    pub fn addr(&self, off: usize) -> *const u8 {
        self.ptr.as_ptr().wrapping_add(off)
    }

    /// The code bytes (readable).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable for `len` bytes and never written after finalisation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ExecutableCode {
    fn drop(&mut self) {
        // SAFETY: the mapping came from `WritableCode::new` and is unmapped exactly once; no
        // code in it can be running because the owner (`CompiledProgram`) is being dropped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Reads the protection of the mapping containing `addr` from `/proc/self/maps` (tests).
#[cfg(test)]
pub(crate) fn protection_of(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let range = it.next()?;
        let perms = it.next()?;
        let (lo, hi) = range.split_once('-')?;
        let lo = usize::from_str_radix(lo, 16).ok()?;
        let hi = usize::from_str_radix(hi, 16).ok()?;
        (lo <= addr && addr < hi).then(|| perms.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_then_executable_never_both() {
        let mut w = WritableCode::new(10).unwrap();
        w.bytes_mut()[0] = 0xc3;
        let addr = w.bytes_mut().as_ptr() as usize;
        assert_eq!(protection_of(addr).as_deref(), Some("rw-p"));
        let x = w.into_executable().unwrap();
        assert_eq!(protection_of(addr).as_deref(), Some("r-xp"));
        assert_eq!(x.bytes()[0], 0xc3);
        drop(x);
        assert_ne!(protection_of(addr).as_deref(), Some("r-xp"));
    }

    #[test]
    fn relocations_are_bounds_checked() {
        let mut w = WritableCode::new(16).unwrap();
        let len = w.bytes_mut().len();
        let r = ImageReloc {
            at: len - 2,
            kind: Reloc::Abs8,
            target: 0,
            addend: 0,
        };
        assert!(matches!(
            w.apply_relocs(&[r]),
            Err(JitError::Relocation { .. })
        ));
        let r = ImageReloc {
            at: 0,
            kind: Reloc::Abs8,
            target: 8,
            addend: 0,
        };
        w.apply_relocs(&[r]).unwrap();
        let base = w.bytes_mut().as_ptr() as u64;
        assert_eq!(w.bytes_mut()[..8], (base + 8).to_le_bytes());
    }
}
