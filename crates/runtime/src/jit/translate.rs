//! Translation of BPF functions into Cranelift IR.
//!
//! # How a BPF program becomes machine code
//!
//! The pre-pass ([`super::analysis`]) has already decoded the program, split it into
//! functions (the entry at slot 0, every local-call target and every `lddw` of kind `Func`)
//! and recorded every slot at which a basic block begins. This module turns one BPF function
//! into one Cranelift function; [`super::compiler`] compiles them and links them into one
//! W^X code image.
//!
//! ## Registers
//! `r0`–`r9` are Cranelift [`Variable`]s of type `i64`. The frontend's SSA construction turns
//! them into values and block parameters, so the register allocator sees ordinary SSA and
//! keeps hot BPF registers in machine registers; nothing is spilled to a register file in
//! memory. `r10` is not a variable: it is the function's frame-pointer parameter, and a
//! write to it is a compile error (the verifier rejects it too). On entry to a subprogram,
//! `r1`–`r5` are the arguments and `r0`, `r6`–`r9` start at zero (reading them before a
//! write is rejected by the verifier; zero keeps unverified input deterministic).
//!
//! ## Blocks
//! One Cranelift block per block start of the pre-pass: function starts, jump targets and the
//! instruction after every jump or exit. When translation reaches a block start while the
//! current block is still open, it emits the fall-through `jump`. Unreachable code (after an
//! `exit`, with no jump into it) still gets a block; Cranelift removes it. Every instruction
//! is tagged with `set_srcloc(pc)`, so machine-code offsets map back to BPF slots.
//!
//! ## 32-bit arithmetic
//! `ALU` (32-bit) operations reduce their operands to `i32`, operate, and zero-extend the
//! result, exactly the RFC 9669 rule. Cranelift folds the `ireduce`/`uextend` pairs into the
//! 32-bit forms of the machine instructions. Shift counts are masked by Cranelift the same
//! way BPF masks them (`& 31` / `& 63`).
//!
//! ## Never trap
//! Policies run inside somebody else's process, so generated code must never raise a CPU
//! exception. Division and modulo select a divisor of 1 when the real divisor is zero and
//! then select the RFC result (`0` for division, the dividend for modulo); `udiv`/`urem`
//! therefore only ever execute with a non-zero divisor. Cranelift's `sdiv`/`srem` are not
//! used at all: their lowering contains explicit trap sequences for `INT_MIN / -1` and for
//! zero. Signed division is computed on absolute values with unsigned division and the sign
//! fixed up afterwards, which yields the RFC's wrapping results (`INT_MIN / -1 == INT_MIN`,
//! `INT_MIN % -1 == 0`) with no special case. Memory accesses are plain loads and stores
//! (the verifier proved them in bounds) and carry the `notrap` flag.
//!
//! ## Calls and frames
//! Every BPF function has the internal signature
//! `(r1, r2, r3, r4, r5, fp, run) -> (r0, status)`. `fp` is that frame's `r10`; the callee
//! of frame `k` gets `fp - 512`, which reproduces the engine-wide stack layout
//! (`r10 = stack_base + STACK_SIZE - 512*k`, see `docs/design-decisions.md`). `run` is the
//! address of the per-run state (`super::RunState`: iteration budget, the last frame's
//! `fp`, the final status), the same for every frame of a run.
//! Callee-saved `r6`–`r9` need no code at all: they are variables of the caller's function,
//! and the callee has its own. After every call (helper, local, `callx`, `bpf_loop`)
//! `r1`–`r5` are 0, as in the interpreter: the verifier considers them uninitialised, and
//! the engines keep the invariant "a register the verifier considers uninitialised holds 0"
//! so that `bpf_trace_printk`'s optional arguments 3–5 never print a stale pointer. The
//! constants cost nothing where no path reads them (SSA construction drops them).
//!
//! `status` is zero on success. A runtime error (call depth beyond
//! [`MAX_CALL_FRAMES`](crate::helper_table::MAX_CALL_FRAMES), a `callx`/`bpf_loop` target
//! that is not a verified function, an exhausted iteration budget) returns
//! `kind | pc << 8` from the failing frame; every caller checks the status after each call
//! and returns it unchanged, so the error unwinds without exceptions or `longjmp`. The
//! call-depth check (this frame's `fp` above the last frame's, one load and one compare
//! per call site) keeps even an unverified recursive program from exhausting the native
//! stack.
//!
//! ## Run-time bound
//! Every run may make at most `budget` iterations (default
//! [`crate::helper_table::RUN_ITERATION_BUDGET`], the same rule as the interpreter): a
//! backward jump taken (target slot at or before the jump's own) or a `bpf_loop` callback
//! invocation uses one, whatever the frame; at zero the run ends with a status. The count
//! lives in the run state, which every function reaches through `run`. A function with a
//! backward jump caches it in a Cranelift [`Variable`] (a machine register in the loop):
//! loaded on entry, written back before every call and return, reloaded after every call
//! — wasmtime's scheme for fuel. Only the taken edge of a backward jump and each callback
//! invocation pay for the bound: a compare with zero, a decrement and a branch to a cold
//! error block (plus a load and a store in a function without loops, i.e. for callbacks
//! invoked from loop-free code). Loop-free code pays nothing, and threading the budget
//! through parameters and results instead would keep one more value live in every
//! function (`quota_alloc`: 1252 bytes of code, against 1111 with this scheme).
//!
//! Helpers are called through the address found in the [`HelperTable`] at compile time,
//! with the plain C ABI `(r1..r5) -> r0`; an id missing from the table is a compile error.
//! `bpf_loop` (helper 181) is not a helper call: the loop is emitted inline and calls the
//! callback function directly on every iteration.
//!
//! ## Function values, `callx` and `bpf_loop`
//! `lddw rX, func` loads the callback's code address (`func_addr`), as
//! `docs/design-decisions.md` specifies. `bpf_loop` compares the callback value against the
//! addresses of the program's address-taken functions before the loop starts; anything else
//! ends the program with an error status, so an indirect call never goes to an arbitrary
//! address. `callx` follows bpf_conformance and the interpreter: its register holds a helper
//! id. The JIT dispatches it with a compare chain over exactly the verified targets (every
//! id in the helper table, 181 for the inline `bpf_loop`, and the address-taken functions,
//! which is what clang emits `callx` for), each a direct call.
//!
//! ## Atomics
//! `lock add/or/and/xor` (with and without fetch) are Cranelift `atomic_rmw`, `xchg` is
//! `atomic_rmw xchg`, `cmpxchg` is `atomic_cas` with `r0` as the expected value; all
//! sequentially consistent, 32- and 64-bit, results zero-extended. On x86-64 they become
//! `lock xadd`, `lock cmpxchg` (loops for the logical fetch forms) and `xchg`.
//!
//! ## Pitfalls
//! - `iconst` of a narrow type needs a zero-extended immediate: 32-bit constants are masked.
//! - ALU64 immediates are sign-extended to 64 bits before use, also for unsigned division
//!   and comparisons, as the RFC specifies.
//! - `lddw` occupies two slots; jump offsets count slots, so targets are slot numbers and
//!   a jump into the second slot of `lddw` is rejected by the pre-pass.
//! - `le16`/`le32` truncate (the host is little-endian), `be*`/`bswap*` swap the low bits
//!   and zero-extend the rest.

