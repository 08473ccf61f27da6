//! Encoding [`Instruction`]s back into 8-byte slots.

use crate::insn::{
    AluOp, AtomicOp, ByteSwap, CallTarget, Insn, Instruction, JmpCond, Operand, Width,
};
use crate::opcode::*;

impl Instruction {
    /// Encodes the instruction into one or two slots appended to `out`.
    pub fn encode_into(&self, out: &mut Vec<Insn>) {
        match *self {
            Instruction::Alu {
                width,
                op,
                dst,
                src,
            } => {
                let class = alu_class(width);
                let (code, off) = match op {
                    AluOp::Add => (BPF_ADD, 0),
                    AluOp::Sub => (BPF_SUB, 0),
                    AluOp::Mul => (BPF_MUL, 0),
                    AluOp::Div => (BPF_DIV, 0),
                    AluOp::SDiv => (BPF_DIV, 1),
                    AluOp::Or => (BPF_OR, 0),
                    AluOp::And => (BPF_AND, 0),
                    AluOp::Lsh => (BPF_LSH, 0),
                    AluOp::Rsh => (BPF_RSH, 0),
                    AluOp::Mod => (BPF_MOD, 0),
                    AluOp::SMod => (BPF_MOD, 1),
                    AluOp::Xor => (BPF_XOR, 0),
                    AluOp::Mov => (BPF_MOV, 0),
                    AluOp::Arsh => (BPF_ARSH, 0),
                };
                out.push(with_operand(class | code, dst, off, src));
            }
            Instruction::Neg { width, dst } => {
                out.push(Insn::new(alu_class(width) | BPF_NEG, dst, 0, 0, 0))
            }
            Instruction::MovSx {
                width,
                dst,
                src,
                bits,
            } => out.push(Insn::new(
                alu_class(width) | BPF_MOV | BPF_X,
                dst,
                src,
                i16::from(bits),
                0,
            )),
            Instruction::Endian { kind, bits, dst } => {
                let opc = match kind {
                    ByteSwap::ToLe => BPF_ALU | BPF_END | BPF_TO_LE,
                    ByteSwap::ToBe => BPF_ALU | BPF_END | BPF_TO_BE,
                    ByteSwap::Swap => BPF_ALU64 | BPF_END | BPF_TO_LE,
                };
                out.push(Insn::new(opc, dst, 0, 0, i32::from(bits)));
            }
            Instruction::LoadImm64 {
                dst,
                kind,
                imm,
                next_imm,
            } => {
                out.push(Insn::new(LDDW, dst, kind.src(), 0, imm));
                out.push(Insn::new(0, 0, 0, 0, next_imm));
            }
            Instruction::Load {
                size,
                sign_extend,
                dst,
                src,
                off,
            } => {
                let mode = if sign_extend { BPF_MEMSX } else { BPF_MEM };
                out.push(Insn::new(BPF_LDX | mode | size.bits(), dst, src, off, 0));
            }
            Instruction::Store {
                size,
                dst,
                off,
                src,
            } => match src {
                Operand::Imm(imm) => {
                    out.push(Insn::new(BPF_ST | BPF_MEM | size.bits(), dst, 0, off, imm))
                }
                Operand::Reg(r) => {
                    out.push(Insn::new(BPF_STX | BPF_MEM | size.bits(), dst, r, off, 0))
                }
            },
            Instruction::Atomic {
                size,
                op,
                fetch,
                dst,
                src,
                off,
            } => {
                let f = if fetch { BPF_FETCH } else { 0 };
                let imm = match op {
                    AtomicOp::Add => BPF_ATOMIC_ADD | f,
                    AtomicOp::Or => BPF_ATOMIC_OR | f,
                    AtomicOp::And => BPF_ATOMIC_AND | f,
                    AtomicOp::Xor => BPF_ATOMIC_XOR | f,
                    AtomicOp::Xchg => BPF_XCHG,
                    AtomicOp::CmpXchg => BPF_CMPXCHG,
                };
                out.push(Insn::new(
                    BPF_STX | BPF_ATOMIC | size.bits(),
                    dst,
                    src,
                    off,
                    imm,
                ));
            }
            Instruction::Ja { off, long } => {
                if long {
                    out.push(Insn::new(BPF_JMP32 | BPF_JA, 0, 0, 0, off));
                } else {
                    // A short `ja` whose offset does not fit 16 bits cannot be encoded; the
                    // assembler only builds short jumps with in-range offsets.
                    out.push(Insn::new(BPF_JMP | BPF_JA, 0, 0, off as i16, 0));
                }
            }
            Instruction::Jump {
                width,
                cond,
                dst,
                src,
                off,
            } => {
                let class = if width == Width::W32 {
                    BPF_JMP32
                } else {
                    BPF_JMP
                };
                let code = match cond {
                    JmpCond::Eq => BPF_JEQ,
                    JmpCond::Gt => BPF_JGT,
                    JmpCond::Ge => BPF_JGE,
                    JmpCond::Set => BPF_JSET,
                    JmpCond::Ne => BPF_JNE,
                    JmpCond::Sgt => BPF_JSGT,
                    JmpCond::Sge => BPF_JSGE,
                    JmpCond::Lt => BPF_JLT,
                    JmpCond::Le => BPF_JLE,
                    JmpCond::Slt => BPF_JSLT,
                    JmpCond::Sle => BPF_JSLE,
                };
                out.push(with_operand(class | code, dst, off, src));
            }
            Instruction::Call(target) => {
                let (src, imm) = match target {
                    CallTarget::Helper(id) => (BPF_PSEUDO_HELPER, id),
                    CallTarget::Local(rel) => (BPF_PSEUDO_CALL, rel),
                    CallTarget::Kfunc(id) => (BPF_PSEUDO_KFUNC_CALL, id),
                };
                out.push(Insn::new(CALL, 0, src, 0, imm));
            }
            Instruction::Callx { reg } => out.push(Insn::new(CALLX, reg, 0, 0, 0)),
            Instruction::Exit => out.push(Insn::new(EXIT, 0, 0, 0, 0)),
        }
    }

    /// Encodes the instruction into its slots.
    pub fn encode(&self) -> Vec<Insn> {
        let mut v = Vec::with_capacity(2);
        self.encode_into(&mut v);
        v
    }
}

const fn alu_class(width: Width) -> u8 {
    match width {
        Width::W32 => BPF_ALU,
        Width::W64 => BPF_ALU64,
    }
}

fn with_operand(opc: u8, dst: u8, off: i16, src: Operand) -> Insn {
    match src {
        Operand::Reg(r) => Insn::new(opc | BPF_X, dst, r, off, 0),
        Operand::Imm(imm) => Insn::new(opc | BPF_K, dst, 0, off, imm),
    }
}

/// Encodes a list of instructions into slots.
pub fn encode_program(program: &[Instruction]) -> Vec<Insn> {
    let mut out = Vec::with_capacity(program.len() + 4);
    for ins in program {
        ins.encode_into(&mut out);
    }
    out
}
