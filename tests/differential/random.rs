//! Randomly generated programs (proptest, fixed seed, bounded case count).
//!
//! Programs are straight-line code with forward jumps only, so they always terminate. All
//! general registers except r1 (the memory pointer) are first loaded with random 64-bit
//! constants; pointer registers (r1, r10) are only used as load/store bases, never as data,
//! so that results do not depend on where each engine's buffers live.

use gpubpf_isa::{
    encode_program, AluOp, AtomicOp, ByteSwap, Insn, Instruction as I, JmpCond, LddwKind, Operand,
    Size, Width,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Size of the memory buffer passed in r1.
pub const MEM_SIZE: usize = 64;

/// One generated operation; jumps skip a number of following operations.
#[derive(Debug, Clone)]
pub enum Op {
    Alu(Width, AluOp, u8, Src),
    Neg(Width, u8),
    MovSx(Width, u8, u8, u8),
    Endian(ByteSwap, u8, u8),
    Lddw(u8, u64),
    Load {
        size: Size,
        sx: bool,
        dst: u8,
        stack: bool,
        off: i16,
    },
    Store {
        size: Size,
        stack: bool,
        off: i16,
        src: Src,
    },
    Atomic {
        size: Size,
        op: AtomicOp,
        fetch: bool,
        src: u8,
        off: i16,
    },
    Jump(Width, JmpCond, u8, Src, u8),
    Ja(u8, bool),
}

#[derive(Debug, Clone, Copy)]
pub enum Src {
    Reg(u8),
    Imm(i32),
}

const DATA_REGS: [u8; 9] = [0, 2, 3, 4, 5, 6, 7, 8, 9];

fn reg() -> impl Strategy<Value = u8> {
    prop::sample::select(&DATA_REGS[..])
}

fn imm() -> impl Strategy<Value = i32> {
    prop_oneof![
        3 => -4i32..64,
        1 => any::<i32>(),
        1 => prop::sample::select(vec![i32::MIN, i32::MAX, -1, 0, 1, 31, 32, 63, 64]),
    ]
}

fn src() -> impl Strategy<Value = Src> {
    prop_oneof![reg().prop_map(Src::Reg), imm().prop_map(Src::Imm)]
}

fn width() -> impl Strategy<Value = Width> {
    prop_oneof![Just(Width::W32), Just(Width::W64)]
}

fn size() -> impl Strategy<Value = Size> {
    prop::sample::select(Size::ALL.to_vec())
}

fn alu_op(full: bool) -> impl Strategy<Value = AluOp> {
    // Without `full`, rbpf's subset: no ISA v4 signed division and modulo.
    let ops: Vec<AluOp> = AluOp::ALL
        .into_iter()
        .filter(|op| full || !matches!(op, AluOp::SDiv | AluOp::SMod))
        .collect();
    prop::sample::select(ops)
}

fn cond() -> impl Strategy<Value = JmpCond> {
    prop::sample::select(JmpCond::ALL.to_vec())
}

/// Operations of rbpf's subset: RFC 9669 without atomics and ISA v4.
fn base_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (width(), alu_op(false), reg(), src())
            .prop_map(|(w, o, d, s)| Op::Alu(w, o, d, s))
            .prop_filter("rbpf: 32-bit modulo", |op| !matches!(op, Op::Alu(Width::W32, AluOp::Mod, ..))),
        // rbpf panics on `neg64` of INT64_MIN (debug overflow check): 32-bit only.
        1 => reg().prop_map(|d| Op::Neg(Width::W32, d)),
        1 => (prop::sample::select(vec![ByteSwap::ToLe, ByteSwap::ToBe]),
              prop::sample::select(vec![16u8, 32, 64]), reg())
            .prop_map(|(k, b, d)| Op::Endian(k, b, d)),
        1 => (reg(), any::<u64>()).prop_map(|(d, v)| Op::Lddw(d, v)),
        3 => (size(), reg(), any::<bool>(), 0u8..64).prop_map(|(size, dst, stack, o)| {
            Op::Load { size, sx: false, dst, stack, off: mem_off(size, stack, o) }
        }),
        3 => (size(), any::<bool>(), 0u8..64, src()).prop_map(|(size, stack, o, src)| {
            Op::Store { size, stack, off: mem_off(size, stack, o), src }
        }),
        3 => (width(), cond(), reg(), src(), 0u8..6)
            .prop_map(|(w, c, d, s, k)| Op::Jump(w, c, d, s, k))
            .prop_filter("rbpf: zero-extended jump immediates", |op| !matches!(
                op,
                Op::Jump(Width::W64, c, _, Src::Imm(i), _) if *i < 0 && !matches!(
                    c, JmpCond::Set | JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle)
            )),
        1 => (0u8..4).prop_map(|k| Op::Ja(k, false)),
    ]
}

