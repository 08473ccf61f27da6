//! Disassembler: bpftool-style listings and assembler-compatible text.
//!
//! - [`Syntax::Bpftool`]: one line per instruction, `N: (opcode) text`, in the style of
//!   `bpftool prog dump xlated` (`r0 = *(u64 *)(r1 +2)`, `if r1 == 0x5 goto pc+1`).
//! - [`Syntax::Asm`]: the text syntax accepted by [`crate::asm::assemble`], one instruction
//!   per line, with relative offsets (`+N`/`-N`) instead of labels, so that
//!   asm → bytes → disasm → asm reproduces the same bytes.

use std::fmt::Write as _;

use crate::insn::{
    decode_program, AluOp, AtomicOp, ByteSwap, CallTarget, DecodeError, Insn, Instruction, JmpCond,
    LddwKind, Operand, Size, Width,
};

/// Output syntax of the disassembler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// `N: (opcode) text` in the style of bpftool's xlated dump.
    Bpftool,
    /// Text that the assembler accepts.
    Asm,
}

/// Resolves helper ids to names for `call` lines (bpftool syntax only).
pub type HelperNames<'a> = &'a dyn Fn(i32) -> Option<&'static str>;

/// Disassembles `insns` in bpftool style, one line per instruction.
pub fn disassemble(insns: &[Insn]) -> Result<String, DecodeError> {
    disassemble_with(insns, Syntax::Bpftool, &|_| None)
}

/// Disassembles `insns` into assembler-compatible text.
pub fn disassemble_asm(insns: &[Insn]) -> Result<String, DecodeError> {
    disassemble_with(insns, Syntax::Asm, &|_| None)
}

/// Disassembles `insns` in the given syntax; `helper_name` names helper calls.
pub fn disassemble_with(
    insns: &[Insn],
    syntax: Syntax,
    helper_name: HelperNames<'_>,
) -> Result<String, DecodeError> {
    let mut out = String::new();
    for (pc, ins) in decode_program(insns)? {
        match syntax {
            Syntax::Bpftool => {
                let opc = insns.get(pc).map_or(0, |i| i.opc);
                let _ = writeln!(
                    out,
                    "{pc}: ({opc:02x}) {}",
                    format_bpftool(&ins, helper_name)
                );
            }
            Syntax::Asm => {
                let _ = writeln!(out, "{}", format_asm(&ins));
            }
        }
    }
    Ok(out)
}

/// The bpftool-style text of one instruction (without the `N: (opcode)` prefix).
pub fn format_instruction(ins: &Instruction) -> String {
    format_bpftool(ins, &|_| None)
}

fn size_c(size: Size) -> &'static str {
    match size {
        Size::B => "u8",
        Size::H => "u16",
        Size::W => "u32",
        Size::DW => "u64",
    }
}

fn reg_c(width: Width, r: u8) -> String {
    match width {
        Width::W32 => format!("w{r}"),
        Width::W64 => format!("r{r}"),
    }
}

fn mem_c(size: Size, reg: u8, off: i16) -> String {
    format!("*({} *)(r{reg} {off:+})", size_c(size))
}

fn rel(off: i64) -> String {
    format!("{off:+}")
}

