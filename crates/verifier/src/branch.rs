//! Conditional jumps: decide known outcomes, refine ranges on both branches, and turn
//! or-null pointers into pointers (or NULL) after a null check.

#![deny(clippy::arithmetic_side_effects)]

use gpubpf_isa::{JmpCond, Operand, Width};

use crate::engine::{rej, Env, Point, Step, R};
use crate::error::ErrorKind;
use crate::exec::{read, target};
use crate::scalar::Scalar;
use crate::state::{Reg, RegType, State};
use crate::tnum::Tnum;
use crate::{MapInfo, MapKind};

/// Executes `if dst cond src goto pc+1+off`.
#[allow(clippy::too_many_arguments)]
pub fn cond_jump(
    env: &mut Env<'_>,
    st: &mut State,
    pc: usize,
    width: Width,
    cond: JmpCond,
    dst: u8,
    src: Operand,
    off: i16,
) -> R<Step> {
    let a = read(st, dst)?;
    let (b, sreg) = match src {
        Operand::Reg(r) => (read(st, r)?, Some(r)),
        Operand::Imm(i) => {
            let v = match width {
                Width::W64 => i64::from(i) as u64,
                Width::W32 => u64::from(i as u32),
            };
            (Reg::scalar(Scalar::konst(v)), None)
        }
    };
    let fall_pc = pc.saturating_add(1);
    let taken_pc = target(pc, off.into());
    if a.ty.is_pointer() || b.ty.is_pointer() {
        return pointer_jump(env, st, width, cond, dst, &a, sreg, &b, fall_pc, taken_pc);
    }
    let fall = refine(width, negate(cond), a.val, b.val);
    let taken = refine(width, cond.into(), a.val, b.val);
    // The state the jump starts from is not used again (the engine continues with the
    // states of the step): the last branch built takes it instead of a copy.
    let refined = |s: State, (na, nb): (Scalar, Scalar)| {
        let mut s = s;
        set_scalar(&mut s, dst, &a, na);
        if let Some(r) = sreg {
            set_scalar(&mut s, r, &b, nb);
        }
        s
    };
    Ok(match (fall, taken) {
        (Some(f), Some(t)) => {
            let t = refined(st.clone(), t);
            let f = refined(take(st), f);
            Step::Fork((f, fall_pc, Point::Insn), (t, taken_pc, Point::Insn))
        }
        (Some(f), None) => Step::Goto((refined(take(st), f), fall_pc, Point::Insn)),
        (None, Some(t)) => Step::Goto((refined(take(st), t), taken_pc, Point::Insn)),
        (None, None) => Step::Dead,
    })
}

/// `st`, leaving an empty state (no frames) behind: for a step that ends the use of the
/// state it was given.
fn take(st: &mut State) -> State {
    State {
        frames: std::mem::take(&mut st.frames),
        refs: std::mem::take(&mut st.refs),
    }
}

/// Whether `a` and `b` are known to point into one and the same object, so that comparing
/// them compares offsets only. Ids name objects: equal non-zero ids are copies of one
/// lookup or reservation result. Id 0 names an object only where its type has exactly one:
/// the ctx, the stack of one frame, and the value of a single-entry array reached through a
/// direct-value `lddw` (a global). Anything else (two lookups, even of the same key) may or
/// may not be the same object, so the comparison is not decided statically.
pub fn same_object(a: &Reg, b: &Reg, maps: &[MapInfo]) -> bool {
    if a.ty != b.ty || a.ty.is_or_null() || a.ref_id != b.ref_id || a.id != b.id {
        return false;
    }
    if a.id != 0 {
        return true;
    }
    match a.ty {
        RegType::Ctx | RegType::Stack { .. } => true,
        RegType::MapValue { map } => maps
            .get(map as usize)
            .is_some_and(|m| m.kind == MapKind::Array && m.max_entries == 1),
        _ => false,
    }
}