mod calls;
mod exits;
mod inline_maps;

use std::collections::BTreeMap;

use cranelift_codegen::ir::{
    condcodes::IntCC, types, AbiParam, AtomicRmwOp, Block, BlockArg, ExtFuncData, ExternalName,
    FuncRef, Function, InstBuilder, MemFlagsData, SigRef, Signature, SourceLoc, Type,
    UserExternalName, Value,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use gpubpf_isa::{
    AluOp, AtomicOp, ByteSwap, CallTarget, Instruction, JmpCond, LddwKind, Operand, Size, Width,
};

use super::analysis::{jump_offset, rel_target, Analysis};
use super::{InlineMap, JitError};
use crate::helper_table::{HelperTable, STACK_SIZE_PER_FRAME};
use gpubpf_verifier::sanitize::DEAD_CODE_TRAP;

/// Helper id of `bpf_loop`, implemented by the engine.
pub(crate) const BPF_LOOP_ID: i32 = 181;
/// Upper bound on `bpf_loop` iterations (as in Linux).
pub(crate) const BPF_LOOP_MAX: i64 = 1 << 23;

/// Status kinds returned by JIT'd functions (`kind | pc << 8`).
pub(crate) const STATUS_CALL_DEPTH: i64 = 1;
/// `callx` to a value that is not a verified target.
pub(crate) const STATUS_BAD_CALLX: i64 = 2;
/// `bpf_loop` with a callback that is not a verified function.
pub(crate) const STATUS_BAD_CALLBACK: i64 = 3;
/// The run's iteration budget is exhausted (a backward jump or a callback invocation).
pub(crate) const STATUS_ITERATION_BUDGET: i64 = 4;
/// A dead-code trap (`gpubpf_verifier::sanitize`) was reached.
pub(crate) const STATUS_DEAD_CODE: i64 = 5;

/// Byte offsets in the per-run state whose address every function receives
/// (`super::RunState`): iterations left, the frame pointer of the last frame.
pub(crate) const RUN_BUDGET: i32 = 0;
pub(crate) const RUN_FP_FLOOR: i32 = 8;

const I64: Type = types::I64;
const I32: Type = types::I32;

/// Signature of every translated BPF function but function 0, `(r1..r5, fp, run) -> (r0,
/// status)`: what a bpf-to-bpf call passes.
pub(crate) fn internal_signature(cc: CallConv) -> Signature {
    let mut s = Signature::new(cc);
    s.params.extend([AbiParam::new(I64); 7]);
    s.returns.extend([AbiParam::new(I64); 2]);
    s
}

/// Signature of function 0, `(r1, r2, fp, run) -> (r0, status)`, which the callers of a
/// program enter directly (`super::EntryFn`): every argument in a register. A run starts
/// with `r1` (the ctx; a test harness also passes a length in `r2`) and `r3`–`r5` at 0,
/// which the verifier treats as uninitialised; no bpf-to-bpf call may enter function 0
/// (the verifier rejects recursion; the JIT refuses such a program, [`JitError::EntryCalled`]).
pub(crate) fn entry_signature(cc: CallConv) -> Signature {
    let mut s = Signature::new(cc);
    s.params.extend([AbiParam::new(I64); 4]);
    s.returns.extend([AbiParam::new(I64); 2]);
    s
}

/// Signature of a helper: `extern "C" fn(u64 x5) -> u64`.
pub(crate) fn helper_signature(cc: CallConv) -> Signature {
    let mut s = Signature::new(cc);
    s.params.extend([AbiParam::new(I64); 5]);
    s.returns.push(AbiParam::new(I64));
    s
}

fn mem_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

fn import_func(b: &mut FunctionBuilder<'_>, idx: usize, sig: SigRef) -> Result<FuncRef, JitError> {
    let index = u32::try_from(idx).map_err(|_| JitError::TooManyFunctions)?;
    let name = b
        .func
        .declare_imported_user_function(UserExternalName::new(0, index));
    Ok(b.import_function(ExtFuncData {
        name: ExternalName::user(name),
        signature: sig,
        colocated: true,
        patchable: false,
    }))
}

/// Translates BPF function `idx` of `analysis` into `func`.
/// What helper calls may resolve to: the helper table, and the maps whose lookups are
/// inlined.
pub(crate) struct CallTargets<'a> {
    pub helpers: &'a HelperTable,
    pub maps: &'a [InlineMap],
}