/// The bpftool-style text of one instruction, naming helpers through `helper_name`.
pub fn format_bpftool(ins: &Instruction, helper_name: HelperNames<'_>) -> String {
    match *ins {
        Instruction::Alu {
            width,
            op,
            dst,
            src,
        } => {
            let sym = match op {
                AluOp::Add => "+=",
                AluOp::Sub => "-=",
                AluOp::Mul => "*=",
                AluOp::Div => "/=",
                AluOp::SDiv => "s/=",
                AluOp::Or => "|=",
                AluOp::And => "&=",
                AluOp::Lsh => "<<=",
                AluOp::Rsh => ">>=",
                AluOp::Mod => "%=",
                AluOp::SMod => "s%=",
                AluOp::Xor => "^=",
                AluOp::Mov => "=",
                AluOp::Arsh => "s>>=",
            };
            let s = match src {
                Operand::Reg(r) => reg_c(width, r),
                Operand::Imm(i) => i.to_string(),
            };
            format!("{} {sym} {s}", reg_c(width, dst))
        }
        Instruction::Neg { width, dst } => {
            format!("{} = -{}", reg_c(width, dst), reg_c(width, dst))
        }
        Instruction::MovSx {
            width,
            dst,
            src,
            bits,
        } => format!("{} = (s{bits}){}", reg_c(width, dst), reg_c(width, src)),
        Instruction::Endian { kind, bits, dst } => {
            let k = match kind {
                ByteSwap::ToLe => "le",
                ByteSwap::ToBe => "be",
                ByteSwap::Swap => "bswap",
            };
            format!("r{dst} = {k}{bits} r{dst}")
        }
        Instruction::LoadImm64 {
            dst,
            kind,
            imm,
            next_imm,
        } => match kind {
            LddwKind::Imm => format!("r{dst} = {:#x}", imm64(imm, next_imm)),
            LddwKind::MapFd => format!("r{dst} = map[fd:{imm}]"),
            LddwKind::MapValue => format!("r{dst} = map[fd:{imm}][0]+{next_imm}"),
            LddwKind::BtfId => format!("r{dst} = btf_id[{imm}]"),
            LddwKind::Func => format!("r{dst} = func pc{}", rel(imm.into())),
            LddwKind::MapIdx => format!("r{dst} = map[idx:{imm}]"),
            LddwKind::MapIdxValue => format!("r{dst} = map[idx:{imm}][0]+{next_imm}"),
        },
        Instruction::Load {
            size,
            sign_extend,
            dst,
            src,
            off,
        } => {
            let ty = if sign_extend {
                size_c(size).replace('u', "s")
            } else {
                size_c(size).to_string()
            };
            format!("r{dst} = *({ty} *)(r{src} {off:+})")
        }
        Instruction::Store {
            size,
            dst,
            off,
            src,
        } => {
            let s = match src {
                Operand::Reg(r) => format!("r{r}"),
                Operand::Imm(i) => i.to_string(),
            };
            format!("{} = {s}", mem_c(size, dst, off))
        }
        Instruction::Atomic {
            size,
            op,
            fetch,
            dst,
            src,
            off,
        } => {
            let (bits, reg) = if size == Size::DW {
                ("64", format!("r{src}"))
            } else {
                ("", format!("w{src}"))
            };
            let ptr = format!("({} *)(r{dst} {off:+})", size_c(size));
            let name = match op {
                AtomicOp::Add => "add",
                AtomicOp::Or => "or",
                AtomicOp::And => "and",
                AtomicOp::Xor => "xor",
                AtomicOp::Xchg => "xchg",
                AtomicOp::CmpXchg => "cmpxchg",
            };
            match op {
                AtomicOp::CmpXchg => {
                    let r0 = if size == Size::DW { "r0" } else { "w0" };
                    format!("{r0} = atomic{bits}_cmpxchg({ptr}, {r0}, {reg})")
                }
                AtomicOp::Xchg => format!("{reg} = atomic{bits}_xchg({ptr}, {reg})"),
                _ if fetch => format!("{reg} = atomic{bits}_fetch_{name}({ptr}, {reg})"),
                _ => {
                    let sym = match op {
                        AtomicOp::Add => "+=",
                        AtomicOp::Or => "|=",
                        AtomicOp::And => "&=",
                        _ => "^=",
                    };
                    format!("lock *{ptr} {sym} {reg}")
                }
            }
        }
        Instruction::Ja { off, long } => {
            let g = if long { "gotol" } else { "goto" };
            format!("{g} pc{}", rel(off.into()))
        }
        Instruction::Jump {
            width,
            cond,
            dst,
            src,
            off,
        } => {
            let sym = match cond {
                JmpCond::Eq => "==",
                JmpCond::Gt => ">",
                JmpCond::Ge => ">=",
                JmpCond::Set => "&",
                JmpCond::Ne => "!=",
                JmpCond::Sgt => "s>",
                JmpCond::Sge => "s>=",
                JmpCond::Lt => "<",
                JmpCond::Le => "<=",
                JmpCond::Slt => "s<",
                JmpCond::Sle => "s<=",
            };
            let s = match src {
                Operand::Reg(r) => reg_c(width, r),
                Operand::Imm(i) => format!("{:#x}", i as u32),
            };
            format!(
                "if {} {sym} {s} goto pc{}",
                reg_c(width, dst),
                rel(off.into())
            )
        }
        Instruction::Call(CallTarget::Helper(id)) => match helper_name(id) {
            Some(name) => format!("call {name}#{id}"),
            None => format!("call #{id}"),
        },
        Instruction::Call(CallTarget::Local(off)) => format!("call pc{}", rel(off.into())),
        Instruction::Call(CallTarget::Kfunc(id)) => format!("call kernel-function#{id}"),
        Instruction::Callx { reg } => format!("callx r{reg}"),
        Instruction::Exit => "exit".to_string(),
    }
}

