//! cargo-fuzz target `verifier_insns`: the property `props::verifier_insns` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/verifier_insns/` and seeded
//! mutations of it. `cargo +nightly fuzz run verifier_insns /tmp/verifier_insns fuzz/corpus/verifier_insns` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::verifier_insns(data));
