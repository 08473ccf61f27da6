//! State comparison for pruning ("does an already verified state cover this one?") and for
//! infinite-loop detection ("is this state exactly one already on the path?").

use std::hash::{Hash, Hasher};

use rustc_hash::FxHasher;
use smallvec::SmallVec;

use crate::state::{ByteKind, Frame, Reg, RegType, Slot, State};

/// Consistent renaming of ids between an old and a current state.
#[derive(Default)]
struct IdMap {
    /// Inline for the first pairs (one comparison of states rarely meets more): no
    /// allocation per comparison.
    pairs: SmallVec<[(u32, u32); 16]>,
}

impl IdMap {
    /// Records/validates that old id `a` corresponds to current id `b` (a bijection).
    fn check(&mut self, a: u32, b: u32) -> bool {
        if a == 0 || b == 0 {
            return a == b;
        }
        for &(x, y) in &self.pairs {
            if x == a || y == b {
                return x == a && y == b;
            }
        }
        self.pairs.push((a, b));
        true
    }

    fn get(&self, a: u32) -> Option<u32> {
        self.pairs.iter().find(|(x, _)| *x == a).map(|(_, y)| *y)
    }
}

fn regsafe(old: &Reg, cur: &Reg, exact: bool, ids: &mut IdMap, refs: &mut IdMap) -> bool {
    if exact {
        return old.ty == cur.ty
            && old.off == cur.off
            && old.val == cur.val
            && ids.check(old.id, cur.id)
            && refs.check(old.ref_id, cur.ref_id);
    }
    match old.ty {
        RegType::NotInit => true,
        RegType::Scalar => {
            cur.ty == RegType::Scalar
                && old.val.contains(&cur.val)
                && (old.id == 0 || ids.check(old.id, cur.id))
        }
        _ => {
            old.ty == cur.ty
                && old.off == cur.off
                && old.val.contains(&cur.val)
                // Pointer ids name objects (one lookup, one reservation; 0 = the only object
                // of its type, e.g. a global's value), and comparisons of two pointers are
                // decided by them: old and current ids must correspond one to one, 0 to 0.
                && ids.check(old.id, cur.id)
                && refs.check(old.ref_id, cur.ref_id)
        }
    }
}

fn byte_safe(old: ByteKind, cur: ByteKind, cur_slot: &Slot) -> bool {
    match old {
        ByteKind::Invalid => true,
        ByteKind::Misc => match cur {
            ByteKind::Misc | ByteKind::Zero => true,
            ByteKind::Spill => cur_slot.spill.is_some_and(|r| r.is_scalar()),
            ByteKind::Invalid => false,
        },
        ByteKind::Zero => cur == ByteKind::Zero,
        ByteKind::Spill => false, // handled at slot level
    }
}

fn slot_safe(old: &Slot, cur: &Slot, exact: bool, ids: &mut IdMap, refs: &mut IdMap) -> bool {
    if exact {
        if old.bytes != cur.bytes || old.spill_size != cur.spill_size {
            return false;
        }
        return match (&old.spill, &cur.spill) {
            (None, None) => true,
            (Some(a), Some(b)) => regsafe(a, b, true, ids, refs),
            _ => false,
        };
    }
    if let Some(os) = &old.spill {
        let Some(cs) = &cur.spill else { return false };
        if old.spill_size != cur.spill_size || !regsafe(os, cs, false, ids, refs) {
            return false;
        }
    }
    old.bytes
        .iter()
        .zip(cur.bytes.iter())
        .all(|(o, c)| *o == ByteKind::Spill || byte_safe(*o, *c, cur))
}

fn frame_safe(
    old: &Frame,
    cur: &Frame,
    live: u16,
    exact: bool,
    ids: &mut IdMap,
    refs: &mut IdMap,
) -> bool {
    if old.callsite != cur.callsite || old.subprog != cur.subprog || old.kind != cur.kind {
        return false;
    }
    for r in 0..10u8 {
        if live & (1 << r) == 0 {
            continue;
        }
        let i = usize::from(r);
        if !regsafe(&old.regs[i], &cur.regs[i], exact, ids, refs) {
            return false;
        }
    }
    let n = old.stack.len().max(cur.stack.len());
    (0..n).all(|i| slot_safe(old.slot(i), cur.slot(i), exact, ids, refs))
}

