//! Control-flow pre-pass of the JIT: decodes the program, splits it into functions and
//! finds every block boundary.
//!
//! A function starts at slot 0 (the entry), at every target of a local call and at every
//! `lddw` of kind [`LddwKind::Func`] (a callback handed to `bpf_loop` or `callx`). A
//! function extends up to the next function start. Every jump must stay inside its function
//! and land on the first slot of an instruction; the last instruction of a function must not
//! fall through into the next one. These are structural rules the verifier also enforces;
//! the JIT re-checks them because it must never build malformed IR from any input.

use std::collections::BTreeMap;

use gpubpf_isa::{decode_program, CallTarget, Insn, Instruction, LddwKind};

use super::JitError;
use gpubpf_verifier::sanitize::DEAD_CODE_TRAP;

/// One BPF function (the entry program or a subprogram): a range of slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FuncInfo {
    /// First slot.
    pub start: usize,
    /// One past the last slot.
    pub end: usize,
    /// Whether an `lddw` of kind `Func` takes its address (a `bpf_loop`/`callx` target).
    pub address_taken: bool,
}

/// The decoded program with its function and block structure.
#[derive(Debug, Clone)]
pub(crate) struct Analysis {
    /// `(slot, instruction)` in slot order.
    pub insns: Vec<(usize, Instruction)>,
    /// Functions in slot order; index 0 is the entry.
    pub funcs: Vec<FuncInfo>,
    /// Function index by start slot.
    pub func_at: BTreeMap<usize, usize>,
    /// Per slot: whether a new basic block starts there (function starts, jump targets and
    /// the instruction after every jump or exit).
    block_start: Vec<bool>,
    /// Per slot: the slot of the last predecessor in slot order (a jump to it or the
    /// instruction falling through into it), if any. Translation seals a block once that
    /// instruction is done, so SSA construction never has to guess.
    last_pred: Vec<Option<usize>>,
    /// Number of slots.
    pub slot_count: usize,
}

/// `pc + 1 + off` as a slot index, if it lies inside the program.
pub(crate) fn rel_target(pc: usize, off: i64, slot_count: usize) -> Option<usize> {
    let pc = i64::try_from(pc).ok()?;
    let t = pc.checked_add(1)?.checked_add(off)?;
    let t = usize::try_from(t).ok()?;
    (t < slot_count).then_some(t)
}

/// The jump target of a (conditional or unconditional) jump, relative offsets resolved.
pub(crate) fn jump_offset(ins: &Instruction) -> Option<i64> {
    match *ins {
        Instruction::Ja { off, .. } => Some(off.into()),
        Instruction::Jump { off, .. } => Some(off.into()),
        _ => None,
    }
}

/// Whether control never continues at the next slot: `exit`, `ja`, and the dead-code trap
/// (`gpubpf_verifier::sanitize`), which ends the run.
fn ends_block(ins: &Instruction) -> bool {
    matches!(
        ins,
        Instruction::Exit
            | Instruction::Ja { .. }
            | Instruction::Call(CallTarget::Helper(DEAD_CODE_TRAP))
    )
}

impl Analysis {
    /// Decodes and analyses `slots`.
    pub fn new(slots: &[Insn]) -> Result<Self, JitError> {
        if slots.is_empty() {
            return Err(JitError::EmptyProgram);
        }
        let insns = decode_program(slots).map_err(|source| JitError::Decode { source })?;
        let slot_count = slots.len();
        let mut is_start = vec![false; slot_count];
        for (pc, _) in &insns {
            if let Some(s) = is_start.get_mut(*pc) {
                *s = true;
            }
        }
        let valid = |t: usize| is_start.get(t).copied().unwrap_or(false);

        // Function starts.
        let mut starts: BTreeMap<usize, bool> = BTreeMap::new();
        starts.insert(0, false);
        for (pc, ins) in &insns {
            let (off, address_taken) = match *ins {
                Instruction::Call(CallTarget::Local(rel)) => (rel, false),
                Instruction::LoadImm64 {
                    kind: LddwKind::Func,
                    imm,
                    ..
                } => (imm, true),
                _ => continue,
            };
            let target = rel_target(*pc, off.into(), slot_count)
                .filter(|t| valid(*t))
                .ok_or(JitError::BadCallTarget {
                    pc: *pc,
                    offset: off.into(),
                })?;
            let e = starts.entry(target).or_insert(false);
            *e |= address_taken;
        }
        let start_list: Vec<(usize, bool)> = starts.into_iter().collect();
        let mut funcs = Vec::with_capacity(start_list.len());
        for (i, &(start, address_taken)) in start_list.iter().enumerate() {
            let end = start_list.get(i + 1).map_or(slot_count, |(s, _)| *s);
            funcs.push(FuncInfo {
                start,
                end,
                address_taken,
            });
        }
        let func_at: BTreeMap<usize, usize> = funcs
            .iter()
            .enumerate()
            .map(|(i, f)| (f.start, i))
            .collect();

        // Jumps, fall-through and block starts.
        let mut block_start = vec![false; slot_count];
        for f in &funcs {
            if let Some(b) = block_start.get_mut(f.start) {
                *b = true;
            }
        }
        let mut last_pred: Vec<Option<usize>> = vec![None; slot_count];
        let mut note_pred = |target: usize, from: usize| {
            if let Some(e) = last_pred.get_mut(target) {
                *e = Some(e.map_or(from, |p| p.max(from)));
            }
        };
        let mut func_idx = 0usize;
        for (pc, ins) in &insns {
            while funcs.get(func_idx).is_some_and(|f| *pc >= f.end) {
                func_idx += 1;
            }
            let Some(f) = funcs.get(func_idx) else {
                return Err(JitError::Internal {
                    what: "instruction outside every function",
                });
            };
            let next = pc + ins.slots();
            let falls_through = !ends_block(ins);
            if falls_through && next >= f.end {
                return Err(JitError::FallsOffEnd { pc: *pc });
            }
            if let Some(off) = jump_offset(ins) {
                let target = rel_target(*pc, off, slot_count)
                    .filter(|t| valid(*t) && *t >= f.start && *t < f.end)
                    .ok_or(JitError::BadJumpTarget {
                        pc: *pc,
                        offset: off,
                    })?;
                if let Some(b) = block_start.get_mut(target) {
                    *b = true;
                }
                note_pred(target, *pc);
            }
            if falls_through {
                note_pred(next, *pc);
            }
            if ends_block(ins) || matches!(ins, Instruction::Jump { .. }) {
                if let Some(b) = block_start.get_mut(next) {
                    *b = true;
                }
            }
        }
        Ok(Self {
            insns,
            funcs,
            func_at,
            block_start,
            last_pred,
            slot_count,
        })
    }

