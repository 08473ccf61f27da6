//! cargo-fuzz target `btf`: the property `props::btf` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/btf/` and seeded
//! mutations of it. `cargo +nightly fuzz run btf /tmp/btf fuzz/corpus/btf` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::btf(data));
