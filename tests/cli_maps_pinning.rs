//! Map scope and lifetime as in libbpf/bpftool: maps are private to their object
//! (`OBJECT.NAME`; loading `trace.o` again as `t2` does not share `stats`), carried
//! over when the same name is loaded again, shared across objects only when declared
//! `__uint(pinning, LIBBPF_PIN_BY_NAME)`; unload removes the maps no loaded object uses,
//! unless pinned (`gpubpf maps pin/unpin`). A plain map name finds the one object's map.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::Path;

use serde_json::{json, Value};

use common::cli::{ok, ok_json as j, run_with_registry as run, with_policies};

fn map_names(home: &Path) -> Vec<String> {
    j(&run(home, &["-j", "maps", "list"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

fn bindings(v: &Value) -> Vec<(String, bool)> {
    v["maps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["registry_name"].as_str().unwrap().to_string(),
                m["created"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn maps_are_private_unless_pinned_and_go_with_their_last_user() {
    let Some((_d, home, [trace])) = with_policies(["policies/trace.bpf.c"]) else {
        return;
    };
    let q = trace.to_str().unwrap();

    // Two loads of one object: two sets of maps, nothing counted twice.
    ok(&run(&home, &["load", q]));
    let v = j(&run(&home, &["-j", "load", q, "--name", "t2"]));
    assert_eq!(
        bindings(&v),
        [
            ("t2.start".to_string(), true),
            ("t2.stats".to_string(), true),
            ("t2.latency_hist".to_string(), true),
            ("t2.events".to_string(), true),
            ("t2.rodata".to_string(), true),
            ("t2.bss".to_string(), true),
        ]
    );
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "trace.stats",
            "--key",
            "7",
            "--value",
            "calls=1",
        ],
    ));
    assert_eq!(
        run(&home, &["maps", "lookup", "t2.stats", "--key", "7"])
            .status
            .code(),
        Some(1),
        "t2 has its own stats"
    );
    // A plain name is the object's map when one object has it, else an error naming them.
    let out = run(&home, &["maps", "dump", "stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("t2.stats") && err.contains("trace.stats"),
        "{err}"
    );

    // Unload: the maps no loaded object uses go.
    ok(&run(&home, &["prog", "unload", "t2"]));
    assert!(
        !map_names(&home).iter().any(|n| n.starts_with("t2.")),
        "{:?}",
        map_names(&home)
    );
    let l = j(&run(
        &home,
        &["-j", "maps", "lookup", "stats", "--key", "7"],
    ));
    assert_eq!(l["formatted"]["value"]["calls"], 1);

    // Loading the same name again carries the maps over.
    let v = j(&run(
        &home,
        &["-j", "load", q, "--set", "min_latency_ns=1000"],
    ));
    assert!(bindings(&v).iter().all(|(_, created)| !created), "{v}");
    assert_eq!(
        j(&run(
            &home,
            &["-j", "maps", "lookup", "trace.stats", "--key", "7"]
        ))["formatted"]["value"]["calls"],
        1
    );

    // maps pin keeps a map after unload; unpin releases it.
    ok(&run(&home, &["maps", "pin", "stats"]));
    assert_eq!(
        j(&run(&home, &["-j", "maps", "show", "trace.stats"]))["pinned"],
        true
    );
    let u = j(&run(&home, &["-j", "prog", "unload", "trace"]));
    assert_eq!(u["maps_kept"], json!(["trace.stats"]));
    assert_eq!(map_names(&home), ["trace.stats"]);
    let out = ok(&run(&home, &["maps", "unpin", "trace.stats"]));
    assert!(out.contains("removed"), "{out}");
    assert!(map_names(&home).is_empty());
    let out = run(&home, &["maps", "unpin", "trace.stats"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn pinned_by_name_maps_are_shared_and_kept() {
    let Some((_d, home, [shared])) = with_policies(["tests/data/pinning/shared.bpf.c"]) else {
        return;
    };
    let s = shared.to_str().unwrap();
    let a = j(&run(&home, &["-j", "load", s, "--name", "a"]));
    let b = j(&run(&home, &["-j", "load", s, "--name", "b"]));
    assert_eq!(
        bindings(&a),
        [
            ("shared_counts".to_string(), true),
            ("a.local".to_string(), true)
        ]
    );
    assert_eq!(
        bindings(&b),
        [
            ("shared_counts".to_string(), false),
            ("b.local".to_string(), true)
        ]
    );
    assert_eq!(
        j(&run(&home, &["-j", "maps", "show", "shared_counts"]))["used_by"],
        json!(["a", "b"])
    );
    ok(&run(&home, &["prog", "unload", "a"]));
    ok(&run(&home, &["prog", "unload", "b"]));
    assert_eq!(map_names(&home), ["shared_counts"]);
    let out = ok(&run(&home, &["maps", "unpin", "shared_counts"]));
    assert!(out.contains("removed"), "{out}");
    assert!(map_names(&home).is_empty());
}
