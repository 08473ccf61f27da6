//! Mnemonic table: one line's tokens → one instruction.

use super::operand::{self, PResult, Target};
use super::{AsmErrorKind, Pending, Tok};
use crate::insn::{
    AluOp, AtomicOp, ByteSwap, CallTarget, Instruction, JmpCond, LddwKind, Operand, Size, Width,
};

fn count_error(m: Tok<'_>, expected: &'static str, found: usize) -> (usize, AsmErrorKind) {
    (
        m.col,
        AsmErrorKind::OperandCount {
            mnemonic: m.text.to_string(),
            expected,
            found,
        },
    )
}

fn expect<'a, 'b>(
    m: Tok<'a>,
    ops: &'b [Tok<'a>],
    n: usize,
    expected: &'static str,
) -> PResult<&'b [Tok<'a>]> {
    if ops.len() == n {
        Ok(ops)
    } else {
        Err(count_error(m, expected, ops.len()))
    }
}

fn plain(ins: Instruction) -> PResult<Pending> {
    Ok(Pending { ins, target: None })
}

fn alu_op(name: &str) -> Option<AluOp> {
    Some(match name {
        "add" => AluOp::Add,
        "sub" => AluOp::Sub,
        "mul" => AluOp::Mul,
        "div" => AluOp::Div,
        "sdiv" => AluOp::SDiv,
        "or" => AluOp::Or,
        "and" => AluOp::And,
        "lsh" => AluOp::Lsh,
        "rsh" => AluOp::Rsh,
        "mod" => AluOp::Mod,
        "smod" => AluOp::SMod,
        "xor" => AluOp::Xor,
        "mov" => AluOp::Mov,
        "arsh" => AluOp::Arsh,
        _ => return None,
    })
}

fn jmp_cond(name: &str) -> Option<JmpCond> {
    Some(match name {
        "jeq" => JmpCond::Eq,
        "jgt" => JmpCond::Gt,
        "jge" => JmpCond::Ge,
        "jset" => JmpCond::Set,
        "jne" => JmpCond::Ne,
        "jsgt" => JmpCond::Sgt,
        "jsge" => JmpCond::Sge,
        "jlt" => JmpCond::Lt,
        "jle" => JmpCond::Le,
        "jslt" => JmpCond::Slt,
        "jsle" => JmpCond::Sle,
        _ => return None,
    })
}

fn size_suffix(s: &str) -> Option<Size> {
    Some(match s {
        "b" => Size::B,
        "h" => Size::H,
        "w" => Size::W,
        "dw" => Size::DW,
        _ => return None,
    })
}

/// Splits a `32` suffix off a mnemonic: `("add", W32)` for `add32`.
fn width_of(name: &str) -> (&str, Width) {
    match name.strip_suffix("32") {
        Some(base) => (base, Width::W32),
        None => (name, Width::W64),
    }
}

