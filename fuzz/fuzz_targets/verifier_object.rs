//! cargo-fuzz target `verifier_object`: the property `props::verifier_object` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/verifier_object/` and seeded
//! mutations of it. `cargo +nightly fuzz run verifier_object /tmp/verifier_object fuzz/corpus/verifier_object` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::verifier_object(data));
