//! Transfer functions of arithmetic instructions, `lddw`, and the per-instruction dispatch.

use gpubpf_isa::{AluOp, CallTarget, Instruction, LddwKind, Operand, Width};

use crate::engine::{rej, Env, Step, R};
use crate::error::ErrorKind;
use crate::scalar::Scalar;
use crate::scalar_alu;
use crate::state::{Reg, RegType, State};
use crate::MapKind;

/// Largest fixed or variable pointer offset (as the kernel's `BPF_MAX_VAR_OFF`).
pub const MAX_VAR_OFF: i64 = 1 << 29;

/// Executes one instruction on `st`.
pub fn step(env: &mut Env<'_>, st: &mut State, pc: usize, ins: &Instruction) -> R<Step> {
    let next = pc + ins.slots();
    match *ins {
        Instruction::Alu {
            width,
            op,
            dst,
            src,
        } => alu(env, st, width, op, dst, src).map(|_| Step::Next(next)),
        Instruction::Neg { width, dst } => {
            let r = read(st, dst)?;
            if r.ty != RegType::Scalar {
                return Err(pointer_op(dst, &r, "negation"));
            }
            *st.reg_mut(dst) = Reg::scalar(scalar_alu::neg(width, &r.val));
            Ok(Step::Next(next))
        }
        Instruction::MovSx {
            width,
            dst,
            src,
            bits,
        } => {
            let r = read(st, src)?;
            if r.ty != RegType::Scalar {
                return Err(pointer_op(src, &r, "sign extension"));
            }
            *st.reg_mut(dst) = Reg::scalar(scalar_alu::movsx(width, bits, &r.val));
            Ok(Step::Next(next))
        }
        Instruction::Endian { kind, bits, dst } => {
            let r = read(st, dst)?;
            if r.ty != RegType::Scalar {
                return Err(pointer_op(dst, &r, "byte swap"));
            }
            *st.reg_mut(dst) = Reg::scalar(scalar_alu::endian(kind, bits, &r.val));
            Ok(Step::Next(next))
        }
        Instruction::LoadImm64 {
            dst,
            kind,
            imm,
            next_imm,
        } => {
            *st.reg_mut(dst) = lddw(env, pc, kind, imm, next_imm)?;
            Ok(Step::Next(next))
        }
        Instruction::Load {
            size,
            sign_extend,
            dst,
            src,
            off,
        } => crate::mem::load(env, st, size, sign_extend, dst, src, off).map(|_| Step::Next(next)),
        Instruction::Store {
            size,
            dst,
            off,
            src,
        } => crate::mem::store(env, st, size, dst, off, src).map(|_| Step::Next(next)),
        Instruction::Atomic {
            size,
            op,
            fetch,
            dst,
            src,
            off,
        } => crate::mem::atomic(env, st, size, op, fetch, dst, src, off).map(|_| Step::Next(next)),
        Instruction::Ja { off, .. } => Ok(Step::Next(target(pc, off.into()))),
        Instruction::Jump {
            width,
            cond,
            dst,
            src,
            off,
        } => crate::branch::cond_jump(env, st, pc, width, cond, dst, src, off),
        Instruction::Call(CallTarget::Helper(id)) => crate::call::helper(env, st, pc, id),
        Instruction::Call(CallTarget::Local(off)) => {
            crate::call::local(env, st, pc, target(pc, off.into()))
        }
        Instruction::Call(CallTarget::Kfunc(_)) | Instruction::Callx { .. } => Err(rej(
            ErrorKind::Unsupported {
                what: "indirect or kernel function call".into(),
            },
            &[],
        )),
        Instruction::Exit => crate::call::exit(env, st, pc),
    }
}

/// `pc + 1 + off` (targets were range-checked by the structural pass).
pub fn target(pc: usize, off: i64) -> usize {
    (pc as i64).saturating_add(1).saturating_add(off).max(0) as usize
}

/// Reads a register that must be initialised.
pub fn read(st: &State, r: u8) -> R<Reg> {
    let v = *st.reg(r);
    if v.ty == RegType::NotInit {
        return Err(rej(ErrorKind::UninitReg { reg: r }, &[r]));
    }
    Ok(v)
}

