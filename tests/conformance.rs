//! bpf_conformance on the reference interpreter.
//!
//! - every `tests/*.data` program is assembled, run with `r1` = a copy of its memory and
//!   `r2` = the memory's length, and `r0` compared with `-- result`: all must pass;
//! - every entry of `negative/` must be rejected (data-file parser, assembler or decoder)
//!   or, where the program is valid, produce an outcome different from the one the file
//!   claims. The expected way each case fails is pinned in [`NEGATIVE`].
//!
//! Negative cases that are malformed in the suite itself (they test the suite's runner,
//! not an implementation):
//! - `empty.data`: an empty file; there is no program to reject.
//! - `empty_instructions.data`: no `-- asm`/`-- raw` section, only a result.
//! - `error.data`: `or %r0, %r10; exit` is a valid program (reading r10 is allowed), so the
//!   claimed error "Invalid" cannot occur on a correct implementation; we run it and
//!   return a stack address, which differs from the claim.
//! - `incorrect_return_value_high_bits.data`: a valid program whose claimed result has a
//!   wrong high byte (0x89… instead of 0x88…); we return 0x8877665544332211.
//! - `invalid_unknown_directive.data`: an unknown section `-- Unknown directive`; its
//!   `-- error Invalid register` text is unrelated to its content.
//! - `invalid.sh`: not a test but a stand-in plugin script (`exit $*`) for the suite's own
//!   self-test; it has no program.

mod common;

use common::conformance_data::{self, ConformanceTest};
use common::conformance_run::run_test;

#[test]
fn conformance_interpreter() {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return;
    };
    let tests = conformance_data::load_dir(&dir.join("tests")).expect("tests parse");
    let mut failures = Vec::new();
    for t in &tests {
        let Some(expected) = t.result else {
            failures.push(format!("{}: no `-- result`", t.name));
            continue;
        };
        match run_test(t) {
            Ok(r0) if r0 == expected => {}
            Ok(r0) => failures.push(format!("{}: r0 = {r0:#x}, expected {expected:#x}", t.name)),
            Err(e) => failures.push(format!("{}: {e:#}", t.name)),
        }
    }
    let passed = tests.len() - failures.len();
    println!("conformance (interpreter): {passed}/{} passed", tests.len());
    for f in &failures {
        println!("  FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} conformance failures",
        failures.len()
    );
    assert_eq!(tests.len(), 313, "the suite has 313 tests");
}

/// How a negative case is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    /// The `.data` file itself is invalid (unknown section).
    DataFile,
    /// No program in the file.
    NoProgram,
    /// The assembler reports an error.
    Assembler,
    /// The decoder rejects the raw bytes (reserved field not zero).
    Decoder,
    /// The program is valid; its outcome differs from the one the file claims.
    OutcomeDiffers,
    /// Not a `.data` file.
    NotATest,
}

/// The expected rejection of each special case; every `invalid_*` file is an assembler
/// rejection and every `unused-*` file a decoder rejection.
const NEGATIVE: &[(&str, Rejection)] = &[
    ("empty.data", Rejection::NoProgram),
    ("empty_instructions.data", Rejection::NoProgram),
    ("error.data", Rejection::OutcomeDiffers),
    (
        "incorrect_return_value_high_bits.data",
        Rejection::OutcomeDiffers,
    ),
    ("invalid_unknown_directive.data", Rejection::DataFile),
    ("invalid.sh", Rejection::NotATest),
];

fn expected_rejection(file: &str) -> Option<Rejection> {
    if let Some((_, r)) = NEGATIVE.iter().find(|(n, _)| *n == file) {
        return Some(*r);
    }
    if file.starts_with("invalid_") {
        return Some(Rejection::Assembler);
    }
    if file.starts_with("unused-") {
        return Some(Rejection::Decoder);
    }
    None
}

fn classify(path: &std::path::Path) -> (Rejection, String) {
    if path.extension().is_none_or(|e| e != "data") {
        return (Rejection::NotATest, "not a .data file".into());
    }
    let test = match ConformanceTest::load(path) {
        Ok(t) => t,
        Err(e) => return (Rejection::DataFile, format!("{e:#}")),
    };
    if test.asm.is_none() && test.raw.is_none() {
        return (Rejection::NoProgram, "no program".into());
    }
    let program = match test.program() {
        Ok(p) => p,
        Err(e) if test.asm.is_some() => return (Rejection::Assembler, format!("{e:#}")),
        Err(e) => return (Rejection::Decoder, format!("{e:#}")),
    };
    if let Err(e) = gpubpf_isa::decode_program(&program) {
        return (Rejection::Decoder, e.to_string());
    }
    match (
        common::conformance_run::run_test(&test),
        test.result,
        &test.error,
    ) {
        (Ok(r0), Some(expected), _) if r0 != expected => (
            Rejection::OutcomeDiffers,
            format!("r0 = {r0:#x}, file claims {expected:#x}"),
        ),
        (Ok(r0), None, Some(err)) => (
            Rejection::OutcomeDiffers,
            format!("ran to r0 = {r0:#x}, file claims error `{err}`"),
        ),
        (Err(e), Some(expected), _) => (
            Rejection::OutcomeDiffers,
            format!("execution error `{e:#}`, file claims {expected:#x}"),
        ),
        (outcome, result, error) => panic!(
            "{}: outcome {outcome:?} matches the file's claim ({result:?}, {error:?})",
            test.name
        ),
    }
}

#[test]
fn negative_cases_are_rejected() {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return;
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir.join("negative"))
        .expect("negative/ readable")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    let mut mismatches = Vec::new();
    for path in &entries {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (got, why) = classify(path);
        println!("  {file}: {got:?}: {why}");
        if expected_rejection(&file) != Some(got) {
            mismatches.push(format!("{file}: {got:?} ({why})"));
        }
    }
    println!(
        "negative cases rejected: {}/{}",
        entries.len() - mismatches.len(),
        entries.len()
    );
    assert!(
        mismatches.is_empty(),
        "unexpected outcomes: {mismatches:#?}"
    );
    assert_eq!(entries.len(), 61, "the suite has 61 negative entries");
}