/// Parses one instruction from its tokens (`toks[0]` is the mnemonic).
pub(crate) fn parse_line(toks: &[Tok<'_>]) -> PResult<Pending> {
    let Some((&m, ops)) = toks.split_first() else {
        return Err((
            1,
            AsmErrorKind::Unexpected {
                text: String::new(),
            },
        ));
    };
    let name = m.text;
    let unknown = || {
        (
            m.col,
            AsmErrorKind::UnknownMnemonic {
                mnemonic: name.to_string(),
            },
        )
    };

    match name {
        "exit" => {
            expect(m, ops, 0, "0")?;
            return plain(Instruction::Exit);
        }
        "lddw" => return lddw(m, ops),
        "call" => return call(m, ops),
        "callx" => {
            let o = expect(m, ops, 1, "1")?;
            return plain(Instruction::Callx {
                reg: operand::register(o[0])?,
            });
        }
        "lock" => return lock(m, ops),
        "ja" | "ja32" | "gotol" => {
            let o = expect(m, ops, 1, "1")?;
            let long = name != "ja";
            return Ok(match operand::target(o[0])? {
                Target::Offset(v) => {
                    let off = if long {
                        i32::try_from(v).ok()
                    } else {
                        i16::try_from(v).ok().map(i32::from)
                    };
                    let off = off.ok_or_else(|| offset_range(o[0]))?;
                    Pending {
                        ins: Instruction::Ja { off, long },
                        target: None,
                    }
                }
                Target::Label(l) => Pending {
                    ins: Instruction::Ja { off: 0, long },
                    target: Some(l),
                },
            });
        }
        _ => {}
    }

    // Byte swaps: le16, be32, bswap64, swap16.
    for (prefix, kind) in [
        ("le", ByteSwap::ToLe),
        ("be", ByteSwap::ToBe),
        ("bswap", ByteSwap::Swap),
        ("swap", ByteSwap::Swap),
    ] {
        if let Some(bits) = name.strip_prefix(prefix) {
            let bits = match bits {
                "16" => 16,
                "32" => 32,
                "64" => 64,
                _ => continue,
            };
            let o = expect(m, ops, 1, "1")?;
            return plain(Instruction::Endian {
                kind,
                bits,
                dst: operand::register(o[0])?,
            });
        }
    }

    // Sign-extending moves: movsx832, movsx1632, movsx864, movsx1664, movsx3264.
    if let Some(rest) = name.strip_prefix("movsx") {
        let (bits, width) = match rest {
            "832" => (8, Width::W32),
            "1632" => (16, Width::W32),
            "864" => (8, Width::W64),
            "1664" => (16, Width::W64),
            "3264" => (32, Width::W64),
            _ => return Err(unknown()),
        };
        let o = expect(m, ops, 2, "2")?;
        return plain(Instruction::MovSx {
            width,
            dst: operand::register(o[0])?,
            src: operand::register(o[1])?,
            bits,
        });
    }

    // Loads: ldx{b,h,w,dw}, ldxs{b,h,w}.
    if let Some(rest) = name.strip_prefix("ldx") {
        let (sign_extend, sz) = match rest.strip_prefix('s') {
            Some(s) if size_suffix(s).is_some_and(|z| z != Size::DW) => (true, s),
            _ => (false, rest),
        };
        let size = size_suffix(sz).ok_or_else(unknown)?;
        let o = expect(m, ops, 2, "2")?;
        let dst = operand::register(o[0])?;
        let (src, off) = operand::memory(o[1])?;
        return plain(Instruction::Load {
            size,
            sign_extend,
            dst,
            src,
            off,
        });
    }

    // Stores: stx{b,h,w,dw} and st{b,h,w,dw}.
    if let Some(rest) = name.strip_prefix("st") {
        let (is_reg, sz) = match rest.strip_prefix('x') {
            Some(s) => (true, s),
            None => (false, rest),
        };
        let size = size_suffix(sz).ok_or_else(unknown)?;
        let o = expect(m, ops, 2, "2")?;
        let (dst, off) = operand::memory(o[0])?;
        let src = if is_reg {
            Operand::Reg(operand::register(o[1])?)
        } else {
            Operand::Imm(operand::imm32(o[1])?)
        };
        return plain(Instruction::Store {
            size,
            dst,
            off,
            src,
        });
    }

    let (base, width) = width_of(name);
    if base == "neg" {
        let o = expect(m, ops, 1, "1")?;
        return plain(Instruction::Neg {
            width,
            dst: operand::register(o[0])?,
        });
    }
    if let Some(op) = alu_op(base) {
        let o = expect(m, ops, 2, "2")?;
        return plain(Instruction::Alu {
            width,
            op,
            dst: operand::register(o[0])?,
            src: operand::reg_or_imm(o[1])?,
        });
    }
    if let Some(cond) = jmp_cond(base) {
        let o = expect(m, ops, 3, "3")?;
        let dst = operand::register(o[0])?;
        let src = operand::reg_or_imm(o[1])?;
        let (off, target) = match operand::target(o[2])? {
            Target::Offset(v) => (i16::try_from(v).map_err(|_| offset_range(o[2]))?, None),
            Target::Label(l) => (0, Some(l)),
        };
        return Ok(Pending {
            ins: Instruction::Jump {
                width,
                cond,
                dst,
                src,
                off,
            },
            target,
        });
    }
    Err(unknown())
}

fn offset_range(t: Tok<'_>) -> (usize, AsmErrorKind) {
    (
        t.col,
        AsmErrorKind::OffsetOutOfRange {
            text: t.text.to_string(),
        },
    )
}

fn lddw(m: Tok<'_>, ops: &[Tok<'_>]) -> PResult<Pending> {
    if ops.len() < 2 {
        return Err(count_error(m, "2 to 4", ops.len()));
    }
    let dst = operand::register(ops[0])?;
    let kind_tok = ops[1];
    let kind = match kind_tok.text {
        "map_fd" => Some((LddwKind::MapFd, false)),
        "map_value" => Some((LddwKind::MapValue, true)),
        "btf_id" => Some((LddwKind::BtfId, false)),
        "func" => Some((LddwKind::Func, false)),
        "map_idx" => Some((LddwKind::MapIdx, false)),
        "map_idx_value" => Some((LddwKind::MapIdxValue, true)),
        _ => None,
    };
    let Some((kind, has_next)) = kind else {
        expect(m, ops, 2, "2")?;
        let v = operand::imm64(ops[1])?;
        return plain(Instruction::LoadImm64 {
            dst,
            kind: LddwKind::Imm,
            imm: v as u32 as i32,
            next_imm: (v >> 32) as u32 as i32,
        });
    };
    let o = if has_next {
        expect(m, ops, 4, "4")?
    } else {
        expect(m, ops, 3, "3")?
    };
    let next_imm = if has_next { operand::imm32(o[3])? } else { 0 };
    if kind == LddwKind::Func {
        return Ok(match operand::target(o[2])? {
            Target::Offset(v) => Pending {
                ins: Instruction::LoadImm64 {
                    dst,
                    kind,
                    imm: i32::try_from(v).map_err(|_| offset_range(o[2]))?,
                    next_imm,
                },
                target: None,
            },
            Target::Label(l) => Pending {
                ins: Instruction::LoadImm64 {
                    dst,
                    kind,
                    imm: 0,
                    next_imm,
                },
                target: Some(l),
            },
        });
    }
    plain(Instruction::LoadImm64 {
        dst,
        kind,
        imm: operand::imm32(o[2])?,
        next_imm,
    })
}

