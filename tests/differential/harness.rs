//! Runs one program on every engine that can run it and compares the outcomes.
//!
//! Engines: our JIT, our reference interpreter, and rbpf's interpreter (only for programs
//! inside its subset: no atomics, no ISA v4, no local calls, no 32-bit modulo by a possibly
//! zero divisor — rbpf leaves the upper half of the destination instead of clearing it).
//! Compared: r0 (or the fact that execution failed), the memory buffer passed in r1 and, for
//! our two engines, which share the frame layout, the whole stack.

use gpubpf_isa::{slots_to_bytes, Insn};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::jit;

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

/// Runs `slots` on the JIT with `r1 = mem`, `r2 = mem.len()`.
pub fn run_jit(slots: &[Insn], mem: &[u8], helpers: &HelperTable) -> Outcome {
    let prog = jit::compile(slots, helpers).unwrap_or_else(|e| panic!("jit compile: {e}"));
    let mut mem = mem.to_vec();
    let mut stack = vec![0u8; STACK_SIZE];
    let stack_arr: &mut [u8; STACK_SIZE] = stack.as_mut_slice().try_into().unwrap();
    let args = [mem.as_mut_ptr() as u64, mem.len() as u64, 0, 0, 0];
    // SAFETY: every differential program only accesses `mem` through r1 and its stack.
    let r0 = unsafe { prog.execute_with_args(args, stack_arr) }.ok();
    Outcome {
        r0,
        mem,
        stack: Some(stack),
    }
}

/// Runs `slots` on rbpf's interpreter with `r1 = mem`. `None` when rbpf rejects it.
pub fn run_rbpf(slots: &[Insn], mem: &[u8]) -> Option<Outcome> {
    let bytes = slots_to_bytes(slots);
    let vm = rbpf::EbpfVmRaw::new(Some(&bytes)).ok()?;
    let mut mem = mem.to_vec();
    let r0 = vm.execute_program(&mut mem).ok();
    Some(Outcome {
        r0,
        mem,
        stack: None,
    })
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
