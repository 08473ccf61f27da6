//! Structural checks before abstract interpretation: decoding, jump targets, subprogram
//! boundaries, reachability, the static call graph (no recursion, at most 8 frames), and a
//! backward register-liveness analysis used by state pruning.

use gpubpf_isa::{
    decode_program, AtomicOp, CallTarget, Insn, Instruction, LddwKind, Operand, FRAME_POINTER,
};

use crate::error::ErrorKind;
use crate::helpers::helper_by_id;
use crate::state::MAX_FRAMES;
use crate::MapInfo;

/// The program as the engine sees it.
#[derive(Debug)]
pub struct Program {
    /// Decoded instruction per slot (`None` for the second slot of `lddw`).
    pub insns: Vec<Option<Instruction>>,
    /// First slot of every subprogram, sorted; `subprogs[0] == 0`.
    pub subprogs: Vec<usize>,
    /// Subprogram index of every slot.
    pub subprog_of: Vec<usize>,
    /// Slots where states are stored and compared.
    pub prune: Vec<bool>,
    /// Registers r0..r9 live on entry to each slot (bit i = ri).
    pub live_in: Vec<u16>,
}

type Fail = (usize, ErrorKind);

fn writes_r10(ins: &Instruction) -> bool {
    let fp = FRAME_POINTER;
    match *ins {
        Instruction::Alu { dst, .. }
        | Instruction::Neg { dst, .. }
        | Instruction::MovSx { dst, .. }
        | Instruction::Endian { dst, .. }
        | Instruction::LoadImm64 { dst, .. }
        | Instruction::Load { dst, .. } => dst == fp,
        Instruction::Atomic { op, fetch, src, .. } => {
            (fetch || op == AtomicOp::Xchg) && op != AtomicOp::CmpXchg && src == fp
        }
        _ => false,
    }
}

/// Successors within the subprogram (local calls continue at the next instruction).
fn successors(ins: &Instruction, pc: usize) -> (Option<i64>, Option<i64>) {
    let next = pc as i64 + ins.slots() as i64;
    match *ins {
        Instruction::Exit => (None, None),
        Instruction::Ja { off, .. } => (Some(pc as i64 + 1 + i64::from(off)), None),
        Instruction::Jump { off, .. } => (Some(next), Some(pc as i64 + 1 + i64::from(off))),
        _ => (Some(next), None),
    }
}