fn pointer_op(r: u8, reg: &Reg, what: &str) -> crate::engine::Reject {
    rej(
        ErrorKind::PointerArith {
            reg: r,
            detail: format!("{what} of a pointer ({}) prohibited", reg.ty.name()),
        },
        &[r],
    )
}

fn lddw(env: &mut Env<'_>, pc: usize, kind: LddwKind, imm: i32, next_imm: i32) -> R<Reg> {
    let map = |i: i32| -> R<u32> {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < env.maps.len())
            .map(|i| i as u32)
            .ok_or_else(|| {
                rej(
                    ErrorKind::BadMapIndex {
                        index: i.into(),
                        count: env.maps.len(),
                    },
                    &[],
                )
            })
    };
    match kind {
        LddwKind::Imm => Ok(Reg::scalar(Scalar::konst(
            (u64::from(next_imm as u32) << 32) | u64::from(imm as u32),
        ))),
        LddwKind::MapIdx => Ok(Reg::ptr(RegType::MapPtr { map: map(imm)? }, 0)),
        LddwKind::MapIdxValue => {
            let m = map(imm)?;
            let info = &env.maps[m as usize];
            // As Linux (`array_map_direct_value_addr`): the direct-value form names element 0
            // of a single-entry array, i.e. a global; on a larger array it would alias
            // element 0 with lookups of other keys under one identity.
            if info.kind != MapKind::Array || info.max_entries != 1 {
                return Err(rej(
                    ErrorKind::BadMapReference {
                        detail: format!(
                            "direct value access needs a single-entry array map (a global), but \
                             `{}` is {:?} with {} entries",
                            info.name, info.kind, info.max_entries
                        ),
                    },
                    &[],
                ));
            }
            if next_imm < 0 || next_imm as u32 >= info.value_size.max(1) {
                return Err(rej(
                    ErrorKind::BadMapReference {
                        detail: format!(
                            "direct value offset {next_imm} is outside the value of `{}` ({} bytes)",
                            info.name, info.value_size
                        ),
                    },
                    &[],
                ));
            }
            Ok(Reg::ptr(RegType::MapValue { map: m }, next_imm.into()))
        }
        LddwKind::Func => Ok(Reg::ptr(
            RegType::Func {
                pc: target(pc, imm.into()) as u32,
            },
            0,
        )),
        _ => Err(rej(
            ErrorKind::Unsupported {
                what: format!("`lddw` pseudo form {kind:?}"),
            },
            &[],
        )),
    }
}

fn alu(env: &mut Env<'_>, st: &mut State, width: Width, op: AluOp, dst: u8, src: Operand) -> R<()> {
    let (s, sreg) = match src {
        Operand::Reg(r) => (read(st, r)?, Some(r)),
        Operand::Imm(i) => (Reg::scalar(Scalar::konst(i64::from(i) as u64)), None),
    };
    if op == AluOp::Mov {
        let v = match width {
            Width::W64 => {
                let mut v = s;
                if v.ty == RegType::Scalar && !v.val.is_const() {
                    if let Some(r) = sreg {
                        if v.id == 0 {
                            v.id = env.new_id();
                            st.reg_mut(r).id = v.id;
                        }
                    }
                }
                v
            }
            Width::W32 => {
                if s.ty != RegType::Scalar {
                    return Err(rej(
                        ErrorKind::PointerLeak {
                            reg: sreg.unwrap_or(dst),
                            into: "a 32-bit register (partial copy of a pointer)".into(),
                        },
                        &[sreg.unwrap_or(dst)],
                    ));
                }
                Reg::scalar(s.val.zext32())
            }
        };
        *st.reg_mut(dst) = v;
        return Ok(());
    }
    let d = read(st, dst)?;
    let result = match (d.ty.is_pointer(), s.ty.is_pointer()) {
        (false, false) => Reg::scalar(scalar_alu::alu(op, width, &d.val, &s.val)),
        (true, false) => ptr_arith(dst, &d, &s, op, width)?,
        (false, true) => {
            if op == AluOp::Add {
                ptr_arith(sreg.unwrap_or(dst), &s, &d, op, width)?
            } else {
                return Err(rej(
                    ErrorKind::PointerArith {
                        reg: sreg.unwrap_or(dst),
                        detail: format!(
                            "{} with a pointer ({}) as operand prohibited",
                            op_name(op),
                            s.ty.name()
                        ),
                    },
                    &[dst, sreg.unwrap_or(dst)],
                ));
            }
        }
        (true, true) => {
            return Err(rej(
                ErrorKind::PointerArith {
                    reg: dst,
                    detail: format!(
                        "pointer {} pointer prohibited ({} and {})",
                        op_name(op),
                        d.ty.name(),
                        s.ty.name()
                    ),
                },
                &[dst, sreg.unwrap_or(dst)],
            ))
        }
    };
    *st.reg_mut(dst) = result;
    Ok(())
}

