//! Pure RFC 9669 semantics of arithmetic, byte swaps and jump conditions.
//!
//! Every function is total: division and modulo by zero, `INT_MIN / -1`, and shift counts
//! are defined exactly as RFC 9669 §4.1 says, with no panics and no undefined behaviour.

use gpubpf_isa::{AluOp, ByteSwap, JmpCond};

/// `dst op src` on 64 bits. `src` is the register value or the sign-extended immediate.
pub(crate) fn alu64(op: AluOp, dst: u64, src: u64) -> u64 {
    match op {
        AluOp::Add => dst.wrapping_add(src),
        AluOp::Sub => dst.wrapping_sub(src),
        AluOp::Mul => dst.wrapping_mul(src),
        AluOp::Div => dst.checked_div(src).unwrap_or(0),
        AluOp::SDiv => {
            if src == 0 {
                0
            } else {
                // Only `i64::MIN / -1` overflows; it wraps to `i64::MIN`.
                (dst as i64).checked_div(src as i64).unwrap_or(i64::MIN) as u64
            }
        }
        AluOp::Mod => dst.checked_rem(src).unwrap_or(dst),
        AluOp::SMod => {
            if src == 0 {
                dst
            } else {
                // Only `i64::MIN % -1` overflows; the remainder is 0.
                (dst as i64).checked_rem(src as i64).unwrap_or(0) as u64
            }
        }
        AluOp::Or => dst | src,
        AluOp::And => dst & src,
        AluOp::Xor => dst ^ src,
        AluOp::Lsh => dst.wrapping_shl((src & 63) as u32),
        AluOp::Rsh => dst.wrapping_shr((src & 63) as u32),
        AluOp::Arsh => (dst as i64).wrapping_shr((src & 63) as u32) as u64,
        AluOp::Mov => src,
    }
}

/// `dst op src` on the low 32 bits; the result is zero-extended.
pub(crate) fn alu32(op: AluOp, dst: u64, src: u64) -> u64 {
    let d = dst as u32;
    let s = src as u32;
    let r: u32 = match op {
        AluOp::Add => d.wrapping_add(s),
        AluOp::Sub => d.wrapping_sub(s),
        AluOp::Mul => d.wrapping_mul(s),
        AluOp::Div => d.checked_div(s).unwrap_or(0),
        AluOp::SDiv => {
            if s == 0 {
                0
            } else {
                (d as i32).checked_div(s as i32).unwrap_or(i32::MIN) as u32
            }
        }
        AluOp::Mod => d.checked_rem(s).unwrap_or(d),
        AluOp::SMod => {
            if s == 0 {
                d
            } else {
                (d as i32).checked_rem(s as i32).unwrap_or(0) as u32
            }
        }
        AluOp::Or => d | s,
        AluOp::And => d & s,
        AluOp::Xor => d ^ s,
        AluOp::Lsh => d.wrapping_shl(s & 31),
        AluOp::Rsh => d.wrapping_shr(s & 31),
        AluOp::Arsh => (d as i32).wrapping_shr(s & 31) as u32,
        AluOp::Mov => s,
    };
    u64::from(r)
}

/// `movsx`: sign-extends the low `bits` of `src`; the 32-bit form zero-extends the result.
pub(crate) fn movsx(wide: bool, bits: u8, src: u64) -> u64 {
    let v: i64 = match bits {
        8 => i64::from(src as i8),
        16 => i64::from(src as i16),
        _ => i64::from(src as i32),
    };
    if wide {
        v as u64
    } else {
        u64::from(v as u32)
    }
}

/// Byte-order conversion of the low `bits` of `v` (the host is little-endian).
pub(crate) fn endian(kind: ByteSwap, bits: u8, v: u64) -> u64 {
    let swap = match kind {
        ByteSwap::ToLe => cfg!(target_endian = "big"),
        ByteSwap::ToBe => cfg!(target_endian = "little"),
        ByteSwap::Swap => true,
    };
    match (bits, swap) {
        (16, true) => u64::from((v as u16).swap_bytes()),
        (16, false) => u64::from(v as u16),
        (32, true) => u64::from((v as u32).swap_bytes()),
        (32, false) => u64::from(v as u32),
        (_, true) => v.swap_bytes(),
        (_, false) => v,
    }
}

/// Whether a conditional jump is taken. For 32-bit jumps the callers pass the low halves
/// (`wide == false` compares them as 32-bit values).
pub(crate) fn condition(cond: JmpCond, wide: bool, a: u64, b: u64) -> bool {
    if wide {
        cmp(cond, a, b, a as i64, b as i64)
    } else {
        let (a, b) = (a as u32, b as u32);
        cmp(
            cond,
            u64::from(a),
            u64::from(b),
            i64::from(a as i32),
            i64::from(b as i32),
        )
    }
}

