//! Abstract scalar values: signed/unsigned 64- and 32-bit ranges plus known bits.
//!
//! The representation and the bounds-synchronisation rules follow the Linux verifier
//! (`reg_bounds_sync`). Every arithmetic step on bounds is checked: an overflow in range
//! arithmetic is a soundness bug, so operations that might wrap give up precision instead.

#![deny(clippy::arithmetic_side_effects)]

use crate::tnum::Tnum;

const MASK32: u64 = 0xffff_ffff;

/// The abstract value of a scalar (or of a pointer's variable offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scalar {
    pub smin: i64,
    pub smax: i64,
    pub umin: u64,
    pub umax: u64,
    pub s32min: i32,
    pub s32max: i32,
    pub u32min: u32,
    pub u32max: u32,
    pub var: Tnum,
}

impl Scalar {
    /// Any 64-bit value.
    pub const UNKNOWN: Scalar = Scalar {
        smin: i64::MIN,
        smax: i64::MAX,
        umin: 0,
        umax: u64::MAX,
        s32min: i32::MIN,
        s32max: i32::MAX,
        u32min: 0,
        u32max: u32::MAX,
        var: Tnum::UNKNOWN,
    };

    /// Exactly `v`.
    pub const fn konst(v: u64) -> Scalar {
        Scalar {
            smin: v as i64,
            smax: v as i64,
            umin: v,
            umax: v,
            s32min: v as u32 as i32,
            s32max: v as u32 as i32,
            u32min: v as u32,
            u32max: v as u32,
            var: Tnum::konst(v),
        }
    }

    /// Any value in `min..=max` (unsigned). `None` when `min > max`.
    pub fn urange(min: u64, max: u64) -> Option<Scalar> {
        let mut s = Scalar::UNKNOWN;
        s.umin = min;
        s.umax = max;
        s.sync()
    }

    /// Any value in `min..=max` (signed). `None` when `min > max`.
    pub fn srange(min: i64, max: i64) -> Option<Scalar> {
        let mut s = Scalar::UNKNOWN;
        s.smin = min;
        s.smax = max;
        s.sync()
    }

    /// Any value that fits in `bytes` bytes, zero-extended.
    pub fn unknown_bytes(bytes: u32) -> Scalar {
        if bytes >= 8 {
            return Scalar::UNKNOWN;
        }
        let max = 1u64.wrapping_shl(bytes.saturating_mul(8)).wrapping_sub(1);
        Scalar::urange(0, max).unwrap_or(Scalar::UNKNOWN)
    }

    /// Whether the value is a known constant.
    pub fn is_const(&self) -> bool {
        self.var.is_const()
    }

    /// The constant, when known.
    pub fn const_value(&self) -> Option<u64> {
        self.var.is_const().then_some(self.var.value)
    }

    /// Whether the low 32 bits are a known constant.
    pub fn is_const32(&self) -> bool {
        self.var.subreg().is_const()
    }

    /// Whether the value is known to be `v`.
    pub fn equals(&self, v: u64) -> bool {
        self.var.equals_const(v)
    }

    /// Makes all representations agree (kernel `reg_bounds_sync`). `None` when the bounds
    /// contradict each other: no concrete value satisfies them (an infeasible path).
    pub fn sync(mut self) -> Option<Scalar> {
        for _ in 0..2 {
            self.update_bounds_from_tnum();
            self.deduce32();
            self.deduce64();
            self.deduce_mixed();
            self.bound_offset()?;
            self.update_bounds_from_tnum();
        }
        self.consistent().then_some(self)
    }

    fn consistent(&self) -> bool {
        self.smin <= self.smax
            && self.umin <= self.umax
            && self.s32min <= self.s32max
            && self.u32min <= self.u32max
            && self.var.value & self.var.mask == 0
            && Tnum::range(self.umin, self.umax)
                .intersect(self.var)
                .is_some()
    }

    fn update_bounds_from_tnum(&mut self) {
        let v = self.var;
        let v32 = v.subreg();
        self.s32min = self
            .s32min
            .max((v32.value | (v32.mask & 0x8000_0000)) as u32 as i32);
        self.s32max = self
            .s32max
            .min((v32.value | (v32.mask & 0x7fff_ffff)) as u32 as i32);
        self.u32min = self.u32min.max(v32.value as u32);
        self.u32max = self.u32max.min((v32.value | v32.mask) as u32);
        self.smin = self.smin.max((v.value | (v.mask & (1u64 << 63))) as i64);
        self.smax = self
            .smax
            .min((v.value | (v.mask & (i64::MAX as u64))) as i64);
        self.umin = self.umin.max(v.value);
        self.umax = self.umax.min(v.value | v.mask);
    }