fn op_name(op: AluOp) -> &'static str {
    match op {
        AluOp::Add => "addition",
        AluOp::Sub => "subtraction",
        AluOp::Mul => "multiplication",
        AluOp::Div | AluOp::SDiv => "division",
        AluOp::Mod | AluOp::SMod => "modulo",
        AluOp::Or => "bitwise or",
        AluOp::And => "bitwise and",
        AluOp::Xor => "bitwise xor",
        AluOp::Lsh => "left shift",
        AluOp::Rsh => "right shift",
        AluOp::Arsh => "arithmetic right shift",
        AluOp::Mov => "move",
    }
}

/// `ptr (+|-) scalar`.
fn ptr_arith(regno: u8, p: &Reg, s: &Reg, op: AluOp, width: Width) -> R<Reg> {
    let bad = |detail: String| rej(ErrorKind::PointerArith { reg: regno, detail }, &[regno]);
    match p.ty {
        RegType::MapPtr { .. } => {
            return Err(bad("arithmetic on a map handle (map_ptr) prohibited".into()))
        }
        RegType::Func { .. } => {
            return Err(bad("arithmetic on a function address prohibited".into()))
        }
        t if t.is_or_null() => {
            return Err(bad(format!(
                "pointer arithmetic on {} prohibited, null-check it first",
                t.name()
            )))
        }
        _ => {}
    }
    if width == Width::W32 {
        return Err(bad(format!(
            "32-bit arithmetic on a pointer ({}) prohibited",
            p.ty.name()
        )));
    }
    if !matches!(op, AluOp::Add | AluOp::Sub) {
        return Err(bad(format!(
            "{} on a pointer ({}) prohibited",
            op_name(op),
            p.ty.name()
        )));
    }
    let mut r = *p;
    if let Some(c) = s.val.const_value() {
        let c = c as i64;
        let off = if op == AluOp::Add {
            p.off.checked_add(c)
        } else {
            p.off.checked_sub(c)
        };
        match off {
            Some(o) if (-MAX_VAR_OFF..=MAX_VAR_OFF).contains(&o) => r.off = o,
            _ => {
                return Err(bad(format!(
                    "pointer offset {} {} {c} is out of range (at most ±{MAX_VAR_OFF})",
                    p.off,
                    if op == AluOp::Add { "+" } else { "-" }
                )))
            }
        }
        return Ok(r);
    }
    if s.val.smin < -MAX_VAR_OFF || s.val.smax > MAX_VAR_OFF {
        return Err(bad(format!(
            "math between {} pointer and unbounded register {} is not allowed: bound it first \
             (e.g. `if (i >= N) return 0;`)",
            p.ty.name(),
            s.val
        )));
    }
    let aop = if op == AluOp::Add {
        AluOp::Add
    } else {
        AluOp::Sub
    };
    r.val = scalar_alu::alu(aop, Width::W64, &p.val, &s.val);
    if r.val.smin < -MAX_VAR_OFF || r.val.smax > MAX_VAR_OFF {
        return Err(bad(format!(
            "variable offset {} of the {} pointer is out of range",
            r.val,
            p.ty.name()
        )));
    }
    Ok(r)
}
