//! cargo-fuzz target `asm`: the property `props::asm` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/asm/` and seeded
//! mutations of it. `cargo +nightly fuzz run asm /tmp/asm fuzz/corpus/asm` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::asm(data));