pub(crate) fn translate_function(
    func: &mut Function,
    fb_ctx: &mut FunctionBuilderContext,
    analysis: &Analysis,
    idx: usize,
    targets: &CallTargets<'_>,
    cc: CallConv,
    frontend: TargetFrontendConfig,
) -> Result<(), JitError> {
    let CallTargets { helpers, maps } = *targets;
    func.signature = if idx == 0 {
        entry_signature(cc)
    } else {
        internal_signature(cc)
    };
    // Functions with a loop keep the iteration budget in a register.
    let cache_budget = analysis.func_insns(idx).iter().any(|(pc, ins)| {
        jump_offset(ins)
            .and_then(|off| rel_target(*pc, off, analysis.slot_count))
            .is_some_and(|t| t <= *pc)
    });
    let b = FunctionBuilder::new(func, fb_ctx);
    let mut t = FnTranslator::new(b, analysis, helpers, maps, cc, cache_budget, idx == 0)?;
    t.translate(idx)?;
    let FnTranslator { mut b, .. } = t;
    b.seal_all_blocks();
    b.finalize(frontend);
    Ok(())
}

struct FnTranslator<'a, 'f> {
    b: FunctionBuilder<'f>,
    analysis: &'a Analysis,
    helpers: &'a HelperTable,
    /// Maps whose lookups are inlined.
    maps: &'a [InlineMap],
    regs: [Variable; 10],
    /// In functions with a backward jump, the iterations the run may still make, cached
    /// from `run` (see the module docs, "Run-time bound").
    budget: Option<Variable>,
    fp: Value,
    /// Address of the per-run state (`super::RunState`).
    run: Value,
    /// `iconst 0` of the entry block: the one value of every register the verifier
    /// considers uninitialised, so that merges of such registers stay trivial.
    zero: Value,
    blocks: BTreeMap<usize, Block>,
    func_refs: BTreeMap<usize, FuncRef>,
    internal_sig: SigRef,
    helper_sig: SigRef,
    propagate: Option<Block>,
    pending_errors: Vec<(Block, i64)>,
}

