//! Soundness: random programs that the verifier accepts run in the interpreter's
//! checked-memory mode without a memory fault and within the instruction budget.
//!
//! Programs are built from snippets that are *nearly* safe (random offsets, sizes, bounds,
//! loop steps), so that both verdicts occur often. Map references are rewritten to real
//! addresses before execution, as the runtime's prepare step does.

#[path = "verifier_cases/support.rs"]
mod verifier_support;

use std::sync::atomic::{AtomicU64, Ordering};

use gpubpf_isa::{
    encode_program, AluOp, CallTarget, Insn, Instruction, JmpCond, LddwKind, Operand, Size, Width,
};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};
use gpubpf_verifier::ctx::ReturnRule;
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};

const VALUE_SIZE: usize = 32;
static VALUE_ADDR: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

extern "C" fn lookup(_map: u64, _key: u64, _: u64, _: u64, _: u64) -> u64 {
    // Found on two calls out of three.
    if CALLS.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
        0
    } else {
        VALUE_ADDR.load(Ordering::Relaxed)
    }
}

extern "C" fn ktime(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    CALLS.fetch_add(977, Ordering::Relaxed)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const SIZES: [Size; 4] = Size::ALL;
const OPS: [AluOp; 14] = AluOp::ALL;
const CONDS: [JmpCond; 11] = JmpCond::ALL;

/// Scratch registers (r1 holds ctx, r6 a copy of it, r10 the frame pointer).
fn scratch(r: &mut Rng) -> u8 {
    r.pick(&[0, 2, 3, 4, 5, 7, 8, 9])
}

fn snippet(r: &mut Rng, out: &mut Vec<Instruction>) {
    use Instruction as I;
    let w = if r.chance(30) { Width::W32 } else { Width::W64 };
    match r.below(12) {
        0 => out.push(I::Alu {
            width: w,
            op: AluOp::Mov,
            dst: scratch(r),
            src: Operand::Imm(r.below(64) as i32 - 8),
        }),
        1 => {
            let src = if r.chance(50) {
                Operand::Reg(scratch(r))
            } else {
                Operand::Imm(r.below(40) as i32 - 4)
            };
            out.push(I::Alu {
                width: w,
                op: r.pick(&OPS),
                dst: scratch(r),
                src,
            })
        }
        2 => {
            // ctx load (offsets around the test layout, some invalid).
            let size = r.pick(&SIZES);
            let off = (r.below(80) as i16) & !(size.bytes() as i16 - 1);
            out.push(I::Load {
                size,
                sign_extend: false,
                dst: scratch(r),
                src: 6,
                off,
            });
        }
        3 => {
            let size = r.pick(&SIZES);
            let off = -((1 + r.below(70) as i16) * size.bytes() as i16);
            let src = if r.chance(50) {
                Operand::Reg(scratch(r))
            } else {
                Operand::Imm(r.below(100) as i32)
            };
            out.push(I::Store {
                size,
                dst: 10,
                off,
                src,
            });
        }
        4 => {
            let size = r.pick(&SIZES);
            let off = -((1 + r.below(64) as i16) * size.bytes() as i16);
            out.push(I::Load {
                size,
                sign_extend: r.chance(10) && size != Size::DW,
                dst: scratch(r),
                src: 10,
                off,
            });
        }
        5 => {
            // Bounded (or nearly bounded) variable stack index.
            let idx = scratch(r);
            let p = scratch(r);
            if idx == p {
                return;
            }
            let base = 8 * (1 + r.below(8) as i32);
            let mask = r.pick(&[3i32, 7, 15, 31]);
            out.push(I::Load {
                size: Size::DW,
                sign_extend: false,
                dst: idx,
                src: 6,
                off: 32,
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::And,
                dst: idx,
                src: Operand::Imm(mask),
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: p,
                src: Operand::Reg(10),
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst: p,
                src: Operand::Imm(-base),
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst: p,
                src: Operand::Reg(idx),
            });
            if r.chance(50) {
                out.push(I::Store {
                    size: Size::B,
                    dst: p,
                    off: 0,
                    src: Operand::Imm(1),
                });
            } else {
                out.push(I::Load {
                    size: Size::B,
                    sign_extend: false,
                    dst: scratch(r),
                    src: p,
                    off: 0,
                });
            }
        }
        6 => {
            // Forward conditional jump over the next snippet.
            let src = if r.chance(50) {
                Operand::Reg(scratch(r))
            } else {
                Operand::Imm(r.below(20) as i32)
            };
            let dst = scratch(r);
            let mut body = Vec::new();
            snippet(r, &mut body);
            out.push(I::Jump {
                width: w,
                cond: r.pick(&CONDS),
                dst,
                src,
                off: body.iter().map(|i| i.slots() as i16).sum(),
            });
            out.extend(body);
        }
        7 => {
            // A counted loop (sometimes without progress).
            let c = scratch(r);
            let n = 1 + r.below(30) as i32;
            let step = r.pick(&[1, 1, 1, 2, 0]);
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: c,
                src: Operand::Imm(0),
            });
            let mut body = Vec::new();
            if r.chance(50) {
                snippet(r, &mut body);
            }
            body.retain(|i| !writes(i, c));
            body.push(I::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst: c,
                src: Operand::Imm(step),
            });
            let len: i16 = body.iter().map(|i| i.slots() as i16).sum();
            out.extend(body);
            out.push(I::Jump {
                width: Width::W64,
                cond: JmpCond::Lt,
                dst: c,
                src: Operand::Imm(n),
                off: -(len + 1),
            });
        }
        8 => {
            // Map lookup, null check, access at a random offset.
            let size = r.pick(&SIZES);
            let off = r.below(VALUE_SIZE as u64 + 4) as i16 & !(size.bytes() as i16 - 1);
            out.push(I::Store {
                size: Size::W,
                dst: 10,
                off: -4,
                src: Operand::Imm(0),
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: 2,
                src: Operand::Reg(10),
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst: 2,
                src: Operand::Imm(-4),
            });
            out.push(I::LoadImm64 {
                dst: 1,
                kind: LddwKind::MapIdx,
                imm: 0,
                next_imm: 0,
            });
            out.push(I::Call(CallTarget::Helper(1)));
            let access = if r.chance(50) {
                I::Store {
                    size,
                    dst: 0,
                    off,
                    src: Operand::Imm(7),
                }
            } else {
                I::Load {
                    size,
                    sign_extend: false,
                    dst: 3,
                    src: 0,
                    off,
                }
            };
            if r.chance(90) {
                out.push(I::Jump {
                    width: Width::W64,
                    cond: JmpCond::Eq,
                    dst: 0,
                    src: Operand::Imm(0),
                    off: 1,
                });
            }
            out.push(access);
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: 0,
                src: Operand::Imm(0),
            });
        }
        9 => {
            // Direct value access with a variable index.
            let idx = scratch(r);
            let p = scratch(r);
            if idx == p || idx == 1 || p == 1 {
                return;
            }
            out.push(I::LoadImm64 {
                dst: p,
                kind: LddwKind::MapIdxValue,
                imm: 0,
                next_imm: r.below(VALUE_SIZE as u64) as i32,
            });
            out.push(I::Load {
                size: Size::W,
                sign_extend: false,
                dst: idx,
                src: 6,
                off: 12,
            });
            out.push(I::Jump {
                width: Width::W64,
                cond: JmpCond::Gt,
                dst: idx,
                src: Operand::Imm(r.below(VALUE_SIZE as u64) as i32),
                off: 2,
            });
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst: p,
                src: Operand::Reg(idx),
            });
            out.push(I::Store {
                size: Size::B,
                dst: p,
                off: 0,
                src: Operand::Imm(3),
            });
        }
        10 => {
            out.push(I::Call(CallTarget::Helper(5)));
        }
        _ => {
            // Spill and fill through a pointer register.
            let p = scratch(r);
            let off = -8 * (1 + r.below(8) as i16);
            out.push(I::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: p,
                src: Operand::Reg(10),
            });
            out.push(I::Store {
                size: Size::DW,
                dst: 10,
                off,
                src: Operand::Reg(p),
            });
            out.push(I::Load {
                size: Size::DW,
                sign_extend: false,
                dst: p,
                src: 10,
                off,
            });
            out.push(I::Store {
                size: r.pick(&SIZES),
                dst: p,
                off: off - 8 * r.below(3) as i16,
                src: Operand::Imm(1),
            });
        }
    }
}

