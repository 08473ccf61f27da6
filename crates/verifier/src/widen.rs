//! Widening of `bpf_loop` iteration states, so that callback verification reaches a fixpoint.
//!
//! The engine re-runs a `bpf_loop` callback until the state at the loop's iteration point is
//! covered by an earlier round of the same invocation (see [`crate::engine`]). A callback that
//! accumulates into the caller's memory (`*acc += index`) changes that state on every round,
//! so without help the rounds only stop at the instruction budget. The kernel gets there with
//! precision tracking (imprecise scalars are ignored when states are compared); we use
//! classic widening instead: from round [`WIDEN_AFTER`] on, every scalar whose abstract value
//! still differs from the previous round becomes an unknown scalar:
//!
//! - registers of every frame: a scalar whose value changed becomes an unknown 64-bit scalar
//!   (without id); pointers, function addresses and uninitialised registers are never changed;
//! - stack slots of every frame: a slot that changed and holds only scalar data in both rounds
//!   (data, zero or a spilled scalar) with the same initialised bytes becomes "some data" in
//!   exactly those bytes; a slot holding a spilled pointer in either round, or whose
//!   initialised bytes changed, is kept as it is.
//!
//! Widening only ever replaces a value by a superset of it, of the same kind, so every check
//! made from the widened state (bounds of a later access with the accumulated value, pointer
//! leaks, uninitialised reads) holds for the concrete states as well: it costs precision, never
//! soundness. Each widening turns at least one value into "unknown", which is never undone
//! while the rounds go on, so the rounds reach a fixpoint after a few more; values that cannot
//! be widened (pointers with growing offsets) still fall back to the instruction budget.

use crate::state::{ByteKind, Reg, RegType, Slot, State};

/// Rounds of a `bpf_loop` invocation explored precisely before values that keep changing
/// are widened.
pub const WIDEN_AFTER: usize = 2;

/// Whether two registers have the same abstract value (ids aside).
fn same_value(a: &Reg, b: &Reg) -> bool {
    a.ty == b.ty && a.off == b.off && a.val == b.val
}

/// Whether a slot holds only scalar data (or nothing).
fn scalar_only(s: &Slot) -> bool {
    s.spill.is_none_or(|r| r.ty == RegType::Scalar)
}

fn same_slot(a: &Slot, b: &Slot) -> bool {
    a.bytes == b.bytes
        && a.spill_size == b.spill_size
        && match (&a.spill, &b.spill) {
            (None, None) => true,
            (Some(x), Some(y)) => same_value(x, y),
            _ => false,
        }
}

/// Widens `cur` against `prev`, the state of the previous round at the same iteration point.
/// Returns how many registers and slots were widened.
pub fn widen(prev: &State, cur: &mut State) -> usize {
    if prev.frames.len() != cur.frames.len() {
        return 0;
    }
    let mut n = 0;
    for (pf, cf) in prev.frames.iter().zip(cur.frames.iter_mut()) {
        for (pr, cr) in pf.regs.iter().zip(cf.regs.iter_mut()) {
            if pr.ty == RegType::Scalar && cr.ty == RegType::Scalar && pr.val != cr.val {
                *cr = Reg::unknown();
                n += 1;
            }
        }
        let len = pf.stack.len().max(cf.stack.len());
        for i in 0..len {
            let ps = pf.slot(i);
            let cs = cf.slot(i);
            if same_slot(ps, cs) || !scalar_only(ps) || !scalar_only(cs) {
                continue;
            }
            let init = |s: &Slot| s.bytes.map(|b| b != ByteKind::Invalid);
            if init(ps) != init(cs) {
                continue;
            }
            let s = cf.slot_mut(i);
            for b in &mut s.bytes {
                if *b != ByteKind::Invalid {
                    *b = ByteKind::Misc;
                }
            }
            s.spill = None;
            s.spill_size = 0;
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::Scalar;
    use crate::state::{Frame, FrameKind};

    fn state() -> State {
        State {
            frames: vec![Frame::new(0, usize::MAX, 0, FrameKind::Main)],
            refs: Vec::new(),
        }
    }

    fn spill(r: Reg) -> Slot {
        Slot {
            bytes: [ByteKind::Spill; 8],
            spill: Some(r),
            spill_size: 8,
        }
    }

    #[test]
    fn changed_scalars_become_unknown() {
        let mut a = state();
        a.frames[0].regs[6] = Reg::scalar(Scalar::konst(1));
        a.frames[0].regs[7] = Reg::scalar(Scalar::konst(5));
        *a.frames[0].slot_mut(0) = spill(Reg::scalar(Scalar::konst(0)));
        let mut b = a.clone();
        b.frames[0].regs[6] = Reg::scalar(Scalar::urange(1, 2).unwrap());
        *b.frames[0].slot_mut(0) = spill(Reg::scalar(Scalar::urange(0, 3).unwrap()));
        assert_eq!(widen(&a, &mut b), 2);
        assert_eq!(b.frames[0].regs[6], Reg::unknown());
        assert_eq!(b.frames[0].regs[7], Reg::scalar(Scalar::konst(5)));
        let s = b.frames[0].slot(0);
        assert_eq!(s.bytes, [ByteKind::Misc; 8]);
        assert!(s.spill.is_none());
        // A second round with the widened state changes nothing.
        let mut c = b.clone();
        assert_eq!(widen(&b, &mut c), 0);
    }

    #[test]
    fn zero_to_spilled_scalar_widens_but_keeps_uninit_bytes() {
        let mut a = state();
        a.frames[0].slot_mut(1).bytes = [
            ByteKind::Zero,
            ByteKind::Zero,
            ByteKind::Zero,
            ByteKind::Zero,
            ByteKind::Invalid,
            ByteKind::Invalid,
            ByteKind::Invalid,
            ByteKind::Invalid,
        ];
        let mut b = a.clone();
        let s = b.frames[0].slot_mut(1);
        s.bytes[..4].fill(ByteKind::Spill);
        s.spill = Some(Reg::scalar(Scalar::urange(0, 9).unwrap()));
        s.spill_size = 4;
        assert_eq!(widen(&a, &mut b), 1);
        let s = b.frames[0].slot(1);
        assert_eq!(&s.bytes[..4], &[ByteKind::Misc; 4]);
        assert_eq!(&s.bytes[4..], &[ByteKind::Invalid; 4]);
    }

    #[test]
    fn pointers_and_init_changes_are_kept() {
        let mut a = state();
        a.frames[0].regs[6] = Reg::ptr(RegType::Ctx, 0);
        *a.frames[0].slot_mut(0) = spill(Reg::scalar(Scalar::konst(0)));
        let mut b = a.clone();
        b.frames[0].regs[6] = Reg::scalar(Scalar::konst(3));
        *b.frames[0].slot_mut(0) = spill(Reg::ptr(RegType::Ctx, 0));
        b.frames[0].slot_mut(1).bytes = [ByteKind::Misc; 8];
        let before = b.clone();
        assert_eq!(widen(&a, &mut b), 0);
        assert_eq!(b, before);
    }
}
