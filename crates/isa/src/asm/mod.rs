//! Assembler for the text syntax of the bpf_conformance `.data` files.
//!
//! One instruction per line, `#` starts a comment, `name:` defines a label (optionally
//! followed by an instruction on the same line). Operands are separated by commas and/or
//! spaces:
//!
//! ```text
//! mov32 %r0, -1            # ALU: add sub mul div sdiv mod smod or and xor lsh rsh arsh mov
//! ldxdw %r0, [%r1+2]       # loads: ldx{b,h,w,dw}, sign-extending ldxs{b,h,w}
//! stxdw [%r10-8], %r0      # stores: st{b,h,w,dw} (immediate) and stx{b,h,w,dw}
//! lddw %r0, 0x1122334455667788
//! be16 %r0                 # le16/32/64, be16/32/64, bswap16/32/64 (alias swap16/32/64)
//! movsx1632 %r0, %r1       # movsx{8,16}{32,64}, movsx3264
//! jne %r0, %r1, exit       # labels; `exit` names the first `exit` unless defined
//! ja +2                    # relative offsets; `ja32` uses the 32-bit form
//! call 5                   # helper; `call local f`, `call %r2` (callx)
//! lock fetch add [%r10-8], %r1   # also and/or/xor/xchg/cmpxchg, `32` suffix
//! ```
//!
//! gpubpf extensions (so that every decodable program can be written as text):
//! `call helper N`, `call kfunc N` (alias `call runtime N`), `callx %rN`,
//! `lddw %rN, map_fd N`, `map_value N, OFF`, `btf_id N`, `func LABEL|+N`, `map_idx N`,
//! `map_idx_value N, OFF`.
//!
//! Errors are values ([`AsmError`]) carrying the 1-based line and column.

mod mnemonic;
mod operand;

use std::collections::HashMap;

use crate::insn::{CallTarget, Insn, Instruction, LddwKind};

/// An assembly error at a 1-based `line` and `column`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {kind}")]
pub struct AsmError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column (characters) of the offending token.
    pub column: usize,
    /// What went wrong.
    pub kind: AsmErrorKind,
}

/// The kinds of assembly errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsmErrorKind {
    #[error("unknown mnemonic `{mnemonic}`")]
    UnknownMnemonic { mnemonic: String },
    #[error("`{mnemonic}` takes {expected} operand(s), found {found}")]
    OperandCount {
        mnemonic: String,
        expected: &'static str,
        found: usize,
    },
    #[error("invalid register `{text}` (expected %r0..%r10)")]
    InvalidRegister { text: String },
    #[error("invalid number `{text}`")]
    InvalidNumber { text: String },
    #[error("immediate `{text}` does not fit in {bits} bits")]
    ImmediateOutOfRange { text: String, bits: u32 },
    #[error("offset `{text}` does not fit in 16 bits")]
    OffsetOutOfRange { text: String },
    #[error("invalid memory operand `{text}` (expected `[%rN]`, `[%rN+OFF]` or `[%rN-OFF]`)")]
    InvalidMemoryOperand { text: String },
    #[error("invalid jump target `{text}` (expected a label, `+N` or `-N`)")]
    InvalidJumpTarget { text: String },
    #[error("invalid label name `{label}`")]
    InvalidLabelName { label: String },
    #[error("undefined label `{label}`")]
    UndefinedLabel { label: String },
    #[error("duplicate label `{label}` (first defined on line {previous_line})")]
    DuplicateLabel { label: String, previous_line: usize },
    #[error("target `{label}` is {offset} slots away, out of range for this instruction")]
    TargetOutOfRange { label: String, offset: i64 },
    #[error("invalid `{mnemonic}` operation `{op}`")]
    InvalidOperation { mnemonic: String, op: String },
    #[error("unexpected `{text}`")]
    Unexpected { text: String },
}

/// A token of a line with its 1-based column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tok<'a> {
    pub text: &'a str,
    pub col: usize,
}

/// A label reference waiting for resolution.
#[derive(Debug, Clone)]
pub(crate) struct LabelRef {
    pub name: String,
    pub col: usize,
}

/// One assembled instruction before label resolution.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub ins: Instruction,
    pub target: Option<LabelRef>,
}

/// Assembles `source` into instruction slots.
pub fn assemble(source: &str) -> Result<Vec<Insn>, AsmError> {
    let program = assemble_instructions(source)?;
    Ok(crate::insn::encode_program(&program))
}