fn writes(i: &Instruction, r: u8) -> bool {
    match *i {
        Instruction::Alu { dst, .. }
        | Instruction::Neg { dst, .. }
        | Instruction::MovSx { dst, .. }
        | Instruction::Endian { dst, .. }
        | Instruction::LoadImm64 { dst, .. }
        | Instruction::Load { dst, .. } => dst == r,
        Instruction::Call(_) => r <= 5,
        _ => false,
    }
}

fn program(r: &mut Rng) -> Vec<Insn> {
    let mut v = vec![Instruction::Alu {
        width: Width::W64,
        op: AluOp::Mov,
        dst: 6,
        src: Operand::Reg(1),
    }];
    for _ in 0..1 + r.below(8) {
        snippet(r, &mut v);
    }
    if r.chance(80) {
        v.push(Instruction::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst: 0,
            src: Operand::Imm(0),
        });
    }
    v.push(Instruction::Exit);
    encode_program(&v)
}

/// Rewrites map references to addresses, as the runtime does after verification.
fn prepare(insns: &[Insn], value_addr: u64) -> Vec<Insn> {
    let mut out = insns.to_vec();
    let mut pc = 0;
    while pc + 1 < out.len() {
        if out[pc].is_lddw() {
            let kind = out[pc].src;
            let v = match kind {
                5 => Some(0x1000u64),
                6 => Some(value_addr + out[pc + 1].imm as u64),
                _ => None,
            };
            if let Some(v) = v {
                out[pc].src = 0;
                out[pc].imm = v as u32 as i32;
                out[pc + 1].imm = (v >> 32) as u32 as i32;
            }
            pc += 2;
        } else {
            pc += 1;
        }
    }
    out
}