/// Runs the structural checks and builds the [`Program`].
pub fn analyze(insns: &[Insn], maps: &[MapInfo], max_insns: usize) -> Result<Program, Fail> {
    let n = insns.len();
    if n == 0 {
        return Err((0, ErrorKind::EmptyProgram));
    }
    if n > max_insns {
        return Err((
            0,
            ErrorKind::TooLarge {
                len: n,
                max: max_insns,
            },
        ));
    }
    let decoded = decode_program(insns).map_err(|e| {
        let pc = match &e {
            gpubpf_isa::DecodeError::UnknownOpcode { pc, .. }
            | gpubpf_isa::DecodeError::InvalidRegister { pc, .. }
            | gpubpf_isa::DecodeError::NonZeroField { pc, .. }
            | gpubpf_isa::DecodeError::InvalidField { pc, .. }
            | gpubpf_isa::DecodeError::TruncatedLddw { pc }
            | gpubpf_isa::DecodeError::BadLddwSecondSlot { pc }
            | gpubpf_isa::DecodeError::LegacyPacketAccess { pc } => *pc,
            gpubpf_isa::DecodeError::TrailingBytes { .. } => 0,
        };
        (pc, ErrorKind::Decode { source: e })
    })?;
    let mut slot: Vec<Option<Instruction>> = vec![None; n];
    for (pc, ins) in &decoded {
        slot[*pc] = Some(*ins);
    }
    let target_ok = |pc: usize, t: i64| -> Result<usize, Fail> {
        if t < 0 || t >= n as i64 {
            return Err((pc, ErrorKind::JumpOutOfRange { target: t }));
        }
        let t = t as usize;
        if slot[t].is_none() {
            return Err((pc, ErrorKind::JumpIntoLddw { target: t }));
        }
        Ok(t)
    };

    // Per-instruction checks and subprogram starts.
    let mut starts = vec![0usize];
    for (pc, ins) in &decoded {
        let pc = *pc;
        if writes_r10(ins) {
            return Err((pc, ErrorKind::WriteFramePointer));
        }
        match *ins {
            Instruction::Callx { .. } => {
                return Err((
                    pc,
                    ErrorKind::Unsupported {
                        what: "`callx` (indirect calls)".into(),
                    },
                ))
            }
            Instruction::Call(CallTarget::Kfunc(id)) => {
                return Err((
                    pc,
                    ErrorKind::Unsupported {
                        what: format!("kernel function call (kfunc #{id})"),
                    },
                ))
            }
            Instruction::Call(CallTarget::Local(off)) => {
                starts.push(target_ok(pc, pc as i64 + 1 + i64::from(off))?);
            }
            Instruction::LoadImm64 { kind, imm, .. } => match kind {
                LddwKind::Imm => {}
                LddwKind::Func => {
                    let t = pc as i64 + 1 + i64::from(imm);
                    let t =
                        target_ok(pc, t).map_err(|_| (pc, ErrorKind::BadFuncRef { target: t }))?;
                    starts.push(t);
                }
                LddwKind::MapIdx | LddwKind::MapIdxValue => {
                    if imm < 0 || imm as usize >= maps.len() {
                        return Err((
                            pc,
                            ErrorKind::BadMapIndex {
                                index: imm.into(),
                                count: maps.len(),
                            },
                        ));
                    }
                }
                LddwKind::MapFd | LddwKind::MapValue | LddwKind::BtfId => {
                    return Err((
                        pc,
                        ErrorKind::Unsupported {
                            what: format!(
                                "`lddw` pseudo form {kind:?}: the loader must emit map indices \
                                 (MapIdx / MapIdxValue)"
                            ),
                        },
                    ))
                }
            },
            Instruction::Ja { off, .. } => {
                target_ok(pc, pc as i64 + 1 + i64::from(off))?;
            }
            Instruction::Jump { off, .. } => {
                target_ok(pc, pc as i64 + 1 + i64::from(off))?;
            }
            _ => {}
        }
    }
    starts.sort_unstable();
    starts.dedup();
    let mut subprog_of = vec![0usize; n];
    for (i, &s) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(n);
        for x in subprog_of.iter_mut().take(end).skip(s) {
            *x = i;
        }
    }
    let subprog_index = |pc: usize| starts.binary_search(&pc).ok();

    // Jumps stay inside their subprogram; subprograms end with exit or ja.
    for (i, &s) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(n);
        let last = (s..end).rev().find(|&p| slot[p].is_some());
        match last.and_then(|p| slot[p]) {
            Some(Instruction::Exit) | Some(Instruction::Ja { .. }) => {}
            _ => return Err((last.unwrap_or(s), ErrorKind::FallsOffEnd)),
        }
    }
    for (pc, ins) in &decoded {
        let (a, b) = successors(ins, *pc);
        for t in [a, b].into_iter().flatten() {
            let t = target_ok(*pc, t)?;
            if subprog_of[t] != subprog_of[*pc] {
                return Err((*pc, ErrorKind::JumpOutOfSubprog { target: t }));
            }
        }
    }

    // Call graph: callees and callbacks of each subprogram.
    let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); starts.len()];
    for (pc, ins) in &decoded {
        let t = match *ins {
            Instruction::Call(CallTarget::Local(off)) => Some(*pc as i64 + 1 + i64::from(off)),
            Instruction::LoadImm64 {
                kind: LddwKind::Func,
                imm,
                ..
            } => Some(*pc as i64 + 1 + i64::from(imm)),
            _ => None,
        };
        if let Some(callee) = t.and_then(|t| subprog_index(t as usize)) {
            edges[subprog_of[*pc]].push((callee, *pc));
        }
    }
    check_call_graph(&edges, &starts)?;

    // Reachability from the entry, following calls into subprograms.
    let mut seen = vec![false; n];
    let mut work = vec![0usize];
    while let Some(pc) = work.pop() {
        if seen[pc] {
            continue;
        }
        seen[pc] = true;
        let Some(ins) = slot[pc] else { continue };
        let (a, b) = successors(&ins, pc);
        for t in [a, b].into_iter().flatten() {
            if t >= 0 && (t as usize) < n {
                work.push(t as usize);
            }
        }
        for (callee, site) in &edges[subprog_of[pc]] {
            if *site == pc {
                work.push(starts[*callee]);
            }
        }
    }
    if let Some(pc) = (0..n).find(|&p| slot[p].is_some() && !seen[p]) {
        return Err((pc, ErrorKind::Unreachable));
    }

    // Prune points.
    let mut prune = vec![false; n];
    for &s in &starts {
        prune[s] = true;
    }
    for (pc, ins) in &decoded {
        match *ins {
            Instruction::Ja { off, .. } => prune[(*pc as i64 + 1 + i64::from(off)) as usize] = true,
            Instruction::Jump { off, .. } => {
                prune[(*pc as i64 + 1 + i64::from(off)) as usize] = true;
                if pc + 1 < n {
                    prune[pc + 1] = true;
                }
            }
            Instruction::Call(_) if pc + 1 < n => prune[pc + 1] = true,
            _ => {}
        }
    }

    let live_in = liveness(&slot, &decoded);
    Ok(Program {
        insns: slot,
        subprogs: starts,
        subprog_of,
        prune,
        live_in,
    })
}