    fn deduce32(&mut self) {
        if self.s32min >= 0 || self.s32max < 0 {
            let lo = (self.s32min as u32).max(self.u32min);
            let hi = (self.s32max as u32).min(self.u32max);
            self.s32min = lo as i32;
            self.u32min = lo;
            self.s32max = hi as i32;
            self.u32max = hi;
            return;
        }
        if self.u32max as i32 >= 0 {
            self.s32min = self.u32min as i32;
            let hi = (self.s32max as u32).min(self.u32max);
            self.s32max = hi as i32;
            self.u32max = hi;
        } else if (self.u32min as i32) < 0 {
            let lo = (self.s32min as u32).max(self.u32min);
            self.s32min = lo as i32;
            self.u32min = lo;
            self.s32max = self.u32max as i32;
        }
    }

    fn deduce64(&mut self) {
        if self.smin >= 0 || self.smax < 0 {
            let lo = (self.smin as u64).max(self.umin);
            let hi = (self.smax as u64).min(self.umax);
            self.smin = lo as i64;
            self.umin = lo;
            self.smax = hi as i64;
            self.umax = hi;
            return;
        }
        if self.umax as i64 >= 0 {
            self.smin = self.umin as i64;
            let hi = (self.smax as u64).min(self.umax);
            self.smax = hi as i64;
            self.umax = hi;
        } else if (self.umin as i64) < 0 {
            let lo = (self.smin as u64).max(self.umin);
            self.smin = lo as i64;
            self.umin = lo;
            self.smax = self.umax as i64;
        }
    }

    /// Exchanges knowledge between the 64-bit and 32-bit ranges when the upper 32 bits of
    /// every possible value are equal.
    fn deduce_mixed(&mut self) {
        if self.umin >> 32 == self.umax >> 32 {
            // 64 -> 32.
            let lo = self.umin as u32;
            let hi = self.umax as u32;
            self.u32min = self.u32min.max(lo);
            self.u32max = self.u32max.min(hi);
            if lo as i32 <= hi as i32 {
                self.s32min = self.s32min.max(lo as i32);
                self.s32max = self.s32max.min(hi as i32);
            }
            // 32 -> 64.
            let base = self.umin & !MASK32;
            if self.u32min <= self.u32max {
                self.umin = self.umin.max(base | u64::from(self.u32min));
                self.umax = self.umax.min(base | u64::from(self.u32max));
            }
        }
        if self.smin >> 32 == self.smax >> 32 {
            let lo = self.smin as u64 as u32;
            let hi = self.smax as u64 as u32;
            self.u32min = self.u32min.max(lo);
            self.u32max = self.u32max.min(hi);
            if lo as i32 <= hi as i32 {
                self.s32min = self.s32min.max(lo as i32);
                self.s32max = self.s32max.min(hi as i32);
            }
            let base = (self.smin as u64) & !MASK32;
            if self.u32min <= self.u32max {
                self.smin = self.smin.max((base | u64::from(self.u32min)) as i64);
                self.smax = self.smax.min((base | u64::from(self.u32max)) as i64);
            }
        }
        // A 32-bit signed range that does not cross zero pins the sign of the subregister,
        // which tnum captures in `bound_offset`.
    }

    fn bound_offset(&mut self) -> Option<()> {
        if self.umin > self.umax || self.u32min > self.u32max {
            return None;
        }
        let v64 = self.var.intersect(Tnum::range(self.umin, self.umax))?;
        let v32 = self
            .var
            .subreg()
            .intersect(Tnum::range(u64::from(self.u32min), u64::from(self.u32max)))?;
        self.var = v64.with_subreg(v32);
        // Both intersections must agree on the low bits.
        v64.subreg().intersect(v32)?;
        Some(())
    }

    /// The low 32 bits, zero-extended (what a 32-bit ALU result or a 4-byte load holds).
    pub fn zext32(&self) -> Scalar {
        let mut s = Scalar::UNKNOWN;
        s.var = self.var.subreg();
        s.umin = u64::from(self.u32min);
        s.umax = u64::from(self.u32max);
        s.u32min = self.u32min;
        s.u32max = self.u32max;
        s.s32min = self.s32min;
        s.s32max = self.s32max;
        s.sync().unwrap_or_else(|| Scalar::unknown_bytes(4))
    }

