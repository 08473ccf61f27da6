//! Arithmetic on abstract scalars ([`Scalar`]): one transfer function per ALU operation.
//!
//! Constant operands are evaluated exactly with the ISA's concrete semantics (division by zero
//! gives 0, modulo by zero keeps the dividend, shift amounts are masked, 32-bit results are
//! zero-extended). Otherwise each operation computes sound bounds and gives up precision
//! (returns a wider range) whenever a bound could wrap.

#![deny(clippy::arithmetic_side_effects)]

use gpubpf_isa::{AluOp, ByteSwap, Width};

use crate::scalar::Scalar;
use crate::tnum::Tnum;

/// Concrete evaluation of `dst op src` with the ISA's semantics.
pub fn eval(op: AluOp, width: Width, dst: u64, src: u64) -> u64 {
    match width {
        Width::W64 => eval64(op, dst, src),
        Width::W32 => u64::from(eval32(op, dst as u32, src as u32)),
    }
}

fn eval64(op: AluOp, a: u64, b: u64) -> u64 {
    match op {
        AluOp::Add => a.wrapping_add(b),
        AluOp::Sub => a.wrapping_sub(b),
        AluOp::Mul => a.wrapping_mul(b),
        AluOp::Div => a.checked_div(b).unwrap_or(0),
        AluOp::SDiv => {
            if b == 0 {
                0
            } else {
                (a as i64).checked_div(b as i64).unwrap_or(i64::MIN) as u64
            }
        }
        AluOp::Mod => a.checked_rem(b).unwrap_or(a),
        AluOp::SMod => {
            if b == 0 {
                a
            } else {
                (a as i64).checked_rem(b as i64).unwrap_or(0) as u64
            }
        }
        AluOp::Or => a | b,
        AluOp::And => a & b,
        AluOp::Xor => a ^ b,
        AluOp::Lsh => a.wrapping_shl((b & 63) as u32),
        AluOp::Rsh => a.wrapping_shr((b & 63) as u32),
        AluOp::Arsh => (a as i64).wrapping_shr((b & 63) as u32) as u64,
        AluOp::Mov => b,
    }
}

fn eval32(op: AluOp, a: u32, b: u32) -> u32 {
    match op {
        AluOp::Add => a.wrapping_add(b),
        AluOp::Sub => a.wrapping_sub(b),
        AluOp::Mul => a.wrapping_mul(b),
        AluOp::Div => a.checked_div(b).unwrap_or(0),
        AluOp::SDiv => {
            if b == 0 {
                0
            } else {
                (a as i32).checked_div(b as i32).unwrap_or(i32::MIN) as u32
            }
        }
        AluOp::Mod => a.checked_rem(b).unwrap_or(a),
        AluOp::SMod => {
            if b == 0 {
                a
            } else {
                (a as i32).checked_rem(b as i32).unwrap_or(0) as u32
            }
        }
        AluOp::Or => a | b,
        AluOp::And => a & b,
        AluOp::Xor => a ^ b,
        AluOp::Lsh => a.wrapping_shl(b & 31),
        AluOp::Rsh => a.wrapping_shr(b & 31),
        AluOp::Arsh => (a as i32).wrapping_shr(b & 31) as u32,
        AluOp::Mov => b,
    }
}

/// Abstract `dst op src`.
pub fn alu(op: AluOp, width: Width, dst: &Scalar, src: &Scalar) -> Scalar {
    if let (Some(a), Some(b)) = (dst.const_value(), src.const_value()) {
        return Scalar::konst(eval(op, width, a, b));
    }
    match width {
        Width::W64 => alu64(op, dst, src),
        Width::W32 => alu32(op, dst, src),
    }
}

fn alu32(op: AluOp, dst: &Scalar, src: &Scalar) -> Scalar {
    let a = dst.zext32();
    let b = src.zext32();
    let r = match op {
        AluOp::Mov => b,
        AluOp::Add | AluOp::Sub | AluOp::Mul | AluOp::Or | AluOp::And | AluOp::Xor => {
            alu64(op, &a, &b)
        }
        AluOp::Div | AluOp::Mod => alu64(op, &a, &b),
        AluOp::Lsh => match b.const_value() {
            Some(s) => shl(&a, (s & 31) as u32),
            None => Scalar::UNKNOWN,
        },
        AluOp::Rsh => match b.const_value() {
            Some(s) => shr(&a, (s & 31) as u32),
            None => a.truncate(4).bounded_by_max(),
        },
        AluOp::Arsh => match b.const_value() {
            Some(s) => ashr(&a.sext(32), (s & 31) as u32),
            None => Scalar::UNKNOWN,
        },
        AluOp::SDiv | AluOp::SMod => Scalar::UNKNOWN,
    };
    r.truncate(4)
}

