//! cargo-fuzz target `registry_files`: the property `props::registry_files` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/registry_files/` and seeded
//! mutations of it. `cargo +nightly fuzz run registry_files /tmp/registry_files fuzz/corpus/registry_files` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::registry_files(data));