#[test]
fn accepted_random_programs_never_fault() {
    let maps = [MapInfo::new(
        "values",
        MapKind::Array,
        4,
        VALUE_SIZE as u32,
        1,
    )];
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let verifier = Verifier::new(&VerifierConfig {
        budget: 200_000,
        ..VerifierConfig::default()
    });
    let mut helpers = HelperTable::new();
    helpers.register(1, "bpf_map_lookup_elem", lookup);
    helpers.register(5, "bpf_ktime_get_ns", ktime);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut rejected, mut runs) = (0u32, 0u32, 0u32);
    let mut kinds = std::collections::BTreeMap::new();
    for n in 0..10_000 {
        let insns = program(&mut rng);
        let res = verifier.verify(&VerifyInput {
            insns: &insns,
            maps: &maps,
            ctx: &ctx,
            line_info: None,
        });
        if let Err(e) = res {
            rejected += 1;
            *kinds.entry(e.kind.name()).or_insert(0u32) += 1;
            continue;
        }
        accepted += 1;
        for round in 0..4 {
            let mut ctx_bytes = [0u8; 72];
            for b in ctx_bytes.iter_mut() {
                *b = rng.next() as u8;
            }
            if round == 0 {
                ctx_bytes = [0; 72];
            }
            let mut value = [0u8; VALUE_SIZE];
            let mut stack = vec![0u8; STACK_SIZE];
            let mut mem = Memory::new();
            let ctx_addr = mem.add_mut("ctx", &mut ctx_bytes);
            let value_addr = mem.add_mut("value", &mut value);
            VALUE_ADDR.store(value_addr, Ordering::Relaxed);
            let prepared = prepare(&insns, value_addr);
            let vm = Interpreter::new(Program::from_insns(&prepared).unwrap(), helpers.clone())
                .with_instruction_limit(1_000_000);
            runs += 1;
            if let Err(e) = vm.execute(&[ctx_addr], &mut stack, &mem) {
                let listing = gpubpf_isa::disassemble(&insns).unwrap_or_default();
                panic!("program #{n} was accepted but faulted: {e}\n{listing}");
            }
        }
    }
    eprintln!("soundness: {accepted} accepted ({runs} runs), {rejected} rejected: {kinds:?}");
    assert!(
        accepted >= 300,
        "too few accepted programs ({accepted}) to be meaningful"
    );
    assert!(
        rejected >= 300,
        "too few rejected programs ({rejected}) to be meaningful"
    );
}