fn cmp(cond: JmpCond, a: u64, b: u64, sa: i64, sb: i64) -> bool {
    match cond {
        JmpCond::Eq => a == b,
        JmpCond::Ne => a != b,
        JmpCond::Gt => a > b,
        JmpCond::Ge => a >= b,
        JmpCond::Lt => a < b,
        JmpCond::Le => a <= b,
        JmpCond::Set => a & b != 0,
        JmpCond::Sgt => sa > sb,
        JmpCond::Sge => sa >= sb,
        JmpCond::Slt => sa < sb,
        JmpCond::Sle => sa <= sb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_and_modulo_edge_cases() {
        assert_eq!(alu64(AluOp::Div, 7, 0), 0);
        assert_eq!(alu64(AluOp::Mod, 7, 0), 7);
        assert_eq!(alu32(AluOp::Mod, 0xffff_ffff_0000_0007, 0), 7);
        assert_eq!(alu32(AluOp::Div, 0xffff_ffff_0000_0007, 0), 0);
        assert_eq!(
            alu64(AluOp::SDiv, i64::MIN as u64, -1i64 as u64),
            i64::MIN as u64
        );
        assert_eq!(alu64(AluOp::SMod, i64::MIN as u64, -1i64 as u64), 0);
        assert_eq!(
            alu32(AluOp::SDiv, i32::MIN as u32 as u64, u64::MAX),
            0x8000_0000
        );
        assert_eq!(alu32(AluOp::SMod, i32::MIN as u32 as u64, u64::MAX), 0);
        assert_eq!(alu64(AluOp::SDiv, -7i64 as u64, 2), -3i64 as u64);
        assert_eq!(alu64(AluOp::SMod, -7i64 as u64, 2), -1i64 as u64);
        assert_eq!(alu64(AluOp::SMod, 7, -2i64 as u64), 1);
        assert_eq!(alu64(AluOp::SDiv, 5, 0), 0);
        assert_eq!(alu64(AluOp::SMod, 5, 0), 5);
        assert_eq!(alu32(AluOp::SMod, 0xaaaa_aaaa_ffff_fff9, 0), 0xffff_fff9);
    }

    #[test]
    fn shifts_are_masked() {
        assert_eq!(alu64(AluOp::Lsh, 1, 65), 2);
        assert_eq!(alu32(AluOp::Lsh, 1, 33), 2);
        assert_eq!(alu32(AluOp::Rsh, 0xffff_ffff_8000_0000, 31), 1);
        assert_eq!(alu64(AluOp::Arsh, 0x8000_0000_0000_0000, 63), u64::MAX);
        assert_eq!(alu32(AluOp::Arsh, 0x8000_0000, 4), 0xf800_0000);
    }

    #[test]
    fn alu32_zero_extends() {
        assert_eq!(alu32(AluOp::Add, u64::MAX, 1), 0);
        assert_eq!(alu32(AluOp::Mov, 5, u64::MAX), 0xffff_ffff);
        assert_eq!(alu32(AluOp::Sub, 0, 1), 0xffff_ffff);
    }

    #[test]
    fn sign_extending_moves_and_swaps() {
        assert_eq!(movsx(true, 8, 0x80), 0xffff_ffff_ffff_ff80);
        assert_eq!(movsx(false, 8, 0x80), 0xffff_ff80);
        assert_eq!(movsx(false, 16, 0x1234_8000), 0xffff_8000);
        assert_eq!(movsx(true, 32, 0x8000_0000), 0xffff_ffff_8000_0000);
        assert_eq!(endian(ByteSwap::ToBe, 16, 0x1122_3344_5566_7788), 0x8877);
        assert_eq!(endian(ByteSwap::ToLe, 16, 0x1122_3344_5566_7788), 0x7788);
        assert_eq!(
            endian(ByteSwap::ToLe, 64, 0x1122_3344_5566_7788),
            0x1122_3344_5566_7788
        );
        assert_eq!(
            endian(ByteSwap::Swap, 32, 0x1122_3344_5566_7788),
            0x8877_6655
        );
        assert_eq!(
            endian(ByteSwap::Swap, 64, 0x1122_3344_5566_7788),
            0x8877_6655_4433_2211
        );
    }

    #[test]
    fn conditions() {
        assert!(condition(JmpCond::Sgt, true, 1, u64::MAX));
        assert!(!condition(JmpCond::Gt, true, 1, u64::MAX));
        assert!(condition(JmpCond::Eq, false, 0x1_0000_0005, 5));
        assert!(condition(JmpCond::Slt, false, 0xffff_ffff, 0));
        assert!(condition(JmpCond::Set, true, 6, 2));
        assert!(!condition(
            JmpCond::Set,
            false,
            0x1_0000_0000,
            0x1_0000_0000
        ));
    }
}
