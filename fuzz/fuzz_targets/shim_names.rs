//! cargo-fuzz target `shim_names`: the shim's `dlsym` / `cuGetProcAddress` name handling,
//! the property `props::shim_names` (fuzz/props/shim.rs) that the stable twin
//! crates/shim/tests/fuzz_names.rs also runs in CI.
//! `cargo +nightly fuzz run shim_names /tmp/shim_names fuzz/corpus/shim_names` from the repository root.
#![no_main]

#[path = "../props/shim.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::shim_names(data));
