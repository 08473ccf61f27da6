//! Running conformance tests on the reference interpreter, the way the suite's plugins do:
//! `r1` = address of a private copy of the test's memory, `r2` = its length, the stack per
//! docs/design-decisions.md, and the helpers the suite's programs call.

use anyhow::{Context, Result};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};

use super::conformance_data::ConformanceTest;

/// Helper 5 of the suite (`call_unwind_fail.data`, `callx.data`): the uBPF test plugin's
/// `unwind`, which returns its argument.
extern "C" fn unwind(r1: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    r1
}

/// The helpers the suite's programs expect.
pub fn suite_helpers() -> HelperTable {
    let mut t = HelperTable::new();
    t.register(5, "unwind", unwind);
    t
}

/// Runs `program` with a private copy of `mem` on the interpreter (checked memory).
pub fn run_interpreter(program: &[gpubpf_isa::Insn], mem: &[u8]) -> Result<u64> {
    let vm = Interpreter::new(Program::from_insns(program)?, suite_helpers())
        .with_instruction_limit(10_000_000);
    let mut copy = mem.to_vec();
    let len = copy.len() as u64;
    let mut memory = Memory::new();
    let addr = if copy.is_empty() {
        0
    } else {
        memory.add_mut("mem", &mut copy)
    };
    let mut stack = vec![0u8; STACK_SIZE];
    Ok(vm.execute(&[addr, len], &mut stack, &memory)?)
}

/// Assembles (or decodes) and runs one test; returns `r0`.
pub fn run_test(test: &ConformanceTest) -> Result<u64> {
    let program = test.program()?;
    run_interpreter(&program, test.memory()).with_context(|| test.name.clone())
}