#[allow(clippy::too_many_arguments)]
fn pointer_jump(
    env: &Env<'_>,
    st: &mut State,
    width: Width,
    cond: JmpCond,
    dst: u8,
    a: &Reg,
    sreg: Option<u8>,
    b: &Reg,
    fall_pc: usize,
    taken_pc: usize,
) -> R<Step> {
    let (preg, p, other) = if a.ty.is_pointer() {
        (dst, a, b)
    } else {
        (sreg.unwrap_or(dst), b, a)
    };
    let null_check =
        width == Width::W64 && matches!(cond, JmpCond::Eq | JmpCond::Ne) && other.is_const(0);
    // Two pointers known to point into the same object ([`same_object`]) at constant
    // offsets (a pointer-increment loop): the outcome follows from the offsets alone, so it
    // is decided statically and reveals nothing about addresses.
    if !null_check
        && width == Width::W64
        && cond != JmpCond::Set
        && same_object(a, b, env.maps)
        && a.val.is_const()
        && b.val.is_const()
    {
        let x = a.off.saturating_add(a.val.var.value as i64);
        let y = b.off.saturating_add(b.val.var.value as i64);
        let taken = match cond {
            JmpCond::Eq => x == y,
            JmpCond::Ne => x != y,
            JmpCond::Gt | JmpCond::Sgt => x > y,
            JmpCond::Ge | JmpCond::Sge => x >= y,
            JmpCond::Lt | JmpCond::Slt => x < y,
            JmpCond::Le | JmpCond::Sle => x <= y,
            JmpCond::Set => false,
        };
        let next = if taken { taken_pc } else { fall_pc };
        return Ok(Step::Goto((take(st), next, Point::Insn)));
    }
    if !null_check {
        return Err(rej(
            ErrorKind::PointerCompare {
                reg: preg,
                ty: p.ty.name().into(),
            },
            &[preg],
        ));
    }
    // `eq_state`: where the pointer is NULL; `ne_state`: where it is not.
    let (eq_state, ne_state) = if p.ty.is_or_null() {
        let id = p.id;
        let mut z = st.clone();
        mark_null(&mut z, id, true);
        let mut nz = take(st);
        mark_null(&mut nz, id, false);
        (Some(z), Some(nz))
    } else {
        (None, Some(take(st)))
    };
    let (taken, fall) = match cond {
        JmpCond::Eq => (eq_state, ne_state),
        _ => (ne_state, eq_state),
    };
    Ok(match (fall, taken) {
        (Some(f), Some(t)) => Step::Fork((f, fall_pc, Point::Insn), (t, taken_pc, Point::Insn)),
        (Some(f), None) => Step::Goto((f, fall_pc, Point::Insn)),
        (None, Some(t)) => Step::Goto((t, taken_pc, Point::Insn)),
        (None, None) => Step::Dead,
    })
}

/// After a null check of the or-null pointer with `id`: every copy becomes NULL (a scalar 0,
/// and its reference is dropped) or a valid pointer.
pub fn mark_null(st: &mut State, id: u32, is_null: bool) {
    if id == 0 {
        return;
    }
    let mut released = 0u32;
    st.for_each_reg(|r| {
        if r.id == id && r.ty.is_or_null() {
            if is_null {
                released = r.ref_id;
                *r = Reg::scalar(Scalar::konst(0));
            } else {
                r.ty = match r.ty {
                    RegType::MapValueOrNull { map } => RegType::MapValue { map },
                    RegType::RingbufMemOrNull { size } => RegType::RingbufMem { size },
                    t => t,
                };
                // The id stays: it identifies the object (two lookups give two objects).
            }
        }
    });
    if released != 0 {
        st.refs.retain(|x| x.id != released);
    }
}

fn negate(c: JmpCond) -> Cond {
    match c {
        JmpCond::Eq => Cond::Ne,
        JmpCond::Ne => Cond::Eq,
        JmpCond::Gt => Cond::Le,
        JmpCond::Ge => Cond::Lt,
        JmpCond::Lt => Cond::Ge,
        JmpCond::Le => Cond::Gt,
        JmpCond::Sgt => Cond::Sle,
        JmpCond::Sge => Cond::Slt,
        JmpCond::Slt => Cond::Sge,
        JmpCond::Sle => Cond::Sgt,
        JmpCond::Set => Cond::NotSet,
    }
}