fn check_call_graph(edges: &[Vec<(usize, usize)>], starts: &[usize]) -> Result<(), Fail> {
    // Depth-first search with an explicit stack: (node, next edge index).
    let k = starts.len();
    let mut depth_of = vec![0usize; k]; // longest chain (frames) starting here, when done
    let mut state = vec![0u8; k]; // 0 new, 1 on stack, 2 done
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    state[0] = 1;
    while let Some(&mut (node, ref mut ei)) = stack.last_mut() {
        if let Some(&(callee, site)) = edges[node].get(*ei) {
            *ei += 1;
            match state[callee] {
                1 => {
                    let chain = stack.iter().map(|(s, _)| starts[*s]).collect();
                    return Err((
                        site,
                        ErrorKind::Recursion {
                            callee: starts[callee],
                            chain,
                        },
                    ));
                }
                0 => {
                    state[callee] = 1;
                    stack.push((callee, 0));
                }
                _ => {}
            }
        } else {
            let d = 1 + edges[node]
                .iter()
                .map(|(c, _)| depth_of[*c])
                .max()
                .unwrap_or(0);
            depth_of[node] = d;
            state[node] = 2;
            stack.pop();
            if d > MAX_FRAMES {
                let site = edges[node].first().map(|(_, s)| *s).unwrap_or(starts[node]);
                return Err((site, ErrorKind::CallChainTooDeep { depth: d }));
            }
        }
    }
    Ok(())
}

const ALL_ARGS: u16 = 0b11_1110; // r1..r5
const CALLER_SAVED: u16 = 0b11_1111; // r0..r5

fn bit(r: u8) -> u16 {
    if r < 10 {
        1 << r
    } else {
        0
    }
}

/// (uses, defs) of one instruction.
fn uses_defs(ins: &Instruction) -> (u16, u16) {
    let op = |o: Operand| match o {
        Operand::Reg(r) => bit(r),
        Operand::Imm(_) => 0,
    };
    match *ins {
        Instruction::Alu {
            op: gpubpf_isa::AluOp::Mov,
            dst,
            src,
            ..
        } => (op(src), bit(dst)),
        Instruction::Alu { dst, src, .. } => (bit(dst) | op(src), bit(dst)),
        Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => (bit(dst), bit(dst)),
        Instruction::MovSx { dst, src, .. } => (bit(src), bit(dst)),
        Instruction::LoadImm64 { dst, .. } => (0, bit(dst)),
        Instruction::Load { dst, src, .. } => (bit(src), bit(dst)),
        Instruction::Store { dst, src, .. } => (bit(dst) | op(src), 0),
        Instruction::Atomic {
            op: aop,
            fetch,
            dst,
            src,
            ..
        } => {
            if aop == AtomicOp::CmpXchg {
                (bit(dst) | bit(src) | 1, 1)
            } else if fetch || aop == AtomicOp::Xchg {
                (bit(dst) | bit(src), bit(src))
            } else {
                (bit(dst) | bit(src), 0)
            }
        }
        Instruction::Jump { dst, src, .. } => (bit(dst) | op(src), 0),
        Instruction::Ja { .. } => (0, 0),
        Instruction::Call(CallTarget::Helper(id)) => {
            let uses = match helper_by_id(id) {
                Some(h) => (1..=h.args.len() as u8).fold(0, |m, r| m | bit(r)),
                None => ALL_ARGS,
            };
            (uses, CALLER_SAVED)
        }
        Instruction::Call(_) | Instruction::Callx { .. } => (ALL_ARGS, CALLER_SAVED),
        Instruction::Exit => (1, 0),
    }
}

/// Backward liveness with a worklist: each slot's set only grows (at most 10 times), so
/// the analysis is linear in the program size whatever its jump structure.
fn liveness(slot: &[Option<Instruction>], decoded: &[(usize, Instruction)]) -> Vec<u16> {
    let n = slot.len();
    let mut live = vec![0u16; n];
    // Predecessors in one array, slot `t`'s at `preds[first[t]..first[t + 1]]` (two
    // allocations, not one per slot).
    let edges = || {
        decoded.iter().flat_map(|(pc, ins)| {
            let (a, b) = successors(ins, *pc);
            [a, b]
                .into_iter()
                .flatten()
                .filter(|&t| t >= 0 && (t as usize) < n)
                .map(move |t| (t as usize, *pc))
        })
    };
    let mut first = vec![0usize; n + 1];
    for (t, _) in edges() {
        first[t + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut preds = vec![0usize; first[n]];
    for (t, pc) in edges() {
        preds[fill[t]] = pc;
        fill[t] += 1;
    }
    let mut queued = vec![true; n];
    let mut work: Vec<usize> = decoded.iter().map(|(pc, _)| *pc).collect();
    while let Some(pc) = work.pop() {
        queued[pc] = false;
        let Some(ins) = slot[pc] else { continue };
        let (a, b) = successors(&ins, pc);
        let mut out = 0u16;
        for t in [a, b].into_iter().flatten() {
            if t >= 0 && (t as usize) < n {
                out |= live[t as usize];
            }
        }
        let (u, d) = uses_defs(&ins);
        let v = u | (out & !d);
        if v != live[pc] {
            live[pc] = v;
            for &p in &preds[first[pc]..first[pc + 1]] {
                if !queued[p] {
                    queued[p] = true;
                    work.push(p);
                }
            }
        }
    }
    live
}
