//! `gpubpf maps dump/lookup/update` on global data (`X.rodata`, `X.data`, `X.bss`) of a
//! clang-built policy with globals of mixed sizes (`tests/data/globals/mixed.bpf.c`): every
//! variable at the offset the symbol table gives (clang leaves BTF's `DATASEC` offsets at
//! 0), updates by field name that change only the named fields, and `.rodata` refused
//! unless `--force`.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::Path;

use gpubpf_runtime::registry::Registry;
use serde_json::json;

use common::cli::{ok, ok_json as j, run_with_registry as run, with_policies};

/// The test policy.
const MIXED: &str = "tests/data/globals/mixed.bpf.c";

/// The raw value bytes of a one-entry global-data map.
fn raw(home: &Path, map: &str) -> Vec<u8> {
    let reg = Registry::open(home).unwrap();
    let m = reg.open_map(map).unwrap();
    m.lookup(&0u32.to_ne_bytes()).unwrap().unwrap()
}

/// `gpubpf maps update ARGS`.
fn update(home: &Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["maps", "update"];
    a.extend_from_slice(args);
    run(home, &a)
}

/// `gpubpf maps update MAP --key KEY --value VALUE`, which must succeed.
fn put(home: &Path, map: &str, key: &str, value: &str) {
    ok(&update(home, &[map, "--key", key, "--value", value]));
}

/// The decoded value of `gpubpf -j maps lookup MAP --key KEY`.
fn lookup(home: &Path, map: &str, key: &str) -> serde_json::Value {
    j(&run(home, &["-j", "maps", "lookup", map, "--key", key]))["formatted"]["value"].clone()
}

