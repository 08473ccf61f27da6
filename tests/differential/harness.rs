//! Runs one program on every engine that can run it and compares the outcomes.
//!
//! Engines: our JIT, our reference interpreter (checked memory mode), and rbpf's interpreter
//! for programs inside its subset (see [`rbpf_compatible`]). Every engine runs on the *same*
//! memory and stack buffers, reset to their initial contents before each run, so values
//! derived from pointers (r1, r10) are identical and may flow into results. Compared: r0 (or
//! the fact that execution stopped with an error), the memory buffer passed in r1 and, for
//! our two engines, which share the frame layout, the whole stack.

use gpubpf_isa::{
    decode_program, slots_to_bytes, AluOp, ByteSwap, CallTarget, Insn, Instruction, JmpCond,
    Operand, Width,
};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};
use gpubpf_runtime::jit::JitCompiler;

/// What one engine observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `r0`, or `None` when execution stopped with an error.
    pub r0: Option<u64>,
    /// The memory buffer after execution.
    pub mem: Vec<u8>,
    /// The stack after execution (our engines only).
    pub stack: Option<Vec<u8>>,
}

/// Reusable buffers and a JIT compiler.
pub struct Harness {
    compiler: JitCompiler,
    mem: Vec<u8>,
    stack: Box<[u8; STACK_SIZE]>,
}

impl Harness {
    pub fn new() -> Self {
        Self {
            compiler: JitCompiler::new().expect("host ISA"),
            mem: Vec::with_capacity(4096),
            stack: Box::new([0u8; STACK_SIZE]),
        }
    }

    fn reset(&mut self, mem: &[u8]) {
        // Keep the allocation (and therefore the address) when the size allows.
        self.mem.clear();
        self.mem.extend_from_slice(mem);
        self.stack.fill(0);
    }

    fn args(&mut self) -> [u64; 2] {
        let addr = if self.mem.is_empty() {
            0
        } else {
            self.mem.as_mut_ptr() as u64
        };
        [addr, self.mem.len() as u64]
    }

    /// Runs `slots` on the JIT with `r1 = mem`, `r2 = mem.len()`.
    pub fn jit(&mut self, slots: &[Insn], mem: &[u8], helpers: &HelperTable) -> Outcome {
        let prog = self
            .compiler
            .compile(slots, helpers)
            .unwrap_or_else(|e| panic!("jit compile: {e}"));
        assert_eq!(prog.explicit_trap_sites(), 0);
        self.reset(mem);
        let args = self.args();
        // SAFETY: differential programs are first run on the interpreter in checked mode
        // (callers order the engines so); they only access `mem` and their stack.
        let r0 = unsafe { prog.execute_with_args(args, &mut self.stack) }.ok();
        Outcome {
            r0,
            mem: self.mem.clone(),
            stack: Some(self.stack.to_vec()),
        }
    }

    /// Runs `slots` on the interpreter in checked mode (only `mem` and the stack allowed).
    pub fn interp(&mut self, slots: &[Insn], mem: &[u8], helpers: &HelperTable) -> Outcome {
        let vm = Interpreter::new(
            Program::from_insns(slots).expect("decodes"),
            helpers.clone(),
        )
        .with_instruction_limit(2_000_000);
        self.reset(mem);
        let args = self.args();
        let mut memory = Memory::new();
        if !self.mem.is_empty() {
            // SAFETY: `self.mem` is a live buffer owned by the harness and not otherwise
            // accessed while the interpreter runs.
            unsafe {
                memory.add_raw(
                    "mem",
                    args[0],
                    self.mem.len(),
                    gpubpf_runtime::interp::Perm::ReadWrite,
                )
            };
        }
        let r0 = vm.execute(&args, &mut self.stack[..], &memory).ok();
        Outcome {
            r0,
            mem: self.mem.clone(),
            stack: Some(self.stack.to_vec()),
        }
    }