    /// Whether a basic block starts at slot `pc`.
    pub fn is_block_start(&self, pc: usize) -> bool {
        self.block_start.get(pc).copied().unwrap_or(false)
    }

    /// The last predecessor (in slot order) of the block starting at `pc`.
    pub fn last_pred(&self, pc: usize) -> Option<usize> {
        self.last_pred.get(pc).copied().flatten()
    }

    /// The instructions of function `idx`.
    pub fn func_insns(&self, idx: usize) -> &[(usize, Instruction)] {
        let Some(f) = self.funcs.get(idx) else {
            return &[];
        };
        let lo = self.insns.partition_point(|(pc, _)| *pc < f.start);
        let hi = self.insns.partition_point(|(pc, _)| *pc < f.end);
        self.insns.get(lo..hi).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubpf_isa::{encode_program, AluOp, JmpCond, Operand, Width};

    fn mov(dst: u8, imm: i32) -> Instruction {
        Instruction::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst,
            src: Operand::Imm(imm),
        }
    }

    #[test]
    fn splits_functions_at_call_targets() {
        let p = encode_program(&[
            Instruction::Call(CallTarget::Local(1)),
            Instruction::Exit,
            mov(0, 1),
            Instruction::Exit,
        ]);
        let a = Analysis::new(&p).unwrap();
        assert_eq!(a.funcs.len(), 2);
        assert_eq!((a.funcs[0].start, a.funcs[0].end), (0, 2));
        assert_eq!((a.funcs[1].start, a.funcs[1].end), (2, 4));
        assert_eq!(a.func_insns(1).len(), 2);
    }

    #[test]
    fn rejects_jump_into_other_function() {
        let p = encode_program(&[
            Instruction::Call(CallTarget::Local(2)),
            Instruction::Ja {
                off: 2,
                long: false,
            },
            Instruction::Exit,
            mov(0, 1),
            Instruction::Exit,
        ]);
        assert!(matches!(
            Analysis::new(&p),
            Err(JitError::BadJumpTarget { pc: 1, .. })
        ));
    }

    #[test]
    fn rejects_fall_through_and_bad_targets() {
        let p = encode_program(&[mov(0, 1)]);
        assert!(matches!(
            Analysis::new(&p),
            Err(JitError::FallsOffEnd { pc: 0 })
        ));
        let p = encode_program(&[Instruction::Call(CallTarget::Local(-5)), Instruction::Exit]);
        assert!(matches!(
            Analysis::new(&p),
            Err(JitError::BadCallTarget { pc: 0, .. })
        ));
        // A jump into the second slot of `lddw`.
        let p = encode_program(&[
            Instruction::Jump {
                width: Width::W64,
                cond: JmpCond::Eq,
                dst: 0,
                src: Operand::Imm(0),
                off: 1,
            },
            Instruction::LoadImm64 {
                dst: 0,
                kind: LddwKind::Imm,
                imm: 1,
                next_imm: 0,
            },
            Instruction::Exit,
        ]);
        assert!(matches!(
            Analysis::new(&p),
            Err(JitError::BadJumpTarget { pc: 0, .. })
        ));
        assert!(matches!(Analysis::new(&[]), Err(JitError::EmptyProgram)));
    }
}