/// The decoded value of the first entry of `gpubpf -j maps dump MAP`.
fn dump0(home: &Path, map: &str) -> serde_json::Value {
    j(&run(home, &["-j", "maps", "dump", map]))[0]["formatted"]["value"].clone()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

#[test]
fn globals_of_mixed_sizes_at_their_symbol_offsets() {
    let Some((_d, home, [obj])) = with_policies([MIXED]) else {
        return;
    };
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
    assert_eq!(
        dump0(&home, "mixed.rodata"),
        json!({
            "r_big": 0x1122_3344_5566_7788u64,
            "r_flag": false,
            "r_mid": 77,
            "r_pair": {"lo": 44, "hi": 45},
        })
    );
    assert_eq!(
        dump0(&home, "mixed.data"),
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
    let l = lookup(&home, "mixed.data", "0");
    assert_eq!(l["d_mid"], 12);
    assert_eq!(l["d_pair"], json!({"lo": 13, "hi": 14}));

    // update by field name: the bytes of that variable, nowhere else.
    put(&home, "mixed.bss", "0", "b_mid=7");
    let b = raw(&home, "mixed.bss");
    assert_eq!(u32_at(&b, 12), 7, "{b:?}");
    assert_eq!(u64_at(&b, 0), 0, "b_big untouched: {b:?}");
    put(
        &home,
        "mixed.bss",
        "0",
        r#"{"b_pair": {"lo": 5, "hi": 6}, "b_flag": 1}"#,
    );
    let b = raw(&home, "mixed.bss");
    assert_eq!((u32_at(&b, 16), b[20], b[8]), (5, 6, 1), "{b:?}");
    let r = dump0(&home, "mixed.bss");
    assert_eq!(r["b_pair"], json!({"lo": 5, "hi": 6}));
    assert_eq!(r["b_flag"], true, "a bool is a JSON bool");
    // Struct fields (here: variables) in declaration order, as bpftool prints them.
    let names: Vec<&String> = r.as_object().unwrap().keys().collect();
    assert_eq!(names, ["b_big", "b_flag", "b_mid", "b_pair"]);
    // The raw bytes beside the decoded value.
    let entry = &j(&run(&home, &["-j", "maps", "dump", "mixed.bss"]))[0];
    let bytes: Vec<String> = b.iter().map(|x| format!("{x:#04x}")).collect();
    assert_eq!(entry["value"], json!(bytes));
    assert_eq!(entry["key"], json!(["0x00", "0x00", "0x00", "0x00"]));
}

#[test]
fn field_updates_change_only_the_named_fields() {
    let Some((_d, home, [obj])) = with_policies([MIXED]) else {
        return;
    };
    ok(&run(&home, &["load", obj.to_str().unwrap()]));

    // Global data: each update names one variable; the others keep their values.
    put(&home, "mixed.bss", "0", "b_big=5");
    put(&home, "mixed.bss", "0", "b_mid=7");
    put(&home, "mixed.bss", "0", r#"{"b_pair": {"hi": 3}}"#);
    put(&home, "mixed.bss", "0", "b_pair.lo=4");
    let b = raw(&home, "mixed.bss");
    assert_eq!(u64_at(&b, 0), 5, "b_big kept: {b:?}");
    assert_eq!(u32_at(&b, 12), 7, "b_mid kept: {b:?}");
    assert_eq!((u32_at(&b, 16), b[20]), (4, 3), "b_pair: {b:?}");
    put(&home, "mixed.data", "0", "d_small=200");
    assert_eq!(
        dump0(&home, "mixed.data"),
        json!({"d_big": 1000, "d_small": 200, "d_mid": 12, "d_pair": {"lo": 13, "hi": 14}})
    );

    // A hash map of structs: an existing entry keeps the fields not named; a new entry
    // starts from zeroes; a named char array is replaced as a whole.
    put(&home, "usage", "42", "bytes=4096,allocs=3,comm=python3");
    put(&home, "usage", "42", "denied=7");
    put(&home, "usage", "42", r#"{"allocs": 4, "comm": "sh"}"#);
    assert_eq!(
        lookup(&home, "usage", "42"),
        json!({"bytes": 4096, "allocs": 4, "denied": 7, "comm": "sh"})
    );
    ok(&update(
        &home,
        &[
            "usage", "--key", "43", "--value", "denied=1", "--flags", "noexist",
        ],
    ));
    assert_eq!(
        lookup(&home, "usage", "43"),
        json!({"bytes": 0, "allocs": 0, "denied": 1, "comm": ""})
    );
    let out = update(
        &home,
        &[
            "usage", "--key", "44", "--value", "denied=1", "--flags", "exist",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    // A whole value (hex bytes) still replaces everything, as in bpftool.
    put(&home, "usage", "42", &format!("hex:{}", "00".repeat(24)));
    assert_eq!(lookup(&home, "usage", "42")["bytes"], 0);
}

#[test]
fn rodata_updates_are_refused_unless_forced() {
    let Some((_d, home, [obj])) = with_policies([MIXED]) else {
        return;
    };
    ok(&run(
        &home,
        &["load", obj.to_str().unwrap(), "--set", "r_mid=77"],
    ));
    let before = raw(&home, "mixed.rodata");

    let out = update(&home, &["mixed.rodata", "--key", "0", "--value", "r_mid=5"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("read-only") && err.contains("--set") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(raw(&home, "mixed.rodata"), before, "nothing written");
    let out = run(
        &home,
        &[
            "-j",
            "maps",
            "update",
            "mixed.rodata",
            "--key",
            "0",
            "--value",
            "r_mid=5",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(e["error"].as_str().unwrap().contains("read-only"), "{e}");

    let out = update(
        &home,
        &[
            "mixed.rodata",
            "--key",
            "0",
            "--value",
            "r_mid=5",
            "--force",
        ],
    );
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("read-only") && err.contains("next `gpubpf load`"),
        "--force says what it does: {err}"
    );
    let after = raw(&home, "mixed.rodata");
    assert_eq!(u32_at(&after, 12), 5);
    assert_eq!(u64_at(&after, 0), u64_at(&before, 0), "r_big kept");
    assert_eq!(&after[16..24], &before[16..24], "r_pair kept");
}