/// Relations, including the negation of `jset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cond {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Sgt,
    Sge,
    Slt,
    Sle,
    Set,
    NotSet,
}

impl From<JmpCond> for Cond {
    fn from(c: JmpCond) -> Cond {
        match c {
            JmpCond::Eq => Cond::Eq,
            JmpCond::Ne => Cond::Ne,
            JmpCond::Gt => Cond::Gt,
            JmpCond::Ge => Cond::Ge,
            JmpCond::Lt => Cond::Lt,
            JmpCond::Le => Cond::Le,
            JmpCond::Sgt => Cond::Sgt,
            JmpCond::Sge => Cond::Sge,
            JmpCond::Slt => Cond::Slt,
            JmpCond::Sle => Cond::Sle,
            JmpCond::Set => Cond::Set,
        }
    }
}

/// Writes the refined value of register `r` and of every copy sharing its scalar id.
fn set_scalar(st: &mut State, r: u8, old: &Reg, v: Scalar) {
    st.reg_mut(r).val = v;
    if old.id != 0 {
        let id = old.id;
        st.for_each_reg(|x| {
            if x.id == id && x.ty == RegType::Scalar {
                x.val = v;
            }
        });
    }
}

/// Range view of one width.
#[derive(Clone, Copy)]
struct Rng {
    umin: u64,
    umax: u64,
    smin: i64,
    smax: i64,
}

fn get(s: &Scalar, w: Width) -> Rng {
    match w {
        Width::W64 => Rng {
            umin: s.umin,
            umax: s.umax,
            smin: s.smin,
            smax: s.smax,
        },
        Width::W32 => Rng {
            umin: s.u32min.into(),
            umax: s.u32max.into(),
            smin: s.s32min.into(),
            smax: s.s32max.into(),
        },
    }
}

fn put(s: &mut Scalar, w: Width, r: Rng) -> Option<()> {
    if r.umin > r.umax || r.smin > r.smax {
        return None;
    }
    match w {
        Width::W64 => {
            s.umin = r.umin;
            s.umax = r.umax;
            s.smin = r.smin;
            s.smax = r.smax;
        }
        Width::W32 => {
            s.u32min = u32::try_from(r.umin).ok()?;
            s.u32max = u32::try_from(r.umax).ok()?;
            s.s32min = i32::try_from(r.smin).ok()?;
            s.s32max = i32::try_from(r.smax).ok()?;
        }
    }
    Some(())
}

fn view_tnum(s: &Scalar, w: Width) -> Tnum {
    match w {
        Width::W64 => s.var,
        Width::W32 => s.var.subreg(),
    }
}

fn put_tnum(s: &mut Scalar, w: Width, t: Tnum) {
    s.var = match w {
        Width::W64 => t,
        Width::W32 => s.var.with_subreg(t),
    };
}

