//! End-to-end tests of `gpubpf maps …` against a registry in a temporary `GPUBPF_HOME`,
//! with maps created and kept live (updated concurrently) by this test process.
//!
//! The binary belongs to another package, so `CARGO_BIN_EXE_*` is not available: the test
//! builds it with `cargo build -p gpubpf-loader-cli --bin gpubpf` (a no-op when it is up to
//! date) into the target directory of this test executable.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use gpubpf_runtime::maps::{mapping, FieldDesc, MapMeta, MapSpec, MapType, TypeDesc};
use gpubpf_runtime::registry::Registry;
use serde_json::Value;

use common::cli::{ok, ok_json as json, run_with_registry as run};

fn u(name: &str, size: u32) -> TypeDesc {
    TypeDesc::Int {
        name: name.into(),
        size,
        signed: false,
        is_bool: false,
    }
}

/// `struct stats { __u64 calls; __u64 bytes; char comm[8]; }`, keyed by `__u32`.
fn stats_meta() -> MapMeta {
    MapMeta {
        name: "stats".into(),
        key_type: Some(u("__u32", 4)),
        value_type: Some(TypeDesc::Struct {
            name: "stats".into(),
            size: 24,
            fields: vec![
                FieldDesc {
                    name: "calls".into(),
                    bit_offset: 0,
                    bit_size: 0,
                    ty: u("__u64", 8),
                },
                FieldDesc {
                    name: "bytes".into(),
                    bit_offset: 64,
                    bit_size: 0,
                    ty: u("__u64", 8),
                },
                FieldDesc {
                    name: "comm".into(),
                    bit_offset: 128,
                    bit_size: 0,
                    ty: TypeDesc::Array {
                        elem: Box::new(TypeDesc::Int {
                            name: "char".into(),
                            size: 1,
                            signed: true,
                            is_bool: false,
                        }),
                        len: 8,
                    },
                },
            ],
        }),
        global_section: None,
    }
}

fn stats_spec() -> MapSpec {
    MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 24,
        max_entries: 32,
        flags: 0,
    }
}

