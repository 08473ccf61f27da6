//! The execution loop.

use gpubpf_isa::{
    AtomicOp, CallTarget, Instruction, LddwKind, Operand, Size, Width, FRAME_POINTER,
};

use gpubpf_verifier::sanitize::DEAD_CODE_TRAP;

use super::alu;
use super::error::ExecError;
use super::memory::Checker;
use super::{Slot, BPF_LOOP_HELPER_ID, BPF_LOOP_MAX_ITERATIONS};
use crate::helper_table::{HelperTable, MAX_CALL_FRAMES, STACK_SIZE_PER_FRAME};

/// A saved caller frame of a local call.
struct Frame {
    return_pc: usize,
    saved: [u64; 4],
    saved_fp: u64,
}

/// State of one execution.
pub(crate) struct Run<'a> {
    pub slots: &'a [Slot],
    pub helpers: &'a HelperTable,
    pub mem: Checker<'a>,
    pub stack_top: u64,
    pub budget: u64,
    pub limit: u64,
    /// Iterations (backward jumps taken, callback invocations) this run may still make.
    pub iterations_left: u64,
    pub iteration_budget: u64,
}

fn set(regs: &mut [u64; 11], pc: usize, dst: u8, v: u64) -> Result<(), ExecError> {
    if dst == FRAME_POINTER {
        return Err(ExecError::FramePointerWrite { pc });
    }
    if let Some(r) = regs.get_mut(usize::from(dst)) {
        *r = v;
    }
    Ok(())
}

fn get(regs: &[u64; 11], r: u8) -> u64 {
    regs.get(usize::from(r)).copied().unwrap_or(0)
}

/// The state after any call: `r0` is the result and `r1`–`r5`, which the verifier marks
/// uninitialised, are 0 (they must never leak a value, e.g. a stack address, into an
/// optional helper argument; docs/design-decisions.md).
fn returned(regs: &mut [u64; 11], r0: u64) {
    regs[0] = r0;
    regs[1..6].fill(0);
}

fn operand(regs: &[u64; 11], src: Operand) -> u64 {
    match src {
        Operand::Reg(r) => get(regs, r),
        Operand::Imm(i) => i as i64 as u64,
    }
}

fn sign_extend(v: u64, size: Size) -> u64 {
    match size {
        Size::B => v as i8 as i64 as u64,
        Size::H => v as i16 as i64 as u64,
        Size::W => v as i32 as i64 as u64,
        Size::DW => v,
    }
}

