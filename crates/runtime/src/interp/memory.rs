//! Caller-allowed memory regions and checked loads, stores and atomics.
//!
//! In checked mode every access `[addr, addr + size)` must lie inside one region whose
//! permission allows it; anything else is an [`ExecError`], never a wild access. The stack
//! frames of the execution are always a read-write region named `stack`.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use gpubpf_isa::{AtomicOp, Size};

use super::error::{AccessKind, ExecError};

/// What a program may do with a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perm {
    ReadOnly,
    WriteOnly,
    ReadWrite,
}

impl Perm {
    fn allows(self, access: AccessKind) -> bool {
        matches!(
            (self, access),
            (Perm::ReadWrite, _)
                | (Perm::ReadOnly, AccessKind::Read)
                | (Perm::WriteOnly, AccessKind::Write)
        )
    }
}

/// One allowed region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Name used in errors (`stack`, `ctx`, `map value`, …).
    pub name: &'static str,
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Allowed accesses.
    pub perm: Perm,
}

impl Region {
    fn contains(&self, addr: u64, size: u64) -> bool {
        addr >= self.start
            && addr
                .checked_add(size)
                .is_some_and(|end| end <= self.start.saturating_add(self.len))
    }
}

/// The set of regions a program may access besides its stack, borrowed for `'a`.
#[derive(Debug, Default)]
pub struct Memory<'a> {
    regions: Vec<Region>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> Memory<'a> {
    /// No regions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows reads and writes of `data`; returns its address (what `r1` would carry).
    pub fn add_mut(&mut self, name: &'static str, data: &'a mut [u8]) -> u64 {
        let start = data.as_mut_ptr() as u64;
        self.push(name, start, data.len(), Perm::ReadWrite)
    }

    /// Allows reads of `data`; returns its address.
    pub fn add_ref(&mut self, name: &'static str, data: &'a [u8]) -> u64 {
        let start = data.as_ptr() as u64;
        self.push(name, start, data.len(), Perm::ReadOnly)
    }

    /// Allows accesses to `len` bytes at `start`.
    ///
    /// # Safety
    /// `[start, start + len)` must be valid memory for the accesses `perm` allows, for as
    /// long as this `Memory` is used, and must not be accessed through Rust references
    /// while a program runs (map values owned by the runtime, for example).
    pub unsafe fn add_raw(&mut self, name: &'static str, start: u64, len: usize, perm: Perm) {
        self.push(name, start, len, perm);
    }

    fn push(&mut self, name: &'static str, start: u64, len: usize, perm: Perm) -> u64 {
        self.regions.push(Region {
            name,
            start,
            len: len as u64,
            perm,
        });
        start
    }

    /// The registered regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }
}

/// Memory as one execution sees it: the stack plus the caller's regions.
pub(crate) struct Checker<'m> {
    pub stack: Region,
    pub regions: &'m [Region],
    pub checked: bool,
}

impl Checker<'_> {
    /// Checks an access; returns the address on success.
    pub fn check(
        &self,
        pc: usize,
        addr: u64,
        size: u32,
        access: AccessKind,
    ) -> Result<u64, ExecError> {
        if !self.checked {
            return Ok(addr);
        }
        let len = u64::from(size);
        let region = if self.stack.contains(addr, len) {
            Some(&self.stack)
        } else {
            self.regions.iter().find(|r| r.contains(addr, len))
        };
        match region {
            None => Err(ExecError::OutOfBounds {
                pc,
                addr,
                size,
                access,
            }),
            Some(r) if !r.perm.allows(access) => Err(ExecError::PermissionDenied {
                pc,
                addr,
                size,
                access,
                region: r.name,
            }),
            Some(_) => Ok(addr),
        }
    }

    /// Loads `size` bytes at `addr` (zero-extended).
    pub fn load(&self, pc: usize, addr: u64, size: Size) -> Result<u64, ExecError> {
        let a = self.check(pc, addr, size.bytes(), AccessKind::Read)?;
        // SAFETY: in checked mode `check` proved `[a, a + size)` lies in a readable region
        // that the caller guaranteed valid (`Memory` borrows it, or `add_raw`'s contract);
        // in unchecked mode the caller of `execute_unchecked` guaranteed the program only
        // accesses valid memory. Unaligned reads are allowed by `read_unaligned`.
        let v = unsafe {
            match size {
                Size::B => u64::from(std::ptr::read_unaligned(a as *const u8)),
                Size::H => u64::from(std::ptr::read_unaligned(a as *const u16)),
                Size::W => u64::from(std::ptr::read_unaligned(a as *const u32)),
                Size::DW => std::ptr::read_unaligned(a as *const u64),
            }
        };
        Ok(v)
    }

    /// Stores the low `size` bytes of `v` at `addr`.
    pub fn store(&self, pc: usize, addr: u64, size: Size, v: u64) -> Result<(), ExecError> {
        let a = self.check(pc, addr, size.bytes(), AccessKind::Write)?;
        // SAFETY: as in `load`, for a writable region.
        unsafe {
            match size {
                Size::B => std::ptr::write_unaligned(a as *mut u8, v as u8),
                Size::H => std::ptr::write_unaligned(a as *mut u16, v as u16),
                Size::W => std::ptr::write_unaligned(a as *mut u32, v as u32),
                Size::DW => std::ptr::write_unaligned(a as *mut u64, v),
            }
        }
        Ok(())
    }

    /// Performs an atomic operation of `size` (W or DW) at `addr` with operand `src`;
    /// `expected` is `r0` for `cmpxchg`. Returns the old value (zero-extended).
    pub fn atomic(
        &self,
        pc: usize,
        addr: u64,
        size: Size,
        op: AtomicOp,
        src: u64,
        expected: u64,
    ) -> Result<u64, ExecError> {
        let bytes = size.bytes();
        let a = self.check(pc, addr, bytes, AccessKind::ReadWrite)?;
        if a.checked_rem(u64::from(bytes)) != Some(0) {
            return Err(ExecError::MisalignedAtomic {
                pc,
                addr,
                size: bytes,
            });
        }
        let ord = Ordering::SeqCst;
        if size == Size::DW {
            // SAFETY: `a` is in a read-write region (checked mode) or guaranteed valid by
            // the caller (unchecked mode), 8-byte aligned (checked above), and all
            // concurrent accesses of this memory by programs are atomic or by helpers.
            let cell = unsafe { AtomicU64::from_ptr(a as *mut u64) };
            Ok(match op {
                AtomicOp::Add => cell.fetch_add(src, ord),
                AtomicOp::Or => cell.fetch_or(src, ord),
                AtomicOp::And => cell.fetch_and(src, ord),
                AtomicOp::Xor => cell.fetch_xor(src, ord),
                AtomicOp::Xchg => cell.swap(src, ord),
                AtomicOp::CmpXchg => match cell.compare_exchange(expected, src, ord, ord) {
                    Ok(v) | Err(v) => v,
                },
            })
        } else {
            // SAFETY: as above, 4-byte aligned.
            let cell = unsafe { AtomicU32::from_ptr(a as *mut u32) };
            let s = src as u32;
            let old = match op {
                AtomicOp::Add => cell.fetch_add(s, ord),
                AtomicOp::Or => cell.fetch_or(s, ord),
                AtomicOp::And => cell.fetch_and(s, ord),
                AtomicOp::Xor => cell.fetch_xor(s, ord),
                AtomicOp::Xchg => cell.swap(s, ord),
                AtomicOp::CmpXchg => match cell.compare_exchange(expected as u32, s, ord, ord) {
                    Ok(v) | Err(v) => v,
                },
            };
            Ok(u64::from(old))
        }
    }
}