/// Refines `a` and `b` under `a cond b` at width `w`; `None` when impossible.
fn refine(w: Width, cond: Cond, mut a: Scalar, mut b: Scalar) -> Option<(Scalar, Scalar)> {
    let umax_w = match w {
        Width::W64 => u64::MAX,
        Width::W32 => u64::from(u32::MAX),
    };
    let (smin_w, smax_w) = match w {
        Width::W64 => (i64::MIN, i64::MAX),
        Width::W32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
    };
    let mut x = get(&a, w);
    let mut y = get(&b, w);
    match cond {
        Cond::Eq => {
            let t = view_tnum(&a, w).intersect(view_tnum(&b, w))?;
            let m = Rng {
                umin: x.umin.max(y.umin),
                umax: x.umax.min(y.umax),
                smin: x.smin.max(y.smin),
                smax: x.smax.min(y.smax),
            };
            x = m;
            y = m;
            put_tnum(&mut a, w, t);
            put_tnum(&mut b, w, t);
        }
        Cond::Ne => {
            let ta = view_tnum(&a, w);
            let tb = view_tnum(&b, w);
            if ta.is_const() && tb.is_const() && ta.value == tb.value {
                return None;
            }
            // Shave a constant off the other side's range ends.
            for (p, q) in [(&mut x, tb), (&mut y, ta)] {
                if !q.is_const() {
                    continue;
                }
                let c = q.value;
                let cs = match w {
                    Width::W64 => c as i64,
                    Width::W32 => i64::from(c as u32 as i32),
                };
                if p.umin == c {
                    p.umin = p.umin.checked_add(1)?;
                }
                if p.umax == c {
                    p.umax = p.umax.checked_sub(1)?;
                }
                if p.smin == cs {
                    p.smin = p.smin.checked_add(1)?;
                }
                if p.smax == cs {
                    p.smax = p.smax.checked_sub(1)?;
                }
            }
        }
        Cond::Gt | Cond::Lt => {
            let (p, q) = if cond == Cond::Gt {
                (&mut x, &mut y)
            } else {
                (&mut y, &mut x)
            };
            // p > q
            if q.umin >= umax_w || p.umax == 0 {
                return None;
            }
            p.umin = p.umin.max(q.umin.checked_add(1)?);
            q.umax = q.umax.min(p.umax.checked_sub(1)?);
        }
        Cond::Ge | Cond::Le => {
            let (p, q) = if cond == Cond::Ge {
                (&mut x, &mut y)
            } else {
                (&mut y, &mut x)
            };
            p.umin = p.umin.max(q.umin);
            q.umax = q.umax.min(p.umax);
        }
        Cond::Sgt | Cond::Slt => {
            let (p, q) = if cond == Cond::Sgt {
                (&mut x, &mut y)
            } else {
                (&mut y, &mut x)
            };
            if q.smin >= smax_w || p.smax <= smin_w {
                return None;
            }
            p.smin = p.smin.max(q.smin.checked_add(1)?);
            q.smax = q.smax.min(p.smax.checked_sub(1)?);
        }
        Cond::Sge | Cond::Sle => {
            let (p, q) = if cond == Cond::Sge {
                (&mut x, &mut y)
            } else {
                (&mut y, &mut x)
            };
            p.smin = p.smin.max(q.smin);
            q.smax = q.smax.min(p.smax);
        }
        Cond::Set | Cond::NotSet => {
            let tb = view_tnum(&b, w);
            let ta = view_tnum(&a, w);
            if let Some(c) = tb.is_const().then_some(tb.value) {
                if cond == Cond::NotSet {
                    // Every bit of c is zero in a.
                    let t = ta.intersect(Tnum {
                        value: 0,
                        mask: !c & umax_w,
                    })?;
                    put_tnum(&mut a, w, t);
                } else {
                    if ta.value & c == 0 && (ta.value | ta.mask) & c == 0 {
                        return None;
                    }
                    if c.is_power_of_two() {
                        let t = ta.intersect(Tnum {
                            value: c,
                            mask: !c & umax_w,
                        })?;
                        put_tnum(&mut a, w, t);
                    }
                }
            } else if (cond == Cond::Set && ta.is_const() && ta.value == 0)
                || (cond == Cond::NotSet
                    && ta.is_const()
                    && tb.is_const()
                    && ta.value & tb.value != 0)
            {
                return None;
            }
        }
    }
    put(&mut a, w, x)?;
    put(&mut b, w, y)?;
    let a = a.sync()?;
    let b = b.sync()?;
    Some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_refinement_both_sides() {
        let a = Scalar::urange(0, 100).unwrap();
        let b = Scalar::konst(10);
        let (t, _) = refine(Width::W64, Cond::Lt, a, b).unwrap();
        assert_eq!((t.umin, t.umax), (0, 9));
        let (f, _) = refine(Width::W64, Cond::Ge, a, b).unwrap();
        assert_eq!((f.umin, f.umax), (10, 100));
        assert!(refine(Width::W64, Cond::Gt, Scalar::konst(3), Scalar::konst(5)).is_none());
    }

    #[test]
    fn jmp32_refines_low_half_and_zero_extended_value() {
        let a = Scalar::unknown_bytes(4);
        let (t, _) = refine(Width::W32, Cond::Lt, a, Scalar::konst(16)).unwrap();
        assert_eq!((t.umin, t.umax), (0, 15));
    }

    #[test]
    fn signed_and_ne() {
        let a = Scalar::srange(-10, 10).unwrap();
        let (t, _) = refine(Width::W64, Cond::Sgt, a, Scalar::konst(0)).unwrap();
        assert_eq!((t.smin, t.smax), (1, 10));
        let (n, _) = refine(
            Width::W64,
            Cond::Ne,
            Scalar::urange(0, 5).unwrap(),
            Scalar::konst(5),
        )
        .unwrap();
        assert_eq!(n.umax, 4);
        assert!(refine(Width::W64, Cond::Ne, Scalar::konst(5), Scalar::konst(5)).is_none());
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod random_tests {
    //! Randomised soundness: every concrete pair satisfying a condition stays inside the
    //! refined values, and a branch is only declared impossible when no pair satisfies it.
    use super::*;
    use crate::scalar_alu;
    use gpubpf_isa::AluOp;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// A random abstract value and a few concrete members of it.
    fn sample(r: &mut Rng) -> (Scalar, Vec<u64>) {
        let base = match r.next() % 4 {
            0 => r.next() % 64,
            1 => (r.next() % 64).wrapping_neg(),
            2 => 0xffff_ff00 + r.next() % 0x200,
            _ => r.next(),
        };
        let width = match r.next() % 4 {
            0 => 0,
            1 => r.next() % 16,
            2 => r.next() % 300,
            _ => r.next() % (1 << 33),
        };
        let lo = base;
        let hi = base.wrapping_add(width);
        let s = if lo <= hi {
            Scalar::urange(lo, hi).unwrap()
        } else {
            Scalar::srange(lo as i64, hi as i64).unwrap_or(Scalar::UNKNOWN)
        };
        // Derive more structure through arithmetic sometimes.
        let (s, f): (Scalar, Box<dyn Fn(u64) -> u64>) = match r.next() % 3 {
            0 => (s, Box::new(|x| x)),
            1 => {
                let m = r.next() % 256;
                (
                    scalar_alu::alu(AluOp::And, Width::W64, &s, &Scalar::konst(m)),
                    Box::new(move |x| x & m),
                )
            }
            _ => (
                scalar_alu::alu(AluOp::Lsh, Width::W64, &s, &Scalar::konst(3)),
                Box::new(|x: u64| x << 3),
            ),
        };
        let mut members = vec![f(lo), f(hi)];
        for _ in 0..6 {
            members.push(f(lo.wrapping_add(r.next() % (width + 1))));
        }
        for m in &members {
            assert!(s.contains(&Scalar::konst(*m)), "{s:?} must contain {m:#x}");
        }
        (s, members)
    }

    fn holds(c: Cond, w: Width, a: u64, b: u64) -> bool {
        let (a, b) = match w {
            Width::W64 => (a, b),
            Width::W32 => (a & 0xffff_ffff, b & 0xffff_ffff),
        };
        let (sa, sb) = match w {
            Width::W64 => (a as i64, b as i64),
            Width::W32 => (i64::from(a as u32 as i32), i64::from(b as u32 as i32)),
        };
        match c {
            Cond::Eq => a == b,
            Cond::Ne => a != b,
            Cond::Gt => a > b,
            Cond::Ge => a >= b,
            Cond::Lt => a < b,
            Cond::Le => a <= b,
            Cond::Sgt => sa > sb,
            Cond::Sge => sa >= sb,
            Cond::Slt => sa < sb,
            Cond::Sle => sa <= sb,
            Cond::Set => a & b != 0,
            Cond::NotSet => a & b == 0,
        }
    }

    #[test]
    fn refinement_keeps_every_satisfying_pair() {
        let conds = [
            Cond::Eq,
            Cond::Ne,
            Cond::Gt,
            Cond::Ge,
            Cond::Lt,
            Cond::Le,
            Cond::Sgt,
            Cond::Sge,
            Cond::Slt,
            Cond::Sle,
            Cond::Set,
            Cond::NotSet,
        ];
        let mut r = Rng(0x1234_5678_9abc_def1);
        for _ in 0..20_000 {
            let (a, am) = sample(&mut r);
            let (b, bm) = if r.next() % 2 == 0 {
                let c = bm_const(&mut r);
                (Scalar::konst(c), vec![c])
            } else {
                sample(&mut r)
            };
            let c = conds[(r.next() % conds.len() as u64) as usize];
            let w = if r.next() % 3 == 0 {
                Width::W32
            } else {
                Width::W64
            };
            let refined = refine(w, c, a, b);
            for &x in &am {
                for &y in &bm {
                    if !holds(c, w, x, y) {
                        continue;
                    }
                    let Some((ra, rb)) = refined else {
                        panic!("{c:?} {w:?}: {x:#x},{y:#x} satisfies it but it was declared impossible\na={a:?}\nb={b:?}");
                    };
                    assert!(
                        ra.contains(&Scalar::konst(x)) && rb.contains(&Scalar::konst(y)),
                        "{c:?} {w:?}: {x:#x},{y:#x} lost\na={a:?}\nb={b:?}\nra={ra:?}\nrb={rb:?}"
                    );
                }
            }
        }
    }

    fn bm_const(r: &mut Rng) -> u64 {
        match r.next() % 4 {
            0 => r.next() % 40,
            1 => 1 << (r.next() % 64),
            2 => (r.next() % 40).wrapping_neg(),
            _ => r.next(),
        }
    }

    #[test]
    fn alu_keeps_every_result() {
        let ops = AluOp::ALL;
        let mut r = Rng(0xdead_beef_cafe_f00d);
        for _ in 0..20_000 {
            let (a, am) = sample(&mut r);
            let (b, bm) = sample(&mut r);
            let op = ops[(r.next() % ops.len() as u64) as usize];
            let w = if r.next() % 3 == 0 {
                Width::W32
            } else {
                Width::W64
            };
            let res = scalar_alu::alu(op, w, &a, &b);
            for &x in &am {
                for &y in &bm {
                    let c = scalar_alu::eval(op, w, x, y);
                    assert!(
                        res.contains(&Scalar::konst(c)),
                        "{op:?} {w:?} {x:#x} {y:#x} = {c:#x} not in {res:?}\na={a:?}\nb={b:?}"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod same_object_tests {
    use super::*;

    #[test]
    fn id_zero_is_one_object_only_for_unique_regions() {
        let maps = [
            MapInfo::new("g", MapKind::Array, 4, 16, 1),
            MapInfo::new("arr", MapKind::Array, 4, 16, 4),
        ];
        let v = |map: u32, id: u32| {
            let mut r = Reg::ptr(RegType::MapValue { map }, 0);
            r.id = id;
            r
        };
        assert!(same_object(&v(0, 0), &v(0, 0), &maps));
        assert!(!same_object(&v(1, 0), &v(1, 0), &maps));
        assert!(same_object(&v(1, 7), &v(1, 7), &maps));
        assert!(!same_object(&v(1, 7), &v(1, 8), &maps));
        assert!(!same_object(&v(0, 0), &v(0, 8), &maps));
        let ctx = Reg::ptr(RegType::Ctx, 0);
        assert!(same_object(&ctx, &ctx, &maps));
        let fp = |frame| Reg::ptr(RegType::Stack { frame }, -8);
        assert!(same_object(&fp(1), &fp(1), &maps));
        assert!(!same_object(&fp(0), &fp(1), &maps));
    }
}