impl Run<'_> {
    /// `r10` of frame `k`.
    pub fn frame_pointer(&self, k: usize) -> u64 {
        self.stack_top
            .wrapping_sub((STACK_SIZE_PER_FRAME as u64).wrapping_mul(k as u64))
    }

    /// The slot index `pc + 1 + off`, if it starts an instruction.
    fn target(&self, pc: usize, off: i64) -> Result<usize, ExecError> {
        let t = (pc as i64).wrapping_add(1).wrapping_add(off);
        match usize::try_from(t)
            .ok()
            .filter(|&t| matches!(self.slots.get(t), Some(Slot::Ins(_))))
        {
            Some(t) => Ok(t),
            None => Err(ExecError::BadJumpTarget { pc, target: t }),
        }
    }

    /// Uses one iteration of the run's budget for the instruction at `pc` (a backward jump
    /// taken or a callback invocation), or ends the run when none is left.
    fn iteration(&mut self, pc: usize) -> Result<(), ExecError> {
        self.iterations_left =
            self.iterations_left
                .checked_sub(1)
                .ok_or(ExecError::IterationBudget {
                    pc,
                    budget: self.iteration_budget,
                })?;
        Ok(())
    }

    /// `target` after charging an iteration if the jump at `pc` goes backwards.
    fn jump(&mut self, pc: usize, target: usize) -> Result<usize, ExecError> {
        if target <= pc {
            self.iteration(pc)?;
        }
        Ok(target)
    }

    /// Runs the function at slot `entry` in frame `depth` until its `exit`; returns `r0`.
    pub fn function(
        &mut self,
        entry: usize,
        regs: &mut [u64; 11],
        depth: usize,
    ) -> Result<u64, ExecError> {
        let mut frames: Vec<Frame> = Vec::new();
        let mut pc = entry;
        loop {
            if self.budget == 0 {
                return Err(ExecError::InstructionLimit { limit: self.limit });
            }
            self.budget = self.budget.saturating_sub(1);
            let ins = match self.slots.get(pc) {
                Some(Slot::Ins(ins)) => *ins,
                Some(Slot::LddwTail) | None => return Err(ExecError::FellOffEnd { pc }),
            };
            let next = pc.wrapping_add(1);
            match ins {
                Instruction::Alu {
                    width,
                    op,
                    dst,
                    src,
                } => {
                    let d = get(regs, dst);
                    let s = operand(regs, src);
                    let v = match width {
                        Width::W64 => alu::alu64(op, d, s),
                        Width::W32 => alu::alu32(op, d, s),
                    };
                    set(regs, pc, dst, v)?;
                }
                Instruction::Neg { width, dst } => {
                    let d = get(regs, dst);
                    let v = match width {
                        Width::W64 => d.wrapping_neg(),
                        Width::W32 => u64::from((d as u32).wrapping_neg()),
                    };
                    set(regs, pc, dst, v)?;
                }
                Instruction::MovSx {
                    width,
                    dst,
                    src,
                    bits,
                } => {
                    let v = alu::movsx(width == Width::W64, bits, get(regs, src));
                    set(regs, pc, dst, v)?;
                }
                Instruction::Endian { kind, bits, dst } => {
                    let v = alu::endian(kind, bits, get(regs, dst));
                    set(regs, pc, dst, v)?;
                }
                Instruction::LoadImm64 {
                    dst,
                    kind,
                    imm,
                    next_imm,
                } => {
                    let v = match kind {
                        LddwKind::Imm => u64::from(imm as u32) | (u64::from(next_imm as u32) << 32),
                        LddwKind::Func => {
                            // The interpreter's function "address" is its slot index.
                            (pc as i64).wrapping_add(1).wrapping_add(i64::from(imm)) as u64
                        }
                        other => return Err(ExecError::UnresolvedLddw { pc, kind: other }),
                    };
                    set(regs, pc, dst, v)?;
                    pc = pc.wrapping_add(2);
                    continue;
                }
                Instruction::Load {
                    size,
                    sign_extend: sx,
                    dst,
                    src,
                    off,
                } => {
                    let addr = get(regs, src).wrapping_add(off as i64 as u64);
                    let v = self.mem.load(pc, addr, size)?;
                    set(regs, pc, dst, if sx { sign_extend(v, size) } else { v })?;
                }
                Instruction::Store {
                    size,
                    dst,
                    off,
                    src,
                } => {
                    let addr = get(regs, dst).wrapping_add(off as i64 as u64);
                    self.mem.store(pc, addr, size, operand(regs, src))?;
                }
                Instruction::Atomic {
                    size,
                    op,
                    fetch,
                    dst,
                    src,
                    off,
                } => {
                    let addr = get(regs, dst).wrapping_add(off as i64 as u64);
                    let old = self
                        .mem
                        .atomic(pc, addr, size, op, get(regs, src), get(regs, 0))?;
                    if op == AtomicOp::CmpXchg {
                        set(regs, pc, 0, old)?;
                    } else if fetch {
                        set(regs, pc, src, old)?;
                    }
                }
                Instruction::Ja { off, .. } => {
                    let target = self.target(pc, i64::from(off))?;
                    pc = self.jump(pc, target)?;
                    continue;
                }
                Instruction::Jump {
                    width,
                    cond,
                    dst,
                    src,
                    off,
                } => {
                    let taken = alu::condition(
                        cond,
                        width == Width::W64,
                        get(regs, dst),
                        operand(regs, src),
                    );
                    if taken {
                        let target = self.target(pc, i64::from(off))?;
                        pc = self.jump(pc, target)?;
                        continue;
                    }
                }
                Instruction::Call(CallTarget::Helper(DEAD_CODE_TRAP)) => {
                    return Err(ExecError::DeadCode { pc });
                }
                Instruction::Call(CallTarget::Helper(id)) => {
                    let r0 =
                        self.helper(pc, i64::from(id), regs, depth.wrapping_add(frames.len()))?;
                    returned(regs, r0);
                }
                Instruction::Callx { reg } => {
                    let id = get(regs, reg) as i64;
                    let r0 = self.helper(pc, id, regs, depth.wrapping_add(frames.len()))?;
                    returned(regs, r0);
                }
                Instruction::Call(CallTarget::Kfunc(id)) => {
                    return Err(ExecError::KfuncCall { pc, id });
                }
                Instruction::Call(CallTarget::Local(off)) => {
                    let target = self.target(pc, i64::from(off))?;
                    let current = depth.wrapping_add(frames.len());
                    let callee = current.wrapping_add(1);
                    if callee >= MAX_CALL_FRAMES {
                        return Err(ExecError::CallDepthExceeded {
                            pc,
                            max: MAX_CALL_FRAMES,
                        });
                    }
                    frames.push(Frame {
                        return_pc: next,
                        saved: [regs[6], regs[7], regs[8], regs[9]],
                        saved_fp: regs[10],
                    });
                    regs[10] = self.frame_pointer(callee);
                    // The callee's r0 and r6–r9 start uninitialised for the verifier: 0.
                    regs[0] = 0;
                    regs[6..10].fill(0);
                    pc = target;
                    continue;
                }
                Instruction::Exit => match frames.pop() {
                    None => return Ok(regs[0]),
                    Some(f) => {
                        returned(regs, regs[0]);
                        regs[6..10].copy_from_slice(&f.saved);
                        regs[10] = f.saved_fp;
                        pc = f.return_pc;
                        continue;
                    }
                },
            }
            pc = next;
        }
    }

    /// Calls helper `id` (or `bpf_loop`) from frame `current`.
    fn helper(
        &mut self,
        pc: usize,
        id: i64,
        regs: &[u64; 11],
        current: usize,
    ) -> Result<u64, ExecError> {
        if id == i64::from(BPF_LOOP_HELPER_ID) {
            return self.bpf_loop(pc, regs, current);
        }
        let f = i32::try_from(id)
            .ok()
            .and_then(|id| self.helpers.get(id))
            .ok_or(ExecError::UnknownHelper { pc, id })?;
        tracing::trace!(pc, id, "helper call");
        Ok(f(regs[1], regs[2], regs[3], regs[4], regs[5]))
    }

    /// `bpf_loop(nr_loops, callback, ctx, flags)`: see the module documentation.
    fn bpf_loop(&mut self, pc: usize, regs: &[u64; 11], current: usize) -> Result<u64, ExecError> {
        let (nr_loops, callback, ctx) = (regs[1], regs[2], regs[3]);
        let entry = usize::try_from(callback)
            .ok()
            .filter(|&t| matches!(self.slots.get(t), Some(Slot::Ins(_))))
            .ok_or(ExecError::BadCallback {
                pc,
                target: callback,
            })?;
        let frame = current.wrapping_add(1);
        if frame >= MAX_CALL_FRAMES {
            return Err(ExecError::CallDepthExceeded {
                pc,
                max: MAX_CALL_FRAMES,
            });
        }
        let n = nr_loops.min(BPF_LOOP_MAX_ITERATIONS);
        for i in 0..n {
            self.iteration(pc)?;
            let mut cregs = [0u64; 11];
            cregs[1] = i;
            cregs[2] = ctx;
            cregs[10] = self.frame_pointer(frame);
            if self.function(entry, &mut cregs, frame)? != 0 {
                return Ok(i.wrapping_add(1));
            }
        }
        Ok(n)
    }
}
