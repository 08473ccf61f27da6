//! Differential tests: the same programs on the JIT, the reference interpreter and (on the
//! subset it implements) rbpf's interpreter; r0, memory and stack effects must agree.
//!
//! Sources: every bpf_conformance program, a hand-written corpus
//! (`differential/corpus.rs`) and randomly generated programs (`differential/random.rs`,
//! fixed seed, bounded case count).

mod common;
#[path = "differential/corpus.rs"]
mod corpus;
#[path = "differential/harness.rs"]
mod harness;
#[path = "differential/random.rs"]
mod random;

use common::conformance_data;
use common::conformance_run::suite_helpers;
use gpubpf_isa::asm::assemble;
use gpubpf_runtime::helper_table::HelperTable;
use harness::{rbpf_compatible, Harness};

#[test]
fn conformance_programs_agree() {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return;
    };
    let tests = conformance_data::load_dir(&dir.join("tests")).expect("tests parse");
    let helpers = suite_helpers();
    let mut h = Harness::new();
    let (mut three, mut two) = (0, 0);
    for t in &tests {
        let slots = t.program().expect("assembles");
        match h.check(
            &t.name,
            &slots,
            t.memory(),
            &helpers,
            rbpf_compatible(&slots),
        ) {
            3 => three += 1,
            2 => two += 1,
            _ => panic!("{}: the interpreter failed a conformance program", t.name),
        }
    }
    eprintln!("conformance programs: {two} on interpreter+jit, {three} also on rbpf");
    assert_eq!(two + three, tests.len());
    assert!(three > 150, "rbpf compared on only {three} programs");
}

#[test]
fn corpus_agrees() {
    let helpers = suite_helpers();
    let mut h = Harness::new();
    for (name, src, mem_size) in corpus::CORPUS {
        let slots = assemble(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mem: Vec<u8> = (0..*mem_size)
            .map(|i| (i as u8).wrapping_mul(37) ^ 0x5a)
            .collect();
        let interp = h.interp(&slots, &mem, &helpers);
        if interp.r0.is_none() {
            // Runtime errors must be errors on the JIT too (except accesses out of bounds,
            // which only the interpreter's checked mode detects).
            if !name.starts_with("out_of_bounds") {
                let jit = h.jit(&slots, &mem, &helpers);
                assert_eq!(jit.r0, None, "{name}: interpreter failed, jit did not");
            }
            continue;
        }
        h.check(name, &slots, &mem, &helpers, rbpf_compatible(&slots));
    }
}

/// Random programs over the whole ISA: interpreter vs JIT.
#[test]
fn random_programs_full_isa() {
    let mut runner = random::runner(200);
    let helpers = HelperTable::new();
    let h = std::cell::RefCell::new(Harness::new());
    runner
        .run(&random::case(true), |case| {
            let n = h.borrow_mut().check(
                &format!("{case:#?}"),
                &case.slots(),
                &case.mem,
                &helpers,
                false,
            );
            assert_eq!(n, 2, "random programs stay in bounds");
            Ok(())
        })
        .unwrap();
}

/// Random programs of rbpf's subset: interpreter vs JIT vs rbpf.
#[test]
fn random_programs_with_rbpf() {
    let mut runner = random::runner(150);
    let helpers = HelperTable::new();
    let h = std::cell::RefCell::new(Harness::new());
    runner
        .run(&random::case(false), |case| {
            let slots = case.slots();
            assert!(rbpf_compatible(&slots), "generator left rbpf's subset");
            let n = h
                .borrow_mut()
                .check(&format!("{case:#?}"), &slots, &case.mem, &helpers, true);
            assert_eq!(n, 3, "rbpf ran the program");
            Ok(())
        })
        .unwrap();
}

/// Random programs longer than `LARGE_FUNCTION_INSNS`, which the JIT compiles without the
/// egraph optimiser: interpreter vs JIT.
#[test]
fn random_large_programs_full_isa() {
    let len = gpubpf_runtime::jit::LARGE_FUNCTION_INSNS + 20;
    let mut runner = random::runner(12);
    let helpers = HelperTable::new();
    let h = std::cell::RefCell::new(Harness::new());
    runner
        .run(&random::case_sized(true, len..len + 200), |case| {
            let n =
                h.borrow_mut()
                    .check("large program", &case.slots(), &case.mem, &helpers, false);
            assert_eq!(n, 2, "random programs stay in bounds");
            Ok(())
        })
        .unwrap();
}