#[test]
fn dump_of_a_live_map_is_typed_in_text_and_json() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    let reg = Registry::open(&home).unwrap();
    let map = reg
        .writer()
        .unwrap()
        .create_map("stats", &stats_spec(), &stats_meta())
        .unwrap();
    for k in 1u32..=3 {
        let mut v = [0u8; 24];
        v[16..19].copy_from_slice(b"app");
        map.update(&k.to_ne_bytes(), &v, 0).unwrap();
    }
    // Keep the map live: another thread counts calls with atomics while the CLI reads.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for k in 1u32..=3 {
                    // SAFETY: a 4-byte key.
                    let p = unsafe { map.lookup_ptr(k.to_ne_bytes().as_ptr()) };
                    // SAFETY: the value is 24 bytes, 8-aligned, in the shared mapping.
                    let v = unsafe { &*(p as *const [AtomicU64; 2]) };
                    v[0].fetch_add(1, Ordering::Relaxed);
                    v[1].fetch_add(4096, Ordering::Relaxed);
                }
            }
        })
    };
    let text = ok(&run(&home, &["maps", "dump", "stats"]));
    assert!(text.contains("Found 3 elements"), "{text}");
    // bpftool spells the object `map`, and takes keys as separate byte words.
    let alias = ok(&run(&home, &["map", "dump", "stats"]));
    assert!(alias.contains("Found 3 elements"), "{alias}");
    for key in [
        &["0x02", "0x00", "0x00", "0x00"][..],
        &["hex", "02", "00", "00", "00"],
        &["hex", "02000000"],
        &["2"],
    ] {
        let mut args = vec!["-j", "maps", "lookup", "stats", "--key"];
        args.extend_from_slice(key);
        let j = json(&run(&home, &args));
        // bpftool's JSON: raw bytes, and the BTF-decoded entry under `formatted`.
        assert_eq!(
            j["key"],
            serde_json::json!(["0x02", "0x00", "0x00", "0x00"])
        );
        assert_eq!(j["value"].as_array().map(Vec::len), Some(24), "{j}");
        assert_eq!(j["formatted"]["key"].as_u64(), Some(2), "{key:?}: {j}");
    }
    assert!(text.contains("\"comm\":\"app\""), "{text}");
    assert!(text.contains("key: 1 "), "{text}");
    let j = json(&run(&home, &["-j", "maps", "dump", "stats"]));
    let rows = j.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let mut keys: Vec<u64> = rows
        .iter()
        .map(|r| r["formatted"]["key"].as_u64().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, vec![1, 2, 3]);
    for r in rows {
        let v = &r["formatted"]["value"];
        let calls = v["calls"].as_u64().expect("calls is a number");
        let bytes = v["bytes"].as_u64().expect("bytes is a number");
        assert!(calls > 0, "{r}");
        assert!(bytes >= calls * 4096 - 4096 * 2, "{r}");
        assert_eq!(v["comm"], "app");
        // Fields in declaration order, not sorted.
        let fields: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["calls", "bytes", "comm"], "{r}");
        let raw = r["key"].as_array().unwrap();
        assert_eq!(raw.len(), 4);
        assert!(raw.iter().all(|b| b.as_str().unwrap().starts_with("0x")));
    }
    // Pretty JSON is JSON too.
    let p = ok(&run(&home, &["-p", "maps", "dump", "stats"]));
    assert!(p.contains("\n  {"));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    // Typed lookup/update/delete.
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "stats",
            "--key",
            "9",
            "--value",
            "calls=5,bytes=0x10,comm=cli",
        ],
    ));
    let v = json(&run(
        &home,
        &["-j", "maps", "lookup", "stats", "--key", "9"],
    ));
    assert_eq!(
        v["formatted"]["value"],
        serde_json::json!({"calls": 5, "bytes": 16, "comm": "cli"})
    );
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "stats",
            "--key",
            "9",
            "--value",
            r#"{"calls": 6}"#,
            "--flags",
            "exist",
        ],
    ));
    assert_eq!(map.lookup(&9u32.to_ne_bytes()).unwrap().unwrap()[0], 6);
    let out = run(
        &home,
        &[
            "maps", "update", "stats", "--key", "9", "--value", "calls=1", "--flags", "noexist",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key already exists"));
    let out = run(
        &home,
        &["maps", "update", "stats", "--key", "9", "--value", "nope=1"],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no field `nope`"));
    ok(&run(&home, &["maps", "delete", "stats", "--key", "9"]));
    let out = run(&home, &["-j", "maps", "lookup", "stats", "--key", "9"]);
    assert_eq!(out.status.code(), Some(1));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(e["error"].as_str().unwrap().contains("not found"), "{e}");

    // list / show / clear / rm.
    let l = json(&run(&home, &["-j", "maps", "list"]));
    assert_eq!(l[0]["name"], "stats");
    assert_eq!(l[0]["type"], "hash");
    assert_eq!(l[0]["value_type"], "struct stats");
    let s = json(&run(&home, &["-j", "maps", "show", "stats"]));
    assert_eq!(s["entries"], 3);
    ok(&run(&home, &["maps", "clear", "stats"]));
    assert!(map.is_empty());
    ok(&run(&home, &["maps", "rm", "stats"]));
    assert!(json(&run(&home, &["-j", "maps", "list"]))
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn untyped_maps_use_hex_and_ring_buffers_show_counters() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    ok(&run(
        &home,
        &[
            "maps",
            "create",
            "raw",
            "--type",
            "hash",
            "--key-size",
            "3",
            "--value-size",
            "2",
            "--max-entries",
            "4",
        ],
    ));
    ok(&run(
        &home,
        &[
            "maps", "update", "raw", "--key", "01 02 03", "--value", "hex:beef",
        ],
    ));
    let j = json(&run(&home, &["-j", "maps", "dump", "raw"]));
    // Without types: only the raw bytes, as bpftool prints a map without BTF.
    assert_eq!(
        j,
        serde_json::json!([{"key": ["0x01", "0x02", "0x03"], "value": ["0xbe", "0xef"]}])
    );
    let out = run(&home, &["maps", "lookup", "raw", "--key", "7"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("without BTF"));

    let page = mapping::page_size().to_string();
    ok(&run(
        &home,
        &[
            "maps",
            "create",
            "events",
            "--type",
            "ringbuf",
            "--max-entries",
            &page,
        ],
    ));
    let reg = Registry::open(&home).unwrap();
    let ring = reg.open_map("events").unwrap();
    ring.ringbuf_output(&[1; 100]).unwrap();
    while ring.ringbuf_output(&[1; 1000]).is_ok() {}
    let j = json(&run(&home, &["-j", "maps", "dump", "events"]));
    assert_eq!(j["type"], "ringbuf");
    assert!(j["counters"]["dropped"].as_u64().unwrap() >= 1);
    assert!(j["counters"]["pending"].as_u64().unwrap() > 100);
    let t = ok(&run(&home, &["maps", "dump", "events"]));
    assert!(t.contains("dropped:"), "{t}");
    let recs = json(&run(&home, &["-j", "maps", "consume", "events"]));
    let recs = recs.as_array().unwrap();
    assert!(recs.len() >= 2);
    assert_eq!(recs[0], gpubpf_runtime::maps::types::hex(&[1; 100]));
    assert_eq!(ring.ringbuf_stats().unwrap().pending, 0);
    // The trace ring: printable records come out as text.
    reg.trace_ring()
        .unwrap()
        .ringbuf_output(b"app-1 [1] 0.1: n=42\n")
        .unwrap();
    let t = ok(&run(&home, &["maps", "consume", "trace"]));
    assert_eq!(t, "app-1 [1] 0.1: n=42\n");
    let out = run(&home, &["maps", "consume", "raw"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a ring buffer"));
}

#[test]
fn corrupted_maps_and_insecure_registries_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    ok(&run(
        &home,
        &[
            "maps",
            "create",
            "good",
            "--type",
            "array",
            "--value-size",
            "8",
            "--max-entries",
            "4",
        ],
    ));
    ok(&run(
        &home,
        &[
            "maps",
            "create",
            "bad",
            "--type",
            "array",
            "--value-size",
            "8",
            "--max-entries",
            "4",
        ],
    ));
    let bad = home.join("maps/bad");
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[20] ^= 0xff; // value_size
    std::fs::write(&bad, &bytes).unwrap();
    // The listing shows both, then fails (issue #14: a corrupt map file is an error).
    let listed = run(&home, &["-j", "maps", "list"]);
    assert!(!listed.status.success());
    // With -j the error follows the listing as its own JSON document.
    let mut docs = serde_json::Deserializer::from_slice(&listed.stdout).into_iter::<Value>();
    let l = docs.next().expect("a listing").expect("json listing");
    let err = docs.next().expect("an error").expect("json error");
    assert!(err.to_string().contains("could not be read"), "{err}");
    let rows = l.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let bad_row = rows.iter().find(|r| r["name"] == "bad").unwrap();
    assert!(
        bad_row["error"].as_str().unwrap().contains("corrupted"),
        "{bad_row}"
    );
    let out = run(&home, &["maps", "dump", "bad"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("checksum"));

    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(&home, &["maps", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to use registry directory"), "{err}");
    assert!(err.contains("writable by group or others"), "{err}");
    let out = run(&home, &["-j", "maps", "list"]);
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(e["error"].as_str().unwrap().contains("mode 0777"), "{e}");
}

/// Reading never creates a registry; a map file that cannot be read is listed with its
/// error and makes `maps list` fail after listing the rest.
#[test]
fn reads_create_no_registry_and_a_broken_map_fails_the_listing() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    let empty = ok(&run(&home, &["maps", "list"]));
    assert!(empty.starts_with("NAME"), "{empty}");
    assert_eq!(
        json(&run(&home, &["-j", "prog", "list"])),
        serde_json::json!([])
    );
    let show = run(&home, &["prog", "show", "quota"]);
    assert!(!show.status.success());
    assert!(
        String::from_utf8_lossy(&show.stderr).contains("nothing is loaded yet"),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    assert!(!home.exists(), "a read created {}", home.display());

    let reg = Registry::open(&home).unwrap();
    reg.writer()
        .unwrap()
        .create_map("stats", &stats_spec(), &stats_meta())
        .unwrap();
    std::fs::write(home.join("maps/broken"), b"not a map").unwrap();
    let out = run(&home, &["maps", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("stats") && text.contains("broken"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 map(s) could not be read"));
}

/// `maps show` without a name lists every map, as bpftool's `map show` does (text and JSON
/// the same as `maps list`), and never creates a registry.
#[test]
fn maps_show_without_a_name_lists_every_map() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    assert_eq!(
        ok(&run(&home, &["maps", "show"])),
        ok(&run(&home, &["maps", "list"]))
    );
    assert!(!home.exists(), "reading created a registry");
    for name in ["first", "second"] {
        ok(&run(
            &home,
            &[
                "maps",
                "create",
                name,
                "--type",
                "array",
                "--max-entries",
                "2",
            ],
        ));
    }
    let shown = ok(&run(&home, &["maps", "show"]));
    assert_eq!(shown, ok(&run(&home, &["maps", "list"])));
    assert!(
        shown.contains("first") && shown.contains("second"),
        "{shown}"
    );
    assert_eq!(
        json(&run(&home, &["-j", "maps", "show"])),
        json(&run(&home, &["-j", "maps", "list"]))
    );
}
