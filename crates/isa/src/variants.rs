//! Every variant of the instruction-field enums, for code that has to enumerate them
//! (random-program generators in tests and fuzzers, tables). A test keeps each list complete:
//! adding a variant without listing it fails to compile there.

use crate::insn::{AluOp, AtomicOp, JmpCond, Size};

impl AluOp {
    /// Every operation, in opcode order.
    pub const ALL: [AluOp; 14] = [
        AluOp::Add,
        AluOp::Sub,
        AluOp::Mul,
        AluOp::Div,
        AluOp::SDiv,
        AluOp::Or,
        AluOp::And,
        AluOp::Lsh,
        AluOp::Rsh,
        AluOp::Mod,
        AluOp::SMod,
        AluOp::Xor,
        AluOp::Mov,
        AluOp::Arsh,
    ];
}

impl JmpCond {
    /// Every condition.
    pub const ALL: [JmpCond; 11] = [
        JmpCond::Eq,
        JmpCond::Gt,
        JmpCond::Ge,
        JmpCond::Set,
        JmpCond::Ne,
        JmpCond::Sgt,
        JmpCond::Sge,
        JmpCond::Lt,
        JmpCond::Le,
        JmpCond::Slt,
        JmpCond::Sle,
    ];
}

impl Size {
    /// Every access size, smallest first.
    pub const ALL: [Size; 4] = [Size::B, Size::H, Size::W, Size::DW];
}

impl AtomicOp {
    /// Every atomic operation.
    pub const ALL: [AtomicOp; 6] = [
        AtomicOp::Add,
        AtomicOp::Or,
        AtomicOp::And,
        AtomicOp::Xor,
        AtomicOp::Xchg,
        AtomicOp::CmpXchg,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exhaustive matches: a new variant is a compile error here until it gets a position,
    /// and the assertions then require it in `ALL` at that position.
    #[test]
    fn lists_are_complete_and_unique() {
        fn alu(op: AluOp) -> usize {
            use AluOp::*;
            match op {
                Add => 0,
                Sub => 1,
                Mul => 2,
                Div => 3,
                SDiv => 4,
                Or => 5,
                And => 6,
                Lsh => 7,
                Rsh => 8,
                Mod => 9,
                SMod => 10,
                Xor => 11,
                Mov => 12,
                Arsh => 13,
            }
        }
        fn cond(c: JmpCond) -> usize {
            use JmpCond::*;
            match c {
                Eq => 0,
                Gt => 1,
                Ge => 2,
                Set => 3,
                Ne => 4,
                Sgt => 5,
                Sge => 6,
                Lt => 7,
                Le => 8,
                Slt => 9,
                Sle => 10,
            }
        }
        fn size(s: Size) -> usize {
            match s {
                Size::B => 0,
                Size::H => 1,
                Size::W => 2,
                Size::DW => 3,
            }
        }
        fn atomic(a: AtomicOp) -> usize {
            use AtomicOp::*;
            match a {
                Add => 0,
                Or => 1,
                And => 2,
                Xor => 3,
                Xchg => 4,
                CmpXchg => 5,
            }
        }
        for (i, v) in AluOp::ALL.iter().enumerate() {
            assert_eq!(alu(*v), i, "{v:?}");
        }
        for (i, v) in JmpCond::ALL.iter().enumerate() {
            assert_eq!(cond(*v), i, "{v:?}");
        }
        for (i, v) in Size::ALL.iter().enumerate() {
            assert_eq!(size(*v), i, "{v:?}");
        }
        for (i, v) in AtomicOp::ALL.iter().enumerate() {
            assert_eq!(atomic(*v), i, "{v:?}");
        }
    }
}
