//! bpf_conformance on the JIT: every `tests/*.data` program is compiled and run with
//! `r1` = a private copy of its memory and `r2` = the memory's length (as the suite's
//! plugins do), and `r0` compared with `-- result`. All 313 must pass.

mod common;

use anyhow::{anyhow, Result};
use common::conformance_data::{self, ConformanceTest};
use common::conformance_run::suite_helpers;
use gpubpf_runtime::helper_table::STACK_SIZE;
use gpubpf_runtime::jit::JitCompiler;

fn run_jit(compiler: &mut JitCompiler, t: &ConformanceTest) -> Result<u64> {
    let program = t.program()?;
    let compiled = compiler
        .compile(&program, &suite_helpers())
        .map_err(|e| anyhow!("compile: {e}"))?;
    assert_eq!(
        compiled.explicit_trap_sites(),
        0,
        "{}: trapping code",
        t.name
    );
    let mut mem = t.memory().to_vec();
    let mut stack = vec![0u8; STACK_SIZE];
    let stack: &mut [u8; STACK_SIZE] = stack.as_mut_slice().try_into()?;
    let args = [mem.as_mut_ptr() as u64, mem.len() as u64];
    // SAFETY: conformance programs only access their memory (r1, r2 bytes) and the stack;
    // the same programs pass the interpreter's checked mode (tests/conformance.rs).
    let r0 = unsafe { compiled.execute_with_args(args, stack) }?;
    Ok(r0)
}

#[test]
fn conformance_jit() {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return;
    };
    let tests = conformance_data::load_dir(&dir.join("tests")).expect("tests parse");
    let mut compiler = JitCompiler::new().expect("host ISA");
    let mut failures = Vec::new();
    for t in &tests {
        let Some(expected) = t.result else {
            failures.push(format!("{}: no `-- result`", t.name));
            continue;
        };
        match run_jit(&mut compiler, t) {
            Ok(r0) if r0 == expected => {}
            Ok(r0) => failures.push(format!("{}: r0 = {r0:#x}, expected {expected:#x}", t.name)),
            Err(e) => failures.push(format!("{}: {e:#}", t.name)),
        }
    }
    let passed = tests.len() - failures.len();
    println!("conformance (jit): {passed}/{} passed", tests.len());
    for f in &failures {
        println!("  FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} conformance failures on the JIT",
        failures.len()
    );
    assert_eq!(tests.len(), 313, "the suite has 313 tests");
}