fn call(m: Tok<'_>, ops: &[Tok<'_>]) -> PResult<Pending> {
    match ops {
        [t] if operand::is_register(*t) => plain(Instruction::Callx {
            reg: operand::register(*t)?,
        }),
        [t] => plain(Instruction::Call(CallTarget::Helper(operand::imm32(*t)?))),
        [mode, t] => match mode.text {
            "helper" => plain(Instruction::Call(CallTarget::Helper(operand::imm32(*t)?))),
            "kfunc" | "runtime" => plain(Instruction::Call(CallTarget::Kfunc(operand::imm32(*t)?))),
            "local" => Ok(match operand::target(*t)? {
                Target::Offset(v) => Pending {
                    ins: Instruction::Call(CallTarget::Local(
                        i32::try_from(v).map_err(|_| offset_range(*t))?,
                    )),
                    target: None,
                },
                Target::Label(l) => Pending {
                    ins: Instruction::Call(CallTarget::Local(0)),
                    target: Some(l),
                },
            }),
            other => Err((
                mode.col,
                AsmErrorKind::InvalidOperation {
                    mnemonic: "call".to_string(),
                    op: other.to_string(),
                },
            )),
        },
        _ => Err(count_error(m, "1 or 2", ops.len())),
    }
}

/// `lock [fetch] OP[32] [%rD+OFF], %rS`.
fn lock(m: Tok<'_>, ops: &[Tok<'_>]) -> PResult<Pending> {
    let (fetch_kw, rest) = match ops.split_first() {
        Some((f, rest)) if f.text == "fetch" => (true, rest),
        _ => (false, ops),
    };
    let [op_tok, mem, src] = rest else {
        return Err(count_error(m, "3 or 4", ops.len()));
    };
    let (base, width) = width_of(op_tok.text);
    let size = match width {
        Width::W32 => Size::W,
        Width::W64 => Size::DW,
    };
    let bad_op = || {
        (
            op_tok.col,
            AsmErrorKind::InvalidOperation {
                mnemonic: "lock".to_string(),
                op: op_tok.text.to_string(),
            },
        )
    };
    let (op, fetch) = match base {
        "add" => (AtomicOp::Add, fetch_kw),
        "or" => (AtomicOp::Or, fetch_kw),
        "and" => (AtomicOp::And, fetch_kw),
        "xor" => (AtomicOp::Xor, fetch_kw),
        "xchg" => (AtomicOp::Xchg, true),
        "cmpxchg" => (AtomicOp::CmpXchg, true),
        _ => return Err(bad_op()),
    };
    let (dst, off) = operand::memory(*mem)?;
    let src = operand::register(*src)?;
    plain(Instruction::Atomic {
        size,
        op,
        fetch,
        dst,
        src,
        off,
    })
}