    /// Runs `slots` on rbpf's interpreter with `r1 = mem`. rbpf starts with `r2 = 0`, so a
    /// `mov r2, len` is put in front (jump offsets are relative, so nothing else moves).
    /// `None` when rbpf rejects the program.
    pub fn rbpf(&mut self, slots: &[Insn], mem: &[u8]) -> Option<Outcome> {
        let len = i32::try_from(mem.len()).ok()?;
        let mut prefixed = vec![Insn::new(0xb7, 2, 0, 0, len)];
        prefixed.extend_from_slice(slots);
        let bytes = slots_to_bytes(&prefixed);
        let vm = rbpf::EbpfVmRaw::new(Some(&bytes)).ok()?;
        self.reset(mem);
        // rbpf 0.4.1 panics (debug overflow checks) on `neg64` of `INT64_MIN`; such a run
        // does not count as a comparison.
        let m = &mut self.mem;
        let r0 = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| vm.execute_program(m)))
            .ok()?
            .ok();
        Some(Outcome {
            r0,
            mem: self.mem.clone(),
            stack: None,
        })
    }

    /// Runs the interpreter, then the JIT only if the interpreter's checked run succeeded
    /// (a failing program may have accessed memory out of bounds, which the JIT would not
    /// catch), then rbpf when `with_rbpf`; asserts agreement. Returns how many engines ran.
    pub fn check(
        &mut self,
        what: &str,
        slots: &[Insn],
        mem: &[u8],
        helpers: &HelperTable,
        with_rbpf: bool,
    ) -> usize {
        let interp = self.interp(slots, mem, helpers);
        if interp.r0.is_none() {
            // Only programs whose every access is in bounds may run natively; the JIT's
            // handling of runtime errors is covered by its own tests.
            return 1;
        }
        let jit = self.jit(slots, mem, helpers);
        let mut outcomes = vec![("interpreter", interp), ("jit", jit)];
        if with_rbpf {
            if let Some(o) = self.rbpf(slots, mem) {
                outcomes.push(("rbpf", o));
            }
        }
        assert_agree(what, &outcomes);
        outcomes.len()
    }
}

/// Whether rbpf 0.4.1's interpreter implements every instruction of `slots` as RFC 9669
/// does: no atomics, no ISA v4, no calls, no 32-bit modulo (rbpf leaves the upper half of
/// `dst` on a 32-bit modulo by zero) and no 64-bit unsigned or equality jump against a
/// negative immediate (rbpf zero-extends the immediate instead of sign-extending it).
///
/// rbpf runs on its own stack, so programs that use `r10` other than as a load/store base
/// are left out too.
pub fn rbpf_compatible(slots: &[Insn]) -> bool {
    let Ok(insns) = decode_program(slots) else {
        return false;
    };
    if insns.iter().any(|(_, i)| reads_as_data(i, 10)) {
        return false;
    }
    insns.iter().all(|(_, i)| match i {
        Instruction::Atomic { .. } | Instruction::MovSx { .. } | Instruction::Callx { .. } => false,
        Instruction::Call(CallTarget::Local(_) | CallTarget::Kfunc(_)) => false,
        Instruction::Call(CallTarget::Helper(_)) => false,
        Instruction::Alu {
            op: AluOp::SDiv | AluOp::SMod,
            ..
        } => false,
        Instruction::Alu {
            width: Width::W32,
            op: AluOp::Mod,
            ..
        } => false,
        Instruction::Endian {
            kind: ByteSwap::Swap,
            ..
        } => false,
        Instruction::Load {
            sign_extend: true, ..
        } => false,
        Instruction::Ja { long: true, .. } => false,
        Instruction::Neg {
            width: Width::W64, ..
        } => false,
        Instruction::Jump {
            width: Width::W64,
            cond,
            src: Operand::Imm(imm),
            ..
        } => {
            *imm >= 0
                || matches!(
                    cond,
                    JmpCond::Set | JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle
                )
        }
        Instruction::LoadImm64 { kind, .. } => *kind == gpubpf_isa::LddwKind::Imm,
        _ => true,
    })
}

/// Whether `i` reads register `r` as a value (not as a load/store base).
fn reads_as_data(i: &Instruction, r: u8) -> bool {
    let op = |o: &Operand| matches!(o, Operand::Reg(x) if *x == r);
    match i {
        Instruction::Alu {
            op: o, dst, src, ..
        } => op(src) || (*o != AluOp::Mov && *dst == r),
        Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => *dst == r,
        Instruction::MovSx { src, .. } => *src == r,
        Instruction::Store { src, .. } => op(src),
        Instruction::Atomic { src, .. } => *src == r,
        Instruction::Jump { dst, src, .. } => *dst == r || op(src),
        Instruction::Callx { reg } => *reg == r,
        _ => false,
    }
}

/// Asserts that every outcome agrees with the first on r0, memory and (where both have
/// one) the stack. `what` names the program in the failure message.
pub fn assert_agree(what: &str, outcomes: &[(&str, Outcome)]) {
    let Some((base_name, base)) = outcomes.first() else {
        return;
    };
    for (name, o) in &outcomes[1..] {
        assert_eq!(
            o.r0, base.r0,
            "{what}: r0 differs between {base_name} and {name}"
        );
        assert_eq!(
            o.mem, base.mem,
            "{what}: memory differs between {base_name} and {name}"
        );
        if let (Some(a), Some(b)) = (&base.stack, &o.stack) {
            if a != b {
                let first = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
                panic!(
                    "{what}: stack differs between {base_name} and {name} at byte {first} \
                     (offset {} from the top)",
                    first as i64 - STACK_SIZE as i64
                );
            }
        }
    }
}
