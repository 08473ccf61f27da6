//! Differential tests: the same programs on the JIT, the reference interpreter and (on the
//! subset it implements) rbpf's interpreter; r0, memory and stack effects must agree.
//!
//! Sources: randomly generated programs (fixed seed, bounded case count), a hand-written
//! corpus, and every bpf_conformance program.

#[path = "differential/harness.rs"]
mod harness;
#[path = "differential/random.rs"]
mod random;

use gpubpf_runtime::helper_table::HelperTable;
use harness::{assert_agree, run_jit, run_rbpf};

/// Random programs of rbpf's subset: JIT vs rbpf.
#[test]
fn random_programs_jit_vs_rbpf() {
    let mut runner = random::runner(150);
    let helpers = HelperTable::new();
    let compared = std::cell::Cell::new(0u32);
    runner
        .run(&random::case(false), |case| {
            let slots = case.slots();
            let jit = run_jit(&slots, &case.mem, &helpers);
            if case.rbpf_compatible() {
                if let Some(rb) = run_rbpf(&slots, &case.mem) {
                    assert_agree(&format!("{case:#?}"), &[("jit", jit), ("rbpf", rb)]);
                    compared.set(compared.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap();
    let compared = compared.get();
    eprintln!("random: {compared} programs compared with rbpf");
    assert!(
        compared > 100,
        "too few rbpf-compatible programs ({compared})"
    );
}