/// Every operation the generator knows.
fn full_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (width(), alu_op(true), reg(), src()).prop_map(|(w, o, d, s)| Op::Alu(w, o, d, s)),
        1 => (width(), reg()).prop_map(|(w, d)| Op::Neg(w, d)),
        1 => (width(), reg(), reg(), prop::sample::select(vec![8u8, 16, 32]))
            .prop_map(|(w, d, s, b)| Op::MovSx(w, d, s, if w == Width::W32 && b == 32 { 16 } else { b })),
        1 => (prop::sample::select(vec![ByteSwap::ToLe, ByteSwap::ToBe, ByteSwap::Swap]),
              prop::sample::select(vec![16u8, 32, 64]), reg())
            .prop_map(|(k, b, d)| Op::Endian(k, b, d)),
        1 => (reg(), any::<u64>()).prop_map(|(d, v)| Op::Lddw(d, v)),
        3 => (size(), any::<bool>(), reg(), any::<bool>(), 0u8..64).prop_map(|(size, sx, dst, stack, o)| {
            let sx = sx && size != Size::DW;
            Op::Load { size, sx, dst, stack, off: mem_off(size, stack, o) }
        }),
        3 => (size(), any::<bool>(), 0u8..64, src()).prop_map(|(size, stack, o, src)| {
            Op::Store { size, stack, off: mem_off(size, stack, o), src }
        }),
        2 => (prop::sample::select(vec![Size::W, Size::DW]),
              prop::sample::select(AtomicOp::ALL.to_vec()),
              any::<bool>(), reg(), 0u8..8)
            .prop_map(|(size, op, fetch, src, o)| {
                let off = i16::from(o) * size.bytes() as i16;
                let off = off.min(MEM_SIZE as i16 - size.bytes() as i16);
                Op::Atomic { size, op, fetch, src, off }
            }),
        3 => (width(), cond(), reg(), src(), 0u8..6).prop_map(|(w, c, d, s, k)| Op::Jump(w, c, d, s, k)),
        1 => (0u8..4, any::<bool>()).prop_map(|(k, long)| Op::Ja(k, long)),
    ]
}

/// An in-bounds offset: into the 64-byte buffer, or into frame 0 of the stack (r10 - 64..).
fn mem_off(size: Size, stack: bool, o: u8) -> i16 {
    let n = size.bytes() as i16;
    let o = i16::from(o).min(MEM_SIZE as i16 - n);
    if stack {
        o - MEM_SIZE as i16
    } else {
        o
    }
}

/// A generated test case: initial registers, operations and initial memory.
#[derive(Debug, Clone)]
pub struct Case {
    pub regs: Vec<u64>,
    pub ops: Vec<Op>,
    pub mem: Vec<u8>,
}

/// A case over the full ISA (`full`) or rbpf's subset.
pub fn case(full: bool) -> impl Strategy<Value = Case> {
    case_sized(full, 1..48)
}

/// A case with a number of operations in `len`.
pub fn case_sized(full: bool, len: std::ops::Range<usize>) -> impl Strategy<Value = Case> {
    let op = if full {
        full_op().boxed()
    } else {
        base_op().boxed()
    };
    (
        prop::collection::vec(any::<u64>(), DATA_REGS.len()),
        prop::collection::vec(op, len),
        prop::collection::vec(any::<u8>(), MEM_SIZE),
    )
        .prop_map(|(regs, ops, mem)| Case { regs, ops, mem })
}

impl Case {
    /// Lowers the case to instruction slots.
    pub fn slots(&self) -> Vec<Insn> {
        let mut prologue: Vec<I> = DATA_REGS
            .iter()
            .zip(&self.regs)
            .map(|(r, v)| lddw(*r, *v))
            .collect();
        // Slot position of every op (and of the final exit at index ops.len()).
        let base: usize = prologue.iter().map(|i| i.slots()).sum();
        let mut pos = Vec::with_capacity(self.ops.len() + 1);
        let mut p = base;
        for op in &self.ops {
            pos.push(p);
            p += if matches!(op, Op::Lddw(..)) { 2 } else { 1 };
        }
        pos.push(p);
        let n = self.ops.len();
        let target_off = |i: usize, skip: u8| {
            let t = (i + 1 + usize::from(skip)).min(n);
            (pos[t] - pos[i] - 1) as i32
        };
        for (i, op) in self.ops.iter().enumerate() {
            let ins = match *op {
                Op::Alu(w, o, d, s) => I::Alu {
                    width: w,
                    op: o,
                    dst: d,
                    src: operand(s),
                },
                Op::Neg(w, d) => I::Neg { width: w, dst: d },
                Op::MovSx(w, d, s, bits) => I::MovSx {
                    width: w,
                    dst: d,
                    src: s,
                    bits,
                },
                Op::Endian(kind, bits, dst) => {
                    // `bswap` is ALU64-only and `to_le`/`to_be` ALU-only; every width exists.
                    I::Endian { kind, bits, dst }
                }
                Op::Lddw(d, v) => lddw(d, v),
                Op::Load {
                    size,
                    sx,
                    dst,
                    stack,
                    off,
                } => I::Load {
                    size,
                    sign_extend: sx,
                    dst,
                    src: if stack { 10 } else { 1 },
                    off,
                },
                Op::Store {
                    size,
                    stack,
                    off,
                    src,
                } => I::Store {
                    size,
                    dst: if stack { 10 } else { 1 },
                    off,
                    src: operand(src),
                },
                Op::Atomic {
                    size,
                    op,
                    fetch,
                    src,
                    off,
                } => I::Atomic {
                    size,
                    op,
                    fetch: fetch || matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg),
                    dst: 1,
                    src,
                    off,
                },
                Op::Jump(w, c, d, s, skip) => I::Jump {
                    width: w,
                    cond: c,
                    dst: d,
                    src: operand(s),
                    off: target_off(i, skip) as i16,
                },
                Op::Ja(skip, long) => I::Ja {
                    off: target_off(i, skip),
                    long,
                },
            };
            prologue.push(ins);
        }
        prologue.push(I::Exit);
        encode_program(&prologue)
    }
}

fn operand(s: Src) -> Operand {
    match s {
        Src::Reg(r) => Operand::Reg(r),
        Src::Imm(i) => Operand::Imm(i),
    }
}

pub fn lddw(dst: u8, v: u64) -> I {
    I::LoadImm64 {
        dst,
        kind: LddwKind::Imm,
        imm: v as u32 as i32,
        next_imm: (v >> 32) as u32 as i32,
    }
}

/// A runner with a fixed seed and `cases` cases (reproducible in CI).
pub fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7u8; 32]))
}
