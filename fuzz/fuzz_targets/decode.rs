//! cargo-fuzz target `decode`: the property `props::decode` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/decode/` and seeded
//! mutations of it. `cargo +nightly fuzz run decode /tmp/decode fuzz/corpus/decode` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::decode(data));
