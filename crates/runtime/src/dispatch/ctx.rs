//! The ctx buffer a program receives in `r1`, laid out as the attach catalog says.

use gpubpf_verifier::ctx::CtxLayout;

use crate::attach::abi::{FLAG_OUT_VALID, HEADER_SIZE};
use crate::attach::{AttachPoint, Phase};

use super::DispatchError;

/// A ctx for one call of one attach point. Backed by 8-byte words so every slot is aligned.
#[derive(Debug, Clone)]
pub struct CtxBuf {
    point: &'static AttachPoint,
    phase: Phase,
    words: Vec<u64>,
}

impl CtxBuf {
    /// A zeroed ctx with `hdr.api_id`, `hdr.phase`, `hdr.pid` and `hdr.tid` filled in.
    pub fn new(point: &'static AttachPoint, phase: Phase) -> Self {
        let size = point.ctx_size.max(HEADER_SIZE) as usize;
        let mut c = Self {
            point,
            phase,
            words: vec![0; size.div_ceil(8)],
        };
        c.put(0, 4, u64::from(point.id));
        c.set_phase(phase);
        c.put(16, 4, u64::from(std::process::id()));
        // SAFETY: `gettid` has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        c.put(20, 4, u64::from(tid.unsigned_abs()));
        c
    }

    /// The attach point.
    pub fn point(&self) -> &'static AttachPoint {
        self.point
    }

    /// The phase the ctx is in.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Switches to `phase` (the layout is the same for entry and exit).
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.put(4, 4, u64::from(phase.ctx_value()));
    }

    /// The layout the verifier checked programs of this phase against.
    pub fn layout(&self) -> CtxLayout {
        self.point.ctx_layout(self.phase)
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.point.ctx_size as usize
    }

    /// Pointer to the first byte, for `r1`.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `words` is a live, initialised allocation of `len * 8` bytes; u8 has no
        // alignment or validity requirements, and the borrow of `self` keeps it exclusive.
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.words.len() * 8)
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`, shared.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }

    fn put(&mut self, offset: usize, size: usize, value: u64) {
        let b = value.to_le_bytes();
        if let Some(dst) = self.bytes_mut().get_mut(offset..offset + size) {
            dst.copy_from_slice(&b[..size]);
        }
    }

    fn take(&self, offset: usize, size: usize) -> u64 {
        let mut b = [0u8; 8];
        if let Some(src) = self.bytes().get(offset..offset + size) {
            b[..size].copy_from_slice(src);
        }
        u64::from_le_bytes(b)
    }

    fn field(&self, name: &str) -> Result<(usize, usize), DispatchError> {
        let f = self
            .point
            .field(name)
            .ok_or_else(|| DispatchError::NoSuchField {
                point: self.point.name,
                field: name.to_string(),
            })?;
        Ok((f.offset as usize, f.size.min(8) as usize))
    }

    /// Writes field `name` (`args.bytesize`, `out.dptr`, `hdr.device`, …), truncated to its size.
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), DispatchError> {
        let (off, size) = self.field(name)?;
        self.put(off, size, value);
        Ok(())
    }

    /// Reads field `name`, zero-extended.
    pub fn get(&self, name: &str) -> Result<u64, DispatchError> {
        let (off, size) = self.field(name)?;
        Ok(self.take(off, size))
    }

    /// `hdr.result`.
    pub fn result(&self) -> u32 {
        // Four bytes at offset 24: always fits in u32.
        u32::try_from(self.take(24, 4)).unwrap_or(u32::MAX)
    }

    /// Sets `hdr.result` and, when it is `CUDA_SUCCESS`, the out-valid flag.
    pub fn set_result(&mut self, result: u32) {
        self.put(24, 4, u64::from(result));
        let flags = self.take(12, 4);
        let flags = if result == 0 {
            flags | u64::from(FLAG_OUT_VALID)
        } else {
            flags & !u64::from(FLAG_OUT_VALID)
        };
        self.put(12, 4, flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach;

    #[test]
    fn fields_round_trip_at_catalog_offsets() {
        let p = attach::resolve("cuMemAlloc").expect("catalog has cuMemAlloc");
        let mut c = CtxBuf::new(p, Phase::Entry);
        c.set("args.bytesize", 1 << 30).expect("field exists");
        assert_eq!(c.get("args.bytesize").expect("field exists"), 1 << 30);
        assert_eq!(c.get("hdr.api_id").expect("header"), u64::from(p.id));
        assert_eq!(c.get("hdr.phase").expect("header"), 0);
        c.set_phase(Phase::Exit);
        c.set_result(0);
        assert_eq!(c.get("hdr.phase").expect("header"), 1);
        assert_ne!(
            c.get("hdr.flags").expect("header") & u64::from(FLAG_OUT_VALID),
            0
        );
        c.set_result(2);
        assert_eq!(c.result(), 2);
        assert_eq!(
            c.get("hdr.flags").expect("header") & u64::from(FLAG_OUT_VALID),
            0
        );
        assert!(matches!(
            c.set("args.nope", 1),
            Err(DispatchError::NoSuchField { .. })
        ));
        assert_eq!(c.size(), p.ctx_size as usize);
    }
}