fn alu64(op: AluOp, a: &Scalar, b: &Scalar) -> Scalar {
    match op {
        AluOp::Mov => *b,
        AluOp::Add => add(a, b),
        AluOp::Sub => sub(a, b),
        AluOp::Mul => mul(a, b),
        AluOp::Div => udiv(a, b),
        AluOp::Mod => umod(a, b),
        AluOp::And => and(a, b),
        AluOp::Or => or(a, b),
        AluOp::Xor => xor(a, b),
        AluOp::Lsh => match b.const_value() {
            Some(s) => shl(a, (s & 63) as u32),
            None => Scalar::UNKNOWN,
        },
        AluOp::Rsh => match b.const_value() {
            Some(s) => shr(a, (s & 63) as u32),
            // A logical right shift never increases the value.
            None => Scalar::urange(0, a.umax).unwrap_or(Scalar::UNKNOWN),
        },
        AluOp::Arsh => match b.const_value() {
            Some(s) => ashr(a, (s & 63) as u32),
            None => Scalar::UNKNOWN,
        },
        AluOp::SDiv | AluOp::SMod => Scalar::UNKNOWN,
    }
}

trait BoundedByMax {
    fn bounded_by_max(self) -> Scalar;
}

impl BoundedByMax for Scalar {
    /// `0..=umax` (what a right shift by an unknown amount leaves).
    fn bounded_by_max(self) -> Scalar {
        Scalar::urange(0, self.umax).unwrap_or(Scalar::UNKNOWN)
    }
}

fn finish(mut r: Scalar) -> Scalar {
    // Operations below fill in what they know; the rest stays unknown and `sync` derives it.
    if r.umin > r.umax {
        r.umin = 0;
        r.umax = u64::MAX;
    }
    if r.smin > r.smax {
        r.smin = i64::MIN;
        r.smax = i64::MAX;
    }
    r.sync().unwrap_or(Scalar::UNKNOWN)
}

fn fresh(var: Tnum) -> Scalar {
    let mut r = Scalar::UNKNOWN;
    r.var = var;
    r
}

fn add(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.add(b.var));
    if let (Some(lo), Some(hi)) = (a.smin.checked_add(b.smin), a.smax.checked_add(b.smax)) {
        r.smin = lo;
        r.smax = hi;
    }
    if let (Some(lo), Some(hi)) = (a.umin.checked_add(b.umin), a.umax.checked_add(b.umax)) {
        r.umin = lo;
        r.umax = hi;
    }
    if let (Some(lo), Some(hi)) = (
        a.s32min.checked_add(b.s32min),
        a.s32max.checked_add(b.s32max),
    ) {
        r.s32min = lo;
        r.s32max = hi;
    }
    if let (Some(lo), Some(hi)) = (
        a.u32min.checked_add(b.u32min),
        a.u32max.checked_add(b.u32max),
    ) {
        r.u32min = lo;
        r.u32max = hi;
    }
    finish(r)
}

fn sub(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.sub(b.var));
    if let (Some(lo), Some(hi)) = (a.smin.checked_sub(b.smax), a.smax.checked_sub(b.smin)) {
        r.smin = lo;
        r.smax = hi;
    }
    if let (Some(lo), Some(hi)) = (a.umin.checked_sub(b.umax), a.umax.checked_sub(b.umin)) {
        r.umin = lo;
        r.umax = hi;
    }
    if let (Some(lo), Some(hi)) = (
        a.s32min.checked_sub(b.s32max),
        a.s32max.checked_sub(b.s32min),
    ) {
        r.s32min = lo;
        r.s32max = hi;
    }
    if let (Some(lo), Some(hi)) = (
        a.u32min.checked_sub(b.u32max),
        a.u32max.checked_sub(b.u32min),
    ) {
        r.u32min = lo;
        r.u32max = hi;
    }
    finish(r)
}

fn mul(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.mul(b.var));
    if let (Some(lo), Some(hi)) = (a.umin.checked_mul(b.umin), a.umax.checked_mul(b.umax)) {
        r.umin = lo;
        r.umax = hi;
    }
    finish(r)
}

fn udiv(a: &Scalar, b: &Scalar) -> Scalar {
    // Division by zero yields 0; otherwise the quotient never exceeds the dividend.
    let mut r = Scalar::UNKNOWN;
    if b.umin > 0 {
        r.umin = a.umin.checked_div(b.umax).unwrap_or(0);
        r.umax = a.umax.checked_div(b.umin).unwrap_or(a.umax);
    } else {
        r.umin = 0;
        r.umax = a.umax;
    }
    finish(r)
}

