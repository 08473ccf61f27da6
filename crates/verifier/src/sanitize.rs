//! Dead-code sanitising (Linux: `sanitize_dead_code`): every instruction that no explored
//! path executed becomes a trap before the program is prepared.
//!
//! The verifier decides some branches statically (a scalar comparison whose outcome the
//! ranges fix, a comparison of two pointers into one object) and prunes paths that a
//! stored state covers. Code behind such a decision is never checked. If a decision or a
//! prune were ever wrong, that code would run unchecked inside the application; as a trap
//! it ends the run with a fault instead (the dispatcher counts it and fails open).
//!
//! The trap is a call of [`DEAD_CODE_TRAP`], an id that no helper has: the verifier rejects
//! it in programs (unknown helper), and both engines treat it as "end the run with a
//! dead-code fault" (the interpreter's `ExecError::DeadCode`, the JIT's matching status).

use gpubpf_isa::opcode::CALL;
use gpubpf_isa::Insn;

use crate::helpers::GPUBPF_HELPER_BASE;

/// The helper id of the dead-code trap: below gpubpf's own helpers, above every Linux
/// helper id, and never listed in [`crate::helpers::HELPERS`].
pub const DEAD_CODE_TRAP: i32 = GPUBPF_HELPER_BASE - 1;

/// The trap slot: `call DEAD_CODE_TRAP`.
pub const TRAP_INSN: Insn = Insn::new(CALL, 0, 0, 0, DEAD_CODE_TRAP);

/// Returns `insns` with every slot of each instruction listed in `unreached` (first slots,
/// as [`crate::VerifyStats::unreached`] gives them) replaced by [`TRAP_INSN`]; both slots of
/// an unreached `lddw` become traps. Indices outside the program are ignored.
pub fn sanitize_dead_code(insns: &[Insn], unreached: &[usize]) -> Vec<Insn> {
    let mut out = insns.to_vec();
    for &pc in unreached {
        let Some(first) = insns.get(pc) else {
            continue;
        };
        let width = if first.is_lddw() { 2 } else { 1 };
        for slot in out.iter_mut().skip(pc).take(width) {
            *slot = TRAP_INSN;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helpers::helper_by_id;

    #[test]
    fn trap_is_no_helper_and_covers_both_lddw_slots() {
        assert!(helper_by_id(DEAD_CODE_TRAP).is_none());
        let insns = gpubpf_isa::assemble("mov %r0, 0\nlddw %r1, 0x1122334455667788\nexit")
            .expect("assembles");
        let out = sanitize_dead_code(&insns, &[1, 99]);
        assert_eq!(out[0], insns[0]);
        assert_eq!(out[1], TRAP_INSN);
        assert_eq!(out[2], TRAP_INSN);
        assert_eq!(out[3], insns[3]);
    }
}
