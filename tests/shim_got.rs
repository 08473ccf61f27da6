//! The process line every policed call reads (`hot::HOT`), the per-point and per-variant
//! tables beside it (`SLOTS`, `REAL`) and the kernel-name cache's epoch words (read by
//! every named launch event) are reached from the shim's code directly (RIP-relative), not
//! through a GOT slot: a slot is one more dependent load, on a line of its own, for each
//! call. Rust reaches a static through the GOT when it is exported from
//! the rlib, which happens when a public function another crate could inline touches it
//! (as `record::enabled` once did: every call then loaded `HOT`'s address from the GOT).
//! Checked on the built `libgpubpf.so`: no dynamic relocation fills a slot with the
//! address of one of these statics. rustc offers small public functions to other crates
//! for inlining only in optimised builds (the kernel-name cache's `unloading` was one), so
//! the debug run of the suite catches what an `#[inline]` exports, and
//! `cargo test --release --test shim_got` the rest.

mod common;

use object::{Object, ObjectSymbol};

/// Pieces of the mangled names of the statics checked.
const HOT_STATICS: [&str; 5] = [
    "3hot3HOT",
    "3hot5SLOTS",
    "3hot4REAL",
    "12kernel_cache5EPOCH",
    "12kernel_cache9UNLOADING",
];

/// The built shim's bytes.
fn library() -> Vec<u8> {
    std::fs::read(common::shim::shim_library()).expect("read libgpubpf.so")
}

/// `(name, address)` of the symbols whose (mangled) name contains one of `pieces`.
fn symbols_with(file: &object::File<'_>, pieces: &[&str]) -> Vec<(String, u64)> {
    file.symbols()
        .filter_map(|s| {
            let name = s.name().ok()?;
            pieces
                .iter()
                .any(|n| name.contains(n) && !name.contains("$"))
                .then(|| (name.to_string(), s.address()))
        })
        .collect()
}

#[test]
fn the_hot_statics_are_reached_without_the_got() {
    let data = library();
    let file = object::File::parse(&*data).expect("parse libgpubpf.so");
    let hot = symbols_with(&file, &HOT_STATICS);
    assert_eq!(
        hot.len(),
        HOT_STATICS.len(),
        "the statics in the symbol table: {hot:?}"
    );
    let slots: Vec<(u64, u64)> = file
        .dynamic_relocations()
        .expect("dynamic relocations")
        .map(|(at, r)| (at, r.addend() as u64))
        .collect();
    for (name, addr) in &hot {
        let via_got: Vec<u64> = slots
            .iter()
            .filter(|(_, target)| target == addr)
            .map(|(at, _)| *at)
            .collect();
        assert!(
            via_got.is_empty(),
            "{name} is reached through GOT slot(s) {via_got:x?}: a public function another \
             crate may inline touches it (mark it #[inline(never)])"
        );
    }
}

/// Pieces of the mangled names of the functions every policed call runs (`hot::enter`, the
/// exit path) and of the helpers the shipped policies call per call, which are kept
/// together in `.text.hot` (`crates/shim/build.rs`).
const HOT_FUNCTIONS: [&str; 11] = [
    "3hot5enter",
    "7Policed4exit",
    "7Policed8run_exit",
    "4misc12ktime_get_ns",
    "7map_ops15map_lookup_elem",
    "7map_ops15map_update_elem",
    "7map_ops15ringbuf_reserve",
    "7map_ops14ringbuf_submit",
    "6kernel15get_kernel_name",
    "6kernel11kernel_name",
    "12kernel_cache3get",
];

/// The per-call functions share a few pages of `.text.hot` instead of sitting on a page
/// each across the library's megabytes of code: in an application whose own work evicts
/// the TLB between two calls, each page a call's code spans is one more page walk.
#[test]
fn the_per_call_functions_share_the_hot_text_section() {
    use object::ObjectSection;
    let data = library();
    let file = object::File::parse(&*data).expect("parse libgpubpf.so");
    let hot = file
        .section_by_name(".text.hot")
        .expect("libgpubpf.so has a .text.hot section (-z keep-text-section-prefix)");
    assert_eq!(hot.address() % 4096, 0, ".text.hot starts on a page");
    let range = hot.address()..hot.address() + hot.size();
    for piece in HOT_FUNCTIONS {
        let found = symbols_with(&file, &[piece]);
        assert!(!found.is_empty(), "no symbol for {piece}");
        for (name, addr) in found {
            assert!(
                range.contains(&addr),
                "{name} at {addr:#x} is outside .text.hot {range:x?}"
            );
        }
    }
}