impl<'a, 'f> FnTranslator<'a, 'f> {
    fn new(
        mut b: FunctionBuilder<'f>,
        analysis: &'a Analysis,
        helpers: &'a HelperTable,
        maps: &'a [InlineMap],
        cc: CallConv,
        cache_budget: bool,
        entry_function: bool,
    ) -> Result<Self, JitError> {
        let regs = std::array::from_fn(|_| b.declare_var(I64));
        let internal_sig = b.import_signature(internal_signature(cc));
        let helper_sig = b.import_signature(helper_signature(cc));
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let params = b.block_params(entry).to_vec();
        let zero = b.ins().iconst(I64, 0);
        let (r1, r2, r3, r4, r5, fp, run) = match (entry_function, &params[..]) {
            (true, &[r1, r2, fp, run]) => (r1, r2, zero, zero, zero, fp, run),
            (false, &[r1, r2, r3, r4, r5, fp, run]) => (r1, r2, r3, r4, r5, fp, run),
            _ => {
                return Err(JitError::Internal {
                    what: "function parameters",
                })
            }
        };
        for (i, v) in [zero, r1, r2, r3, r4, r5, zero, zero, zero, zero]
            .into_iter()
            .enumerate()
        {
            b.def_var(regs[i], v);
        }
        let budget = cache_budget.then(|| {
            let var = b.declare_var(I64);
            let left = b.ins().load(I64, MemFlagsData::trusted(), run, RUN_BUDGET);
            b.def_var(var, left);
            var
        });
        Ok(Self {
            b,
            analysis,
            helpers,
            maps,
            regs,
            budget,
            fp,
            run,
            zero,
            blocks: BTreeMap::new(),
            func_refs: BTreeMap::new(),
            internal_sig,
            helper_sig,
            propagate: None,
            pending_errors: Vec::new(),
        })
    }

    fn block_at(&mut self, pc: usize) -> Block {
        *self
            .blocks
            .entry(pc)
            .or_insert_with(|| self.b.create_block())
    }

    fn func_ref(&mut self, idx: usize) -> Result<FuncRef, JitError> {
        if let Some(f) = self.func_refs.get(&idx) {
            return Ok(*f);
        }
        if idx == 0 {
            return Err(JitError::EntryCalled);
        }
        let f = import_func(&mut self.b, idx, self.internal_sig)?;
        self.func_refs.insert(idx, f);
        Ok(f)
    }