fn imm64(imm: i32, next_imm: i32) -> u64 {
    u64::from(imm as u32) | (u64::from(next_imm as u32) << 32)
}

fn mem_asm(reg: u8, off: i16) -> String {
    if off == 0 {
        format!("[%r{reg}]")
    } else {
        format!("[%r{reg}{off:+}]")
    }
}

fn suffix32(width: Width) -> &'static str {
    match width {
        Width::W32 => "32",
        Width::W64 => "",
    }
}

fn size_asm(size: Size) -> &'static str {
    match size {
        Size::B => "b",
        Size::H => "h",
        Size::W => "w",
        Size::DW => "dw",
    }
}

fn operand_asm(src: Operand) -> String {
    match src {
        Operand::Reg(r) => format!("%r{r}"),
        Operand::Imm(i) => i.to_string(),
    }
}

/// The assembler-syntax text of one instruction (relative offsets, no labels).
pub fn format_asm(ins: &Instruction) -> String {
    match *ins {
        Instruction::Alu {
            width,
            op,
            dst,
            src,
        } => {
            let name = match op {
                AluOp::Add => "add",
                AluOp::Sub => "sub",
                AluOp::Mul => "mul",
                AluOp::Div => "div",
                AluOp::SDiv => "sdiv",
                AluOp::Or => "or",
                AluOp::And => "and",
                AluOp::Lsh => "lsh",
                AluOp::Rsh => "rsh",
                AluOp::Mod => "mod",
                AluOp::SMod => "smod",
                AluOp::Xor => "xor",
                AluOp::Mov => "mov",
                AluOp::Arsh => "arsh",
            };
            format!("{name}{} %r{dst}, {}", suffix32(width), operand_asm(src))
        }
        Instruction::Neg { width, dst } => format!("neg{} %r{dst}", suffix32(width)),
        Instruction::MovSx {
            width,
            dst,
            src,
            bits,
        } => {
            let w = match width {
                Width::W32 => 32,
                Width::W64 => 64,
            };
            format!("movsx{bits}{w} %r{dst}, %r{src}")
        }
        Instruction::Endian { kind, bits, dst } => {
            let k = match kind {
                ByteSwap::ToLe => "le",
                ByteSwap::ToBe => "be",
                ByteSwap::Swap => "bswap",
            };
            format!("{k}{bits} %r{dst}")
        }
        Instruction::LoadImm64 {
            dst,
            kind,
            imm,
            next_imm,
        } => match kind {
            LddwKind::Imm => format!("lddw %r{dst}, {:#x}", imm64(imm, next_imm)),
            LddwKind::MapFd => format!("lddw %r{dst}, map_fd {imm}"),
            LddwKind::MapValue => format!("lddw %r{dst}, map_value {imm}, {next_imm}"),
            LddwKind::BtfId => format!("lddw %r{dst}, btf_id {imm}"),
            LddwKind::Func => format!("lddw %r{dst}, func {}", rel(imm.into())),
            LddwKind::MapIdx => format!("lddw %r{dst}, map_idx {imm}"),
            LddwKind::MapIdxValue => format!("lddw %r{dst}, map_idx_value {imm}, {next_imm}"),
        },
        Instruction::Load {
            size,
            sign_extend,
            dst,
            src,
            off,
        } => {
            let s = if sign_extend { "s" } else { "" };
            format!("ldx{s}{} %r{dst}, {}", size_asm(size), mem_asm(src, off))
        }
        Instruction::Store {
            size,
            dst,
            off,
            src,
        } => {
            let x = if matches!(src, Operand::Reg(_)) {
                "x"
            } else {
                ""
            };
            format!(
                "st{x}{} {}, {}",
                size_asm(size),
                mem_asm(dst, off),
                operand_asm(src)
            )
        }
        Instruction::Atomic {
            size,
            op,
            fetch,
            dst,
            src,
            off,
        } => {
            let w = if size == Size::W { "32" } else { "" };
            let (f, name) = match op {
                AtomicOp::Add => (fetch, "add"),
                AtomicOp::Or => (fetch, "or"),
                AtomicOp::And => (fetch, "and"),
                AtomicOp::Xor => (fetch, "xor"),
                AtomicOp::Xchg => (false, "xchg"),
                AtomicOp::CmpXchg => (false, "cmpxchg"),
            };
            let f = if f { "fetch " } else { "" };
            format!("lock {f}{name}{w} {}, %r{src}", mem_asm(dst, off))
        }
        Instruction::Ja { off, long } => {
            let m = if long { "ja32" } else { "ja" };
            format!("{m} {}", rel(off.into()))
        }
        Instruction::Jump {
            width,
            cond,
            dst,
            src,
            off,
        } => {
            let name = match cond {
                JmpCond::Eq => "jeq",
                JmpCond::Gt => "jgt",
                JmpCond::Ge => "jge",
                JmpCond::Set => "jset",
                JmpCond::Ne => "jne",
                JmpCond::Sgt => "jsgt",
                JmpCond::Sge => "jsge",
                JmpCond::Lt => "jlt",
                JmpCond::Le => "jle",
                JmpCond::Slt => "jslt",
                JmpCond::Sle => "jsle",
            };
            format!(
                "{name}{} %r{dst}, {}, {}",
                suffix32(width),
                operand_asm(src),
                rel(off.into())
            )
        }
        Instruction::Call(CallTarget::Helper(id)) => format!("call {id}"),
        Instruction::Call(CallTarget::Local(off)) => format!("call local {}", rel(off.into())),
        Instruction::Call(CallTarget::Kfunc(id)) => format!("call kfunc {id}"),
        Instruction::Callx { reg } => format!("call %r{reg}"),
        Instruction::Exit => "exit".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    #[test]
    fn bpftool_lines() {
        let p = assemble(
            "mov %r0, 1\nldxdw %r0, [%r1+2]\njeq %r1, 5, +1\nlock fetch add [%r10-8], %r1\ncall 1\nexit",
        )
        .expect("assembles");
        let text = disassemble_with(&p, Syntax::Bpftool, &|id| (id == 1).then_some("map_lookup"))
            .expect("decodes");
        assert_eq!(
            text,
            "0: (b7) r0 = 1\n1: (79) r0 = *(u64 *)(r1 +2)\n2: (15) if r1 == 0x5 goto pc+1\n\
             3: (db) r1 = atomic64_fetch_add((u64 *)(r10 -8), r1)\n4: (85) call map_lookup#1\n\
             5: (95) exit\n"
        );
    }

    #[test]
    fn lddw_counts_two_slots() {
        let p = assemble("lddw %r0, 0x1122334455667788\nexit").expect("assembles");
        let text = disassemble(&p).expect("decodes");
        assert_eq!(text, "0: (18) r0 = 0x1122334455667788\n2: (95) exit\n");
    }

    #[test]
    fn asm_syntax_round_trips() {
        let src = "mov32 %r0, -1\nsdiv %r0, %r1\nmovsx1632 %r2, %r3\nldxsb %r0, [%r1-3]\n\
                   stw [%r10-4], 7\nlock cmpxchg32 [%r10-8], %r1\nja32 -1\ncall local +1\n\
                   call %r2\nbswap64 %r0\nlddw %r1, map_idx_value 2, 8\nexit";
        let bytes = assemble(src).expect("assembles");
        let text = disassemble_asm(&bytes).expect("decodes");
        assert_eq!(assemble(&text).expect("reassembles"), bytes);
    }
}