/// Assembles `source` into decoded instructions (labels resolved).
pub fn assemble_instructions(source: &str) -> Result<Vec<Instruction>, AsmError> {
    let mut items: Vec<(usize, Pending)> = Vec::new();
    let mut labels: HashMap<String, (usize, usize)> = HashMap::new();
    let mut first_exit: Option<usize> = None;
    let mut slot = 0usize;

    for (idx, raw_line) in source.lines().enumerate() {
        let line_no = idx.saturating_add(1);
        let err = |col: usize, kind: AsmErrorKind| AsmError {
            line: line_no,
            column: col,
            kind,
        };
        let code = raw_line.split('#').next().unwrap_or("");
        let mut toks = tokenize(code);
        if toks.is_empty() {
            continue;
        }
        if let Some(name) = toks[0].text.strip_suffix(':') {
            if !operand::is_label_name(name) {
                return Err(err(
                    toks[0].col,
                    AsmErrorKind::InvalidLabelName {
                        label: name.to_string(),
                    },
                ));
            }
            if let Some((prev, _)) = labels.get(name) {
                return Err(err(
                    toks[0].col,
                    AsmErrorKind::DuplicateLabel {
                        label: name.to_string(),
                        previous_line: *prev,
                    },
                ));
            }
            labels.insert(name.to_string(), (line_no, slot));
            toks.remove(0);
            if toks.is_empty() {
                continue;
            }
        }
        let pending = mnemonic::parse_line(&toks).map_err(|(col, kind)| err(col, kind))?;
        if matches!(pending.ins, Instruction::Exit) && first_exit.is_none() {
            first_exit = Some(slot);
        }
        let n = pending.ins.slots();
        items.push((line_no, pending));
        slot = slot.saturating_add(n);
    }

    let mut out = Vec::with_capacity(items.len());
    let mut slot = 0usize;
    for (line, p) in items {
        let mut ins = p.ins;
        if let Some(target) = p.target {
            let dest = match labels.get(&target.name) {
                Some((_, s)) => *s,
                None if target.name == "exit" && first_exit.is_some() => {
                    first_exit.unwrap_or_default()
                }
                None => {
                    return Err(AsmError {
                        line,
                        column: target.col,
                        kind: AsmErrorKind::UndefinedLabel { label: target.name },
                    })
                }
            };
            let offset = (dest as i64).wrapping_sub(slot as i64).wrapping_sub(1);
            ins = with_offset(ins, offset).ok_or_else(|| AsmError {
                line,
                column: target.col,
                kind: AsmErrorKind::TargetOutOfRange {
                    label: target.name.clone(),
                    offset,
                },
            })?;
        }
        slot = slot.saturating_add(ins.slots());
        out.push(ins);
    }
    Ok(out)
}

/// Sets the resolved relative offset of a jump, local call or `lddw func`.
fn with_offset(ins: Instruction, offset: i64) -> Option<Instruction> {
    Some(match ins {
        Instruction::Ja { long: true, .. } => Instruction::Ja {
            off: i32::try_from(offset).ok()?,
            long: true,
        },
        Instruction::Ja { long: false, .. } => Instruction::Ja {
            off: i16::try_from(offset).ok()?.into(),
            long: false,
        },
        Instruction::Jump {
            width,
            cond,
            dst,
            src,
            ..
        } => Instruction::Jump {
            width,
            cond,
            dst,
            src,
            off: i16::try_from(offset).ok()?,
        },
        Instruction::Call(CallTarget::Local(_)) => {
            Instruction::Call(CallTarget::Local(i32::try_from(offset).ok()?))
        }
        Instruction::LoadImm64 {
            dst,
            kind: LddwKind::Func,
            next_imm,
            ..
        } => Instruction::LoadImm64 {
            dst,
            kind: LddwKind::Func,
            imm: i32::try_from(offset).ok()?,
            next_imm,
        },
        _ => return None,
    })
}

/// Splits a line (comment already removed) into tokens at whitespace and commas; a memory
/// operand `[ ... ]` stays one token even when it contains spaces.
fn tokenize(line: &str) -> Vec<Tok<'_>> {
    let mut toks = Vec::new();
    let mut start: Option<usize> = None;
    let mut depth = 0usize;
    let col_of = |byte: usize| line.get(..byte).map_or(1, |s| s.chars().count() + 1);
    let mut cols = Vec::new();
    for (i, c) in line.char_indices() {
        let sep = (c.is_whitespace() || c == ',') && depth == 0;
        if sep {
            if let Some(s) = start.take() {
                cols.push((s, i));
            }
            continue;
        }
        if start.is_none() {
            start = Some(i);
        }
        if c == '[' {
            depth = depth.saturating_add(1);
        } else if c == ']' {
            depth = depth.saturating_sub(1);
        }
    }
    if let Some(s) = start {
        cols.push((s, line.len()));
    }
    for (s, e) in cols {
        if let Some(text) = line.get(s..e) {
            toks.push(Tok {
                text,
                col: col_of(s),
            });
        }
    }
    toks
}

#[cfg(test)]
mod tests;
