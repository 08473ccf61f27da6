//! cargo-fuzz target `object_parse`: the property `props::object_parse` (fuzz/props/mod.rs), which the
//! stable twin tests/fuzz_replay.rs also runs in CI on `fuzz/corpus/object_parse/` and seeded
//! mutations of it. `cargo +nightly fuzz run object_parse /tmp/object_parse fuzz/corpus/object_parse` from the repository root.
#![no_main]

#[path = "../props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::object_parse(data));