    fn translate(&mut self, idx: usize) -> Result<(), JitError> {
        let analysis = self.analysis;
        let insns = analysis.func_insns(idx);
        let Some(&(start, _)) = insns.first() else {
            return Err(JitError::Internal {
                what: "empty function",
            });
        };
        let first = self.block_at(start);
        self.b.ins().jump(first, &[]);
        // Blocks whose last predecessor comes later in slot order (loop headers), keyed by
        // the slot after whose translation they are sealed.
        let mut seal_after: BTreeMap<usize, Vec<Block>> = BTreeMap::new();
        let mut open = false;
        for &(pc, ins) in insns {
            if analysis.is_block_start(pc) {
                let blk = self.block_at(pc);
                if open {
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
                // Seal as early as possible: every predecessor is known once the last one
                // (in slot order) has been translated. Sealed blocks get exactly the block
                // parameters they need; unsealed ones make SSA construction slow.
                match analysis.last_pred(pc) {
                    Some(last) if last >= pc => seal_after.entry(last).or_default().push(blk),
                    _ => self.b.seal_block(blk),
                }
            } else if !open {
                return Err(JitError::Internal {
                    what: "instruction outside a block",
                });
            }
            self.b.set_srcloc(SourceLoc::new(
                u32::try_from(pc).map_err(|_| JitError::TooManyFunctions)?,
            ));
            open = self.insn(pc, &ins)?;
            if let Some(blocks) = seal_after.remove(&pc) {
                for blk in blocks {
                    self.b.seal_block(blk);
                }
            }
        }
        if !seal_after.is_empty() {
            return Err(JitError::Internal {
                what: "block left unsealed",
            });
        }
        if open {
            return Err(JitError::FallsOffEnd {
                pc: insns.last().map_or(start, |(pc, _)| *pc),
            });
        }
        self.emit_exit_blocks();
        Ok(())
    }

    // ----- registers -------------------------------------------------------------------

    fn get(&mut self, reg: u8) -> Value {
        match self.regs.get(usize::from(reg)) {
            Some(v) => self.b.use_var(*v),
            None => self.fp,
        }
    }

    /// The address `base + off` as the frame pointer and one offset when `base` is
    /// `fp + k` in this block (a register pointing into the stack, e.g. a map key's
    /// address): `(fp, k + off)`, else `(base, off)` unchanged. Accesses to one stack slot
    /// then share one address expression, which is what Cranelift's alias analysis needs to
    /// forward a stored value to a later load of it (a key written to the stack and read
    /// back by an inlined map lookup becomes the value itself).
    fn stack_address(&self, base: Value, off: i32) -> (Value, i32) {
        let dfg = &self.b.func.dfg;
        let v = dfg.resolve_aliases(base);
        if let cranelift_codegen::ir::ValueDef::Result(inst, 0) = dfg.value_def(v) {
            if let cranelift_codegen::ir::InstructionData::Binary {
                opcode: cranelift_codegen::ir::Opcode::Iadd,
                args: [a, b],
            } = dfg.insts[inst]
            {
                let (a, b) = (dfg.resolve_aliases(a), dfg.resolve_aliases(b));
                let k = if a == self.fp {
                    self.constant(b)
                } else if b == self.fp {
                    self.constant(a)
                } else {
                    None
                };
                if let Some(sum) = k
                    .and_then(|k| i32::try_from(k as i64).ok())
                    .and_then(|k| k.checked_add(off))
                {
                    return (self.fp, sum);
                }
            }
        }
        (base, off)
    }

    fn get_ty(&mut self, reg: u8, ty: Type) -> Value {
        let v = self.get(reg);
        if ty == I32 {
            self.b.ins().ireduce(I32, v)
        } else {
            v
        }
    }

    fn set(&mut self, pc: usize, reg: u8, v: Value) -> Result<(), JitError> {
        match self.regs.get(usize::from(reg)) {
            Some(var) => {
                self.b.def_var(*var, v);
                Ok(())
            }
            None => Err(JitError::FramePointerWrite { pc }),
        }
    }

    /// Writes a value of type `ty`, zero-extending 32-bit results.
    fn set_ty(&mut self, pc: usize, reg: u8, v: Value, ty: Type) -> Result<(), JitError> {
        let v = if ty == I32 {
            self.b.ins().uextend(I64, v)
        } else {
            v
        };
        self.set(pc, reg, v)
    }

    /// The state after any call: `r0 = result`, and `r1`–`r5`, which the verifier marks
    /// uninitialised, are 0 so that no value (a stack address, say) reaches an optional
    /// helper argument. Cranelift removes the constants where nothing reads them.
    fn returned(&mut self, r0: Value) {
        self.b.def_var(self.regs[0], r0);
        for var in &self.regs[1..6] {
            self.b.def_var(*var, self.zero);
        }
    }

    fn operand(&mut self, src: Operand, ty: Type) -> Value {
        match src {
            Operand::Reg(r) => self.get_ty(r, ty),
            Operand::Imm(imm) => self.konst(ty, imm),
        }
    }

    /// `imm` as a constant of `ty`: sign-extended for `i64`, the 32-bit pattern for `i32`.
    fn konst(&mut self, ty: Type, imm: i32) -> Value {
        if ty == I32 {
            self.b.ins().iconst(I32, i64::from(imm as u32))
        } else {
            self.b.ins().iconst(I64, i64::from(imm))
        }
    }

    // ----- instructions ----------------------------------------------------------------

    /// Translates one instruction; returns whether the current block stays open.
    fn insn(&mut self, pc: usize, ins: &Instruction) -> Result<bool, JitError> {
        match *ins {
            Instruction::Alu {
                width,
                op,
                dst,
                src,
            } => self.alu(pc, width, op, dst, src)?,
            Instruction::Neg { width, dst } => {
                let ty = ty_of(width);
                let a = self.get_ty(dst, ty);
                let r = self.b.ins().ineg(a);
                self.set_ty(pc, dst, r, ty)?;
            }
            Instruction::MovSx {
                width,
                dst,
                src,
                bits,
            } => {
                let narrow = match bits {
                    8 => types::I8,
                    16 => types::I16,
                    _ => I32,
                };
                let v = self.get(src);
                let n = self.b.ins().ireduce(narrow, v);
                let r = match width {
                    Width::W64 => self.b.ins().sextend(I64, n),
                    Width::W32 => {
                        let w = self.b.ins().sextend(I32, n);
                        self.b.ins().uextend(I64, w)
                    }
                };
                self.set(pc, dst, r)?;
            }
            Instruction::Endian { kind, bits, dst } => {
                let v = self.get(dst);
                let r = match (kind, bits) {
                    (ByteSwap::ToLe, 64) => v,
                    (ByteSwap::ToLe, 32) => self.b.ins().band_imm_u(v, 0xffff_ffff),
                    (ByteSwap::ToLe, _) => self.b.ins().band_imm_u(v, 0xffff),
                    (_, 64) => self.b.ins().bswap(v),
                    (_, bits) => {
                        let ty = if bits == 32 { I32 } else { types::I16 };
                        let n = self.b.ins().ireduce(ty, v);
                        let s = self.b.ins().bswap(n);
                        self.b.ins().uextend(I64, s)
                    }
                };
                self.set(pc, dst, r)?;
            }
            Instruction::LoadImm64 {
                dst,
                kind,
                imm,
                next_imm,
            } => {
                let v = match kind {
                    LddwKind::Imm => {
                        let x = u64::from(imm as u32) | (u64::from(next_imm as u32) << 32);
                        self.b.ins().iconst(I64, x as i64)
                    }
                    LddwKind::Func => {
                        let target = rel_target(pc, imm.into(), self.analysis.slot_count)
                            .and_then(|t| self.analysis.func_at.get(&t).copied())
                            .ok_or(JitError::BadCallTarget {
                                pc,
                                offset: imm.into(),
                            })?;
                        let f = self.func_ref(target)?;
                        self.b.ins().func_addr(I64, f)
                    }
                    other => return Err(JitError::UnsupportedLddw { pc, kind: other }),
                };
                self.set(pc, dst, v)?;
            }
            Instruction::Load {
                size,
                sign_extend,
                dst,
                src,
                off,
            } => {
                let base = self.get(src);
                let f = mem_flags();
                let (base, off) = self.stack_address(base, i32::from(off));
                let ins = self.b.ins();
                let v = match (size, sign_extend) {
                    (Size::B, false) => ins.uload8(I64, f, base, off),
                    (Size::B, true) => ins.sload8(I64, f, base, off),
                    (Size::H, false) => ins.uload16(I64, f, base, off),
                    (Size::H, true) => ins.sload16(I64, f, base, off),
                    (Size::W, false) => ins.uload32(f, base, off),
                    (Size::W, true) => ins.sload32(f, base, off),
                    (Size::DW, _) => ins.load(I64, f, base, off),
                };
                self.set(pc, dst, v)?;
            }
            Instruction::Store {
                size,
                dst,
                off,
                src,
            } => {
                let base = self.get(dst);
                let f = mem_flags();
                let (base, off) = self.stack_address(base, i32::from(off));
                if let Operand::Imm(imm) = src {
                    // `st`: a constant of the store's own width, so the backend emits one
                    // `mov [mem], imm` instead of materialising the constant in a register
                    // on every execution (x64 `store (iconst)` rule). The low bytes of the
                    // sign-extended immediate are what the narrow store writes.
                    let (ty, bits) = match size {
                        Size::B => (types::I8, i64::from(imm as u8)),
                        Size::H => (types::I16, i64::from(imm as u16)),
                        Size::W => (I32, i64::from(imm as u32)),
                        Size::DW => (I64, i64::from(imm)),
                    };
                    let v = self.b.ins().iconst(ty, bits);
                    self.b.ins().store(f, v, base, off);
                } else {
                    let v = self.operand(src, I64);
                    let ins = self.b.ins();
                    match size {
                        Size::B => ins.istore8(f, v, base, off),
                        Size::H => ins.istore16(f, v, base, off),
                        // A store of the `i32` itself (not `istore32` of the `i64`): a
                        // later 32-bit load of the slot (an inlined lookup's key) can then
                        // be forwarded its value. The same `mov` either way.
                        Size::W => {
                            let w = ins.ireduce(I32, v);
                            self.b.ins().store(f, w, base, off)
                        }
                        Size::DW => ins.store(f, v, base, off),
                    };
                }
            }
            Instruction::Atomic {
                size,
                op,
                fetch,
                dst,
                src,
                off,
            } => self.atomic(pc, size, op, fetch, dst, src, off)?,
            Instruction::Ja { .. } => {
                let target = self.jump_target(pc, ins)?;
                if target <= pc {
                    self.charge_iteration(pc);
                }
                let blk = self.block_at(target);
                self.b.ins().jump(blk, &[]);
                return Ok(false);
            }
            Instruction::Jump {
                width,
                cond,
                dst,
                src,
                ..
            } => {
                let target = self.jump_target(pc, ins)?;
                let ty = ty_of(width);
                let a = self.get_ty(dst, ty);
                let b = self.operand(src, ty);
                let c = match cond {
                    JmpCond::Set => {
                        let x = self.b.ins().band(a, b);
                        self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
                    }
                    other => self.b.ins().icmp(int_cc(other), a, b),
                };
                let then = self.block_at(target);
                let next = self.block_at(pc + 1);
                if target <= pc {
                    // Only the taken edge of a backward jump uses an iteration.
                    let taken = self.b.create_block();
                    self.b.ins().brif(c, taken, &[], next, &[]);
                    self.b.switch_to_block(taken);
                    self.b.seal_block(taken);
                    self.charge_iteration(pc);
                    self.b.ins().jump(then, &[]);
                } else {
                    self.b.ins().brif(c, then, &[], next, &[]);
                }
                return Ok(false);
            }
            Instruction::Call(CallTarget::Helper(BPF_LOOP_ID)) => {
                let r0 = self.bpf_loop(pc)?;
                self.returned(r0);
            }
            Instruction::Call(CallTarget::Helper(DEAD_CODE_TRAP)) => {
                let err = self.error_block(STATUS_DEAD_CODE, pc);
                self.b.ins().jump(err, &[]);
                return Ok(false);
            }
            Instruction::Call(CallTarget::Helper(id)) => {
                let r0 = self.helper_call(pc, id)?;
                self.returned(r0);
            }
            Instruction::Call(CallTarget::Local(rel)) => {
                let target = rel_target(pc, rel.into(), self.analysis.slot_count)
                    .and_then(|t| self.analysis.func_at.get(&t).copied())
                    .ok_or(JitError::BadCallTarget {
                        pc,
                        offset: rel.into(),
                    })?;
                let f = self.func_ref(target)?;
                let args: [Value; 5] = std::array::from_fn(|i| self.get(i as u8 + 1));
                let r0 = self.local_call(pc, Callee::Direct(f), args)?;
                self.returned(r0);
            }
            Instruction::Call(CallTarget::Kfunc(id)) => {
                return Err(JitError::Kfunc { pc, id });
            }
            Instruction::Callx { reg } => self.callx(pc, reg)?,
            Instruction::Exit => {
                let r0 = self.get(0);
                self.store_budget();
                self.b.ins().return_(&[r0, self.zero]);
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn jump_target(&self, pc: usize, ins: &Instruction) -> Result<usize, JitError> {
        let off = jump_offset(ins).unwrap_or(0);
        rel_target(pc, off, self.analysis.slot_count)
            .ok_or(JitError::BadJumpTarget { pc, offset: off })
    }

    fn alu(
        &mut self,
        pc: usize,
        width: Width,
        op: AluOp,
        dst: u8,
        src: Operand,
    ) -> Result<(), JitError> {
        let ty = ty_of(width);
        let b = self.operand(src, ty);
        if op == AluOp::Mov {
            return self.set_ty(pc, dst, b, ty);
        }
        let a = self.get_ty(dst, ty);
        let ins = self.b.ins();
        let r = match op {
            AluOp::Add => ins.iadd(a, b),
            AluOp::Sub => ins.isub(a, b),
            AluOp::Mul => ins.imul(a, b),
            AluOp::Or => ins.bor(a, b),
            AluOp::And => ins.band(a, b),
            AluOp::Xor => ins.bxor(a, b),
            AluOp::Lsh => ins.ishl(a, b),
            AluOp::Rsh => ins.ushr(a, b),
            AluOp::Arsh => ins.sshr(a, b),
            AluOp::Div | AluOp::Mod | AluOp::SDiv | AluOp::SMod => self.div(op, a, b),
            AluOp::Mov => b,
        };
        self.set_ty(pc, dst, r, ty)
    }

    /// Division and modulo without traps (see the module docs).
    fn div(&mut self, op: AluOp, a: Value, b: Value) -> Value {
        let ins = &mut self.b;
        let is_zero = ins.ins().icmp_imm_s(IntCC::Equal, b, 0);
        let ty = ins.func.dfg.value_type(a);
        let one = ins.ins().iconst(ty, 1);
        let zero = ins.ins().iconst(ty, 0);
        match op {
            AluOp::Div | AluOp::Mod => {
                let safe = ins.ins().select(is_zero, one, b);
                if op == AluOp::Div {
                    let q = ins.ins().udiv(a, safe);
                    ins.ins().select(is_zero, zero, q)
                } else {
                    let r = ins.ins().urem(a, safe);
                    ins.ins().select(is_zero, a, r)
                }
            }
            _ => {
                // |a| and |b| as unsigned (|INT_MIN| is 2^(n-1), which is exactly right).
                let abs_a = ins.ins().iabs(a);
                let abs_b = ins.ins().iabs(b);
                let safe = ins.ins().select(is_zero, one, abs_b);
                if op == AluOp::SDiv {
                    let q = ins.ins().udiv(abs_a, safe);
                    let nq = ins.ins().ineg(q);
                    let signs = ins.ins().bxor(a, b);
                    let neg = ins.ins().icmp_imm_s(IntCC::SignedLessThan, signs, 0);
                    let q = ins.ins().select(neg, nq, q);
                    ins.ins().select(is_zero, zero, q)
                } else {
                    let r = ins.ins().urem(abs_a, safe);
                    let nr = ins.ins().ineg(r);
                    let neg = ins.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
                    let r = ins.ins().select(neg, nr, r);
                    ins.ins().select(is_zero, a, r)
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        pc: usize,
        size: Size,
        op: AtomicOp,
        fetch: bool,
        dst: u8,
        src: u8,
        off: i16,
    ) -> Result<(), JitError> {
        let ty = if size == Size::DW { I64 } else { I32 };
        let base = self.get(dst);
        let addr = self.b.ins().iadd_imm_s(base, i64::from(off));
        let val = self.get_ty(src, ty);
        let f = mem_flags();
        if op == AtomicOp::CmpXchg {
            let expected = self.get_ty(0, ty);
            let old = self.b.ins().atomic_cas(f, addr, expected, val);
            return self.set_ty(pc, 0, old, ty);
        }
        let rmw = match op {
            AtomicOp::Add => AtomicRmwOp::Add,
            AtomicOp::Or => AtomicRmwOp::Or,
            AtomicOp::And => AtomicRmwOp::And,
            AtomicOp::Xor => AtomicRmwOp::Xor,
            _ => AtomicRmwOp::Xchg,
        };
        let old = self.b.ins().atomic_rmw(ty, f, rmw, addr, val);
        if fetch || op == AtomicOp::Xchg {
            self.set_ty(pc, src, old, ty)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Callee {
    Direct(FuncRef),
    Indirect(Value),
}

fn ty_of(w: Width) -> Type {
    match w {
        Width::W32 => I32,
        Width::W64 => I64,
    }
}

fn int_cc(c: JmpCond) -> IntCC {
    match c {
        JmpCond::Eq => IntCC::Equal,
        JmpCond::Ne => IntCC::NotEqual,
        JmpCond::Gt => IntCC::UnsignedGreaterThan,
        JmpCond::Ge => IntCC::UnsignedGreaterThanOrEqual,
        JmpCond::Lt => IntCC::UnsignedLessThan,
        JmpCond::Le => IntCC::UnsignedLessThanOrEqual,
        JmpCond::Sgt => IntCC::SignedGreaterThan,
        JmpCond::Sge => IntCC::SignedGreaterThanOrEqual,
        JmpCond::Slt => IntCC::SignedLessThan,
        JmpCond::Sle => IntCC::SignedLessThanOrEqual,
        // `Set` is handled by the caller (a mask test).
        JmpCond::Set => IntCC::NotEqual,
    }
}
