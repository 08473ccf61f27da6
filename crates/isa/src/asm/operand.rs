//! Operand parsing: registers, immediates, memory operands and jump targets.

use super::{AsmErrorKind, LabelRef, Tok};
use crate::insn::{Operand, NUM_REGS};

/// A parse failure: column and kind.
pub(crate) type PResult<T> = Result<T, (usize, AsmErrorKind)>;

/// Parses `%rN` (N in 0..=10).
pub(crate) fn register(t: Tok<'_>) -> PResult<u8> {
    let bad = || {
        (
            t.col,
            AsmErrorKind::InvalidRegister {
                text: t.text.to_string(),
            },
        )
    };
    let digits = t.text.strip_prefix("%r").ok_or_else(bad)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 2 {
        return Err(bad());
    }
    let n: u8 = digits.parse().map_err(|_| bad())?;
    if n >= NUM_REGS {
        return Err(bad());
    }
    Ok(n)
}

/// Whether the token looks like a register (`%...`).
pub(crate) fn is_register(t: Tok<'_>) -> bool {
    t.text.starts_with('%')
}

/// A parsed integer literal: its value and whether it was written in hexadecimal.
struct Literal {
    value: i128,
    hex: bool,
}

fn literal(text: &str) -> Option<Literal> {
    let (neg, rest) = match text.as_bytes().first()? {
        b'-' => (true, text.get(1..)?),
        b'+' => (false, text.get(1..)?),
        _ => (false, text),
    };
    let (hex, digits) = match rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
        Some(d) => (true, d),
        None => (false, rest),
    };
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let magnitude = if hex {
        u128::from_str_radix(digits, 16).ok()?
    } else {
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u128>().ok()?
    };
    let magnitude = i128::try_from(magnitude).ok()?;
    Some(Literal {
        value: if neg {
            magnitude.checked_neg()?
        } else {
            magnitude
        },
        hex,
    })
}

fn number_error(t: Tok<'_>) -> (usize, AsmErrorKind) {
    (
        t.col,
        AsmErrorKind::InvalidNumber {
            text: t.text.to_string(),
        },
    )
}

/// Parses a 32-bit immediate: decimal values must fit `i32`; hexadecimal values may also
/// be written as their unsigned 32-bit pattern (`0x80000000`).
pub(crate) fn imm32(t: Tok<'_>) -> PResult<i32> {
    let lit = literal(t.text).ok_or_else(|| number_error(t))?;
    if let Ok(v) = i32::try_from(lit.value) {
        return Ok(v);
    }
    if lit.hex {
        if let Ok(v) = u32::try_from(lit.value) {
            return Ok(v as i32);
        }
    }
    Err((
        t.col,
        AsmErrorKind::ImmediateOutOfRange {
            text: t.text.to_string(),
            bits: 32,
        },
    ))
}

/// Parses a 64-bit immediate (signed or unsigned range, decimal or hexadecimal).
pub(crate) fn imm64(t: Tok<'_>) -> PResult<u64> {
    let lit = literal(t.text).ok_or_else(|| number_error(t))?;
    if let Ok(v) = i64::try_from(lit.value) {
        return Ok(v as u64);
    }
    u64::try_from(lit.value).map_err(|_| {
        (
            t.col,
            AsmErrorKind::ImmediateOutOfRange {
                text: t.text.to_string(),
                bits: 64,
            },
        )
    })
}

/// Parses a register or a 32-bit immediate.
pub(crate) fn reg_or_imm(t: Tok<'_>) -> PResult<Operand> {
    if is_register(t) {
        Ok(Operand::Reg(register(t)?))
    } else {
        Ok(Operand::Imm(imm32(t)?))
    }
}

/// Parses `[%rN]`, `[%rN+OFF]` or `[%rN-OFF]` (spaces allowed inside the brackets).
pub(crate) fn memory(t: Tok<'_>) -> PResult<(u8, i16)> {
    let bad = || {
        (
            t.col,
            AsmErrorKind::InvalidMemoryOperand {
                text: t.text.to_string(),
            },
        )
    };
    let inner: String = t
        .text
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(bad)?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let split = inner.find(['+', '-']);
    let (reg_text, off_text) = match split {
        Some(i) => (inner.get(..i).unwrap_or(""), inner.get(i..)),
        None => (inner.as_str(), None),
    };
    let reg = register(Tok {
        text: reg_text,
        col: t.col.saturating_add(1),
    })?;
    let off = match off_text {
        None => 0,
        Some(o) => {
            let lit = literal(o).ok_or_else(bad)?;
            i16::try_from(lit.value).map_err(|_| {
                (
                    t.col,
                    AsmErrorKind::OffsetOutOfRange {
                        text: o.to_string(),
                    },
                )
            })?
        }
    };
    Ok((reg, off))
}

/// A jump target: a relative offset or a label to resolve later.
pub(crate) enum Target {
    Offset(i64),
    Label(LabelRef),
}

/// Parses `+N`, `-N` or a label name.
pub(crate) fn target(t: Tok<'_>) -> PResult<Target> {
    if t.text.starts_with(['+', '-']) {
        let lit = literal(t.text).ok_or_else(|| {
            (
                t.col,
                AsmErrorKind::InvalidJumpTarget {
                    text: t.text.to_string(),
                },
            )
        })?;
        let v = i64::try_from(lit.value).map_err(|_| {
            (
                t.col,
                AsmErrorKind::OffsetOutOfRange {
                    text: t.text.to_string(),
                },
            )
        })?;
        return Ok(Target::Offset(v));
    }
    if is_label_name(t.text) {
        return Ok(Target::Label(LabelRef {
            name: t.text.to_string(),
            col: t.col,
        }));
    }
    Err((
        t.col,
        AsmErrorKind::InvalidJumpTarget {
            text: t.text.to_string(),
        },
    ))
}

/// Whether `s` is a valid label name: `[A-Za-z_.][A-Za-z0-9_.]*`.
pub(crate) fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '.' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}
