//! `gpubpf maps dump/lookup/update` on global data (`X.rodata`, `X.data`, `X.bss`) of a
//! clang-built policy with globals of mixed sizes (`tests/data/globals/mixed.bpf.c`): every
//! variable at the offset the symbol table gives (clang leaves BTF's `DATASEC` offsets at
//! 0), updates by field name that change only the named fields, and `.rodata` refused
//! unless `--force`.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::{Path, PathBuf};

use gpubpf_runtime::registry::Registry;
use serde_json::json;

use common::cli::{ok, ok_json as j, run_with_registry as run};

/// Builds the test policy into `dir`; `None` (after saying so) without clang.
fn build(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/globals/mixed.bpf.c");
    let obj = dir.join("mixed.o");
    common::cli::build_object(&src, &obj, &dir.join("cache")).then_some(obj)
}

/// The raw value bytes of a one-entry global-data map.
fn raw(home: &Path, map: &str) -> Vec<u8> {
    let reg = Registry::open(home).unwrap();
    let m = reg.open_map(map).unwrap();
    m.lookup(&0u32.to_ne_bytes()).unwrap().unwrap()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

#[test]
fn globals_of_mixed_sizes_at_their_symbol_offsets() {
    let d = tempfile::tempdir().unwrap();
    let Some(obj) = build(d.path()) else { return };
    let home = d.path().join("reg");
    ok(&run(
        &home,
        &[
            "load",
            obj.to_str().unwrap(),
            "--set",
            "r_mid=77",
            "--set",
            "r_flag=false",
        ],
    ));

    // dump: .rodata (after --set), .data (initial values), .bss (zeroes).
    let r = j(&run(&home, &["-j", "maps", "dump", "mixed.rodata"]));
    assert_eq!(
        r[0]["value"],
        json!({
            "r_big": 0x1122_3344_5566_7788u64,
            "r_flag": 0,
            "r_mid": 77,
            "r_pair": {"lo": 44, "hi": 45},
        })
    );
    let r = j(&run(&home, &["-j", "maps", "dump", "mixed.data"]));
    assert_eq!(
        r[0]["value"],
        json!({
            "d_big": 1000,
            "d_small": 11,
            "d_mid": 12,
            "d_pair": {"lo": 13, "hi": 14},
        })
    );
    let text = ok(&run(&home, &["maps", "dump", "mixed.data"]));
    assert!(text.contains("\"d_small\":11"), "{text}");

    // lookup: the same decoding.
    let l = j(&run(
        &home,
        &["-j", "maps", "lookup", "mixed.data", "--key", "0"],
    ));
    assert_eq!(l["value"]["d_mid"], 12);
    assert_eq!(l["value"]["d_pair"], json!({"lo": 13, "hi": 14}));

    // update by field name: the bytes of that variable, nowhere else.
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "mixed.bss",
            "--key",
            "0",
            "--value",
            "b_mid=7",
        ],
    ));
    let b = raw(&home, "mixed.bss");
    assert_eq!(u32_at(&b, 12), 7, "{b:?}");
    assert_eq!(u64_at(&b, 0), 0, "b_big untouched: {b:?}");
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "mixed.bss",
            "--key",
            "0",
            "--value",
            r#"{"b_pair": {"lo": 5, "hi": 6}, "b_flag": 1}"#,
        ],
    ));
    let b = raw(&home, "mixed.bss");
    assert_eq!((u32_at(&b, 16), b[20], b[8]), (5, 6, 1), "{b:?}");
    let r = j(&run(&home, &["-j", "maps", "dump", "mixed.bss"]));
    assert_eq!(r[0]["value"]["b_pair"], json!({"lo": 5, "hi": 6}));
    assert_eq!(r[0]["value"]["b_flag"], 1);
}