/// Whether `old` covers `cur` (`exact == false`: every behaviour of `cur` is one of `old`'s)
/// or equals it (`exact == true`), considering only the live registers of each frame.
pub fn states_equal(old: &State, cur: &State, live: &[u16], exact: bool) -> bool {
    if old.frames.len() != cur.frames.len() || old.refs.len() != cur.refs.len() {
        return false;
    }
    let mut ids = IdMap::default();
    let mut refs = IdMap::default();
    for (i, (o, c)) in old.frames.iter().zip(cur.frames.iter()).enumerate() {
        let l = live.get(i).copied().unwrap_or(0x3ff);
        if !frame_safe(o, c, l, exact, &mut ids, &mut refs) {
            return false;
        }
    }
    // Every reference of `old` must correspond to one of `cur`.
    let mut used = vec![false; cur.refs.len()];
    for r in &old.refs {
        let want = refs.get(r.id);
        let found = cur
            .refs
            .iter()
            .enumerate()
            .find(|(j, c)| !used[*j] && want.is_none_or(|w| w == c.id));
        match found {
            Some((j, c)) => {
                if want.is_none() && !refs.check(r.id, c.id) {
                    return false;
                }
                used[j] = true;
            }
            None => return false,
        }
    }
    true
}

/// A hash that is equal for states that are [`states_equal`] with `exact == true`. It only
/// picks the candidates that `states_equal` then compares, so a fast non-cryptographic
/// hash (FxHash) is enough: a collision costs one more comparison, never a wrong decision.
pub fn state_hash(st: &State, live: &[u16]) -> u64 {
    let mut h = FxHasher::default();
    st.frames.len().hash(&mut h);
    st.refs.len().hash(&mut h);
    for (i, f) in st.frames.iter().enumerate() {
        let l = live.get(i).copied().unwrap_or(0x3ff);
        f.callsite.hash(&mut h);
        for r in 0..10usize {
            if l & (1 << r) != 0 {
                let reg = &f.regs[r];
                reg.ty.hash(&mut h);
                reg.off.hash(&mut h);
                reg.val.hash(&mut h);
            }
        }
        // Trailing empty slots do not change the state.
        let len = f
            .stack
            .iter()
            .rposition(|s| *s != Slot::EMPTY)
            .map_or(0, |p| p + 1);
        for s in &f.stack[..len] {
            s.bytes.hash(&mut h);
            if let Some(r) = &s.spill {
                r.ty.hash(&mut h);
                r.off.hash(&mut h);
                r.val.hash(&mut h);
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FrameKind;

    fn state(regs: &[(u8, Reg)]) -> State {
        let mut f = Frame::new(0, usize::MAX, 0, FrameKind::Main);
        for &(r, v) in regs {
            f.regs[usize::from(r)] = v;
        }
        State {
            frames: vec![f],
            refs: Vec::new(),
        }
    }

    fn value(id: u32) -> Reg {
        let mut r = Reg::ptr(RegType::MapValue { map: 0 }, 0);
        r.id = id;
        r
    }

    #[test]
    fn pointer_ids_correspond_one_to_one_and_zero_only_to_zero() {
        let live = [0x3ffu16];
        let covers = |old: &[(u8, Reg)], cur: &[(u8, Reg)]| {
            states_equal(&state(old), &state(cur), &live, false)
        };
        // A global's value (id 0) in both registers does not cover two lookups.
        assert!(!covers(
            &[(7, value(0)), (8, value(0))],
            &[(7, value(3)), (8, value(4))]
        ));
        assert!(!covers(&[(7, value(0))], &[(7, value(3))]));
        assert!(!covers(&[(7, value(3))], &[(7, value(0))]));
        // Two copies of one lookup do not cover two lookups, and vice versa.
        assert!(!covers(
            &[(7, value(1)), (8, value(1))],
            &[(7, value(3)), (8, value(4))]
        ));
        assert!(!covers(
            &[(7, value(1)), (8, value(2))],
            &[(7, value(3)), (8, value(3))]
        ));
        // Renamed consistently: covered.
        assert!(covers(
            &[(7, value(1)), (8, value(1))],
            &[(7, value(5)), (8, value(5))]
        ));
        assert!(covers(
            &[(7, value(1)), (8, value(2))],
            &[(7, value(6)), (8, value(5))]
        ));
        assert!(covers(
            &[(7, value(0)), (8, value(0))],
            &[(7, value(0)), (8, value(0))]
        ));
    }
}