    /// The low `bytes` bytes, zero-extended.
    pub fn truncate(&self, bytes: u32) -> Scalar {
        match bytes {
            8.. => *self,
            4 => self.zext32(),
            _ => {
                let max = 1u64.wrapping_shl(bytes.saturating_mul(8)).wrapping_sub(1);
                if self.umax <= max {
                    *self
                } else {
                    let mut s = Scalar::unknown_bytes(bytes);
                    s.var = self.var.cast(bytes);
                    s.sync().unwrap_or_else(|| Scalar::unknown_bytes(bytes))
                }
            }
        }
    }

    /// Sign-extends the low `bits` (8, 16, 32) to 64 bits.
    pub fn sext(&self, bits: u32) -> Scalar {
        let half = 1i64.wrapping_shl(bits.saturating_sub(1));
        let lo_ok = self.smin >= 0 && self.smax < half;
        if lo_ok {
            return *self;
        }
        if let Some(v) = self.const_value() {
            let shift = 64u32.saturating_sub(bits);
            return Scalar::konst(((v.wrapping_shl(shift) as i64).wrapping_shr(shift)) as u64);
        }
        Scalar::srange(half.wrapping_neg(), half.wrapping_sub(1)).unwrap_or(Scalar::UNKNOWN)
    }

    /// Whether every value of `other` is a value of `self` (ranges and known bits).
    pub fn contains(&self, other: &Scalar) -> bool {
        self.smin <= other.smin
            && self.smax >= other.smax
            && self.umin <= other.umin
            && self.umax >= other.umax
            && self.s32min <= other.s32min
            && self.s32max >= other.s32max
            && self.u32min <= other.u32min
            && self.u32max >= other.u32max
            && self.var.contains(other.var)
    }

    /// Intersection of two abstract values (both describe the same concrete value).
    pub fn meet(&self, o: &Scalar) -> Option<Scalar> {
        Scalar {
            smin: self.smin.max(o.smin),
            smax: self.smax.min(o.smax),
            umin: self.umin.max(o.umin),
            umax: self.umax.min(o.umax),
            s32min: self.s32min.max(o.s32min),
            s32max: self.s32max.min(o.s32max),
            u32min: self.u32min.max(o.u32min),
            u32max: self.u32max.min(o.u32max),
            var: self.var.intersect(o.var)?,
        }
        .sync()
    }
}

impl std::fmt::Display for Scalar {
    /// Kernel-like rendering: `5`, or `scalar(umin=0,umax=255,var_off=(0x0; 0xff))`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(v) = self.const_value() {
            return write!(f, "{}", v as i64);
        }
        let mut parts = Vec::new();
        if self.smin != i64::MIN {
            parts.push(format!("smin={}", self.smin));
        }
        if self.smax != i64::MAX {
            parts.push(format!("smax={}", self.smax));
        }
        if self.umin != 0 && self.umin as i64 != self.smin {
            parts.push(format!("umin={}", self.umin));
        }
        if self.umax != u64::MAX && self.umax as i64 != self.smax {
            parts.push(format!("umax={}", self.umax));
        }
        let s32_default = self.s32min == i32::MIN && self.s32max == i32::MAX;
        let derived32 = self.umax <= MASK32;
        if !s32_default && !derived32 {
            parts.push(format!("s32=[{},{}]", self.s32min, self.s32max));
        }
        if !(derived32 || self.u32min == 0 && self.u32max == u32::MAX) {
            parts.push(format!("u32=[{},{}]", self.u32min, self.u32max));
        }
        if self.var.mask != u64::MAX
            && !(self.var.value == 0
                && self.var.mask.count_zeros() == self.var.mask.leading_zeros()
                && !parts.is_empty())
        {
            parts.push(format!("var_off={}", self.var));
        }
        write!(f, "scalar({})", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_derives_signed_from_unsigned_and_detects_contradiction() {
        let s = Scalar::urange(3, 10).unwrap();
        assert_eq!((s.smin, s.smax), (3, 10));
        assert_eq!((s.u32min, s.u32max), (3, 10));
        assert_eq!(s.var, Tnum { value: 0, mask: 15 });
        let mut bad = Scalar::konst(4);
        bad.umin = 5;
        assert!(bad.sync().is_none());
    }

    #[test]
    fn zext_and_sext() {
        let s = Scalar::srange(-1, -1).unwrap();
        assert_eq!(s.zext32(), Scalar::konst(0xffff_ffff));
        assert_eq!(Scalar::konst(0xff).sext(8), Scalar::konst(u64::MAX));
        let b = Scalar::unknown_bytes(1).sext(8);
        assert_eq!((b.smin, b.smax), (-128, 127));
    }

    #[test]
    fn mixed_32_to_64() {
        let mut s = Scalar::unknown_bytes(4);
        s.u32max = 9;
        let s = s.sync().unwrap();
        assert_eq!((s.umin, s.umax), (0, 9));
    }
}