fn umod(a: &Scalar, b: &Scalar) -> Scalar {
    // Modulo by zero keeps the dividend; otherwise the result is below the divisor.
    let mut r = Scalar::UNKNOWN;
    r.umin = 0;
    r.umax = if b.umin > 0 {
        a.umax.min(b.umax.saturating_sub(1))
    } else {
        a.umax
    };
    finish(r)
}

fn and(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.and(b.var));
    r.umin = r.var.value;
    r.umax = a.umax.min(b.umax);
    if a.smin >= 0 || b.smin >= 0 {
        // The result is no larger than a non-negative operand.
        r.smin = 0;
        let hi = if a.smin >= 0 && b.smin >= 0 {
            a.smax.min(b.smax)
        } else if a.smin >= 0 {
            a.smax
        } else {
            b.smax
        };
        r.smax = hi;
    }
    finish(r)
}

fn or(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.or(b.var));
    r.umin = a.umin.max(b.umin);
    r.umax = r.var.value | r.var.mask;
    finish(r)
}

fn xor(a: &Scalar, b: &Scalar) -> Scalar {
    let mut r = fresh(a.var.xor(b.var));
    r.umin = r.var.value;
    r.umax = r.var.value | r.var.mask;
    finish(r)
}

fn shl(a: &Scalar, s: u32) -> Scalar {
    let mut r = fresh(a.var.lshift(s));
    if s == 0 {
        return *a;
    }
    if a.umax.checked_shr(64u32.saturating_sub(s)).unwrap_or(0) == 0 {
        r.umin = a.umin.wrapping_shl(s);
        r.umax = a.umax.wrapping_shl(s);
    }
    finish(r)
}

fn shr(a: &Scalar, s: u32) -> Scalar {
    let mut r = fresh(a.var.rshift(s));
    r.umin = a.umin.wrapping_shr(s);
    r.umax = a.umax.wrapping_shr(s);
    finish(r)
}

fn ashr(a: &Scalar, s: u32) -> Scalar {
    let mut r = fresh(a.var.arshift(s, 64));
    r.smin = a.smin.wrapping_shr(s);
    r.smax = a.smax.wrapping_shr(s);
    finish(r)
}

/// Abstract `dst = -dst`.
pub fn neg(width: Width, dst: &Scalar) -> Scalar {
    alu(AluOp::Sub, width, &Scalar::konst(0), dst)
}

/// Abstract byte-order conversion of the low `bits` bits.
pub fn endian(kind: ByteSwap, bits: u8, dst: &Scalar) -> Scalar {
    let bytes = u32::from(bits / 8);
    if let Some(v) = dst.const_value() {
        let r = match (kind, bits) {
            (ByteSwap::ToLe, 16) => v & 0xffff,
            (ByteSwap::ToLe, 32) => v & 0xffff_ffff,
            (ByteSwap::ToLe, _) => v,
            (_, 16) => u64::from((v as u16).swap_bytes()),
            (_, 32) => u64::from((v as u32).swap_bytes()),
            _ => v.swap_bytes(),
        };
        return Scalar::konst(r);
    }
    match kind {
        ByteSwap::ToLe => dst.truncate(bytes),
        ByteSwap::ToBe | ByteSwap::Swap => Scalar::unknown_bytes(bytes),
    }
}

/// Abstract `movsx`: sign-extend the low `bits` of `src`; a 32-bit `movsx` zero-extends the
/// 32-bit result.
pub fn movsx(width: Width, bits: u8, src: &Scalar) -> Scalar {
    let r = src.truncate(u32::from(bits / 8)).sext(u32::from(bits));
    match width {
        Width::W64 => r,
        Width::W32 => r.zext32(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(s: &Scalar) -> Vec<u64> {
        if s.umax.wrapping_sub(s.umin) < 64 {
            return (s.umin..=s.umax).collect();
        }
        if s.smax.wrapping_sub(s.smin) < 64 {
            return (s.smin..=s.smax).map(|v| v as u64).collect();
        }
        vec![s.umin, s.umax, s.smin as u64, s.smax as u64]
    }

    #[test]
    fn concrete_results_are_contained() {
        let vals = [
            Scalar::urange(0, 10).unwrap(),
            Scalar::urange(5, 60).unwrap(),
            Scalar::srange(-5, 5).unwrap(),
            Scalar::konst(3),
            Scalar::konst(u64::MAX),
            Scalar::urange(0xffff_fff0, 0x1_0000_0010).unwrap(),
        ];
        let ops = AluOp::ALL;
        for a in &vals {
            for b in &vals {
                for op in ops {
                    for w in [Width::W64, Width::W32] {
                        let r = alu(op, w, a, b);
                        for x in members(a) {
                            for y in members(b) {
                                let c = eval(op, w, x, y);
                                assert!(
                                    r.contains(&Scalar::konst(c)),
                                    "{op:?} {w:?} {x:#x} {y:#x} = {c:#x} not in {r:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
