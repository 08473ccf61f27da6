//! End-to-end tests of `gpubpf load` and `gpubpf prog …` with policies compiled by clang
//! (`gpubpf build`): verification (exit code 3 and the diagnostic on rejection), map
//! binding by name (created, reused with their contents, conflicting definitions of a
//! pinned map named; private maps and unload in `cli_maps_pinning.rs`),
//! global data (`--set` into `.rodata`, `.bss` kept across reloads), typed dumps of the
//! loaded maps, and the registry record (attach point, phase, priority, map names).
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::{Path, PathBuf};

use gpubpf_runtime::registry::{Phase, Registry, RegistryError};
use serde_json::Value;

use common::cli::{ok, ok_json as json, run_with_registry as run};

const COUNTER: &str = r#"
#include "gpubpf.h"

struct stats {
	__u64 calls;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alloc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

const volatile __u64 limit_bytes = 1024;
__u64 total;

SEC("cuda/cudaMalloc")
int count_alloc(struct gpubpf_cuMemAlloc_entry *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct stats *s = bpf_map_lookup_elem(&alloc_stats, &pid);
	if (!s) {
		struct stats zero = {};
		bpf_map_update_elem(&alloc_stats, &pid, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&alloc_stats, &pid);
		if (!s)
			return 0;
	}
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->bytes, ctx->args.bytesize);
	__sync_fetch_and_add(&total, 1);
	bpf_ringbuf_output(&events, &pid, sizeof(pid), 0);
	if (ctx->args.bytesize > limit_bytes)
		return GPUBPF_CUDA_ERROR_OUT_OF_MEMORY;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
"#;

/// Same pinned map name, other value type: must conflict.
const CONFLICT: &str = r#"
#include "gpubpf.h"
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alloc_stats SEC(".maps");
SEC("cudaret/cuMemFree")
int f(void *ctx)
{
	__u32 k = 1;
	__u64 *v = bpf_map_lookup_elem(&alloc_stats, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"#;

/// Dereferences a lookup result without a NULL check.
const UNSAFE: &str = r#"
#include "gpubpf.h"
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} arr SEC(".maps");
SEC("cuda/cuMemAlloc")
int bad(void *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&arr, &k);
	return *v;
}
char LICENSE[] SEC("license") = "GPL";
"#;

fn build(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let o = dir.join(format!("{name}.o"));
    ok(&run(
        dir,
        &["build", c.to_str().unwrap(), "-o", o.to_str().unwrap()],
    ));
    o
}

#[test]
fn load_bind_reload_conflict_unload() {
    if !common::cli::have_clang() {
        eprintln!("skipped: clang not found");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    let counter = build(d.path(), "counter", COUNTER);
    let conflict = build(d.path(), "conflict", CONFLICT);
    let bad = build(d.path(), "bad", UNSAFE);

    let j = json(&run(
        &home,
        &[
            "-j",
            "load",
            counter.to_str().unwrap(),
            "--set",
            "limit_bytes=4096",
            "--priority",
            "-2",
        ],
    ));
    assert_eq!(j["name"], "counter");
    assert_eq!(j["programs"][0]["links"][0]["attach_point"], "cuMemAlloc");
    assert_eq!(j["programs"][0]["links"][0]["requested"], "cudaMalloc");
    assert_eq!(j["programs"][0]["links"][0]["phase"], "entry");
    assert_eq!(j["programs"][0]["links"][0]["priority"], -2);
    let g1 = j["generation"].as_u64().unwrap();

    // What the shim will read: the record, the original object, the map names.
    let reg = Registry::open(&home).unwrap();
    let rec = reg.object("counter").unwrap();
    assert_eq!(rec.programs[0].links[0].phase, Phase::Entry);
    let names: Vec<&str> = rec.maps.iter().map(|m| m.registry_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "alloc_stats",
            "counter.events",
            "counter.rodata",
            "counter.bss"
        ]
    );
    assert_eq!(
        reg.object_bytes("counter").unwrap(),
        std::fs::read(&counter).unwrap()
    );
    assert_eq!(rec.globals["limit_bytes"], "4096");

    // Global data, typed.
    let r = json(&run(&home, &["-j", "maps", "dump", "counter.rodata"]));
    assert_eq!(
        r,
        serde_json::json!([{
            "key": ["0x00", "0x00", "0x00", "0x00"],
            "value": ["0x00", "0x10", "0x00", "0x00", "0x00", "0x00", "0x00", "0x00"],
            "formatted": {"key": 0, "value": {"limit_bytes": 4096}},
        }])
    );
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "counter.bss",
            "--key",
            "0",
            "--value",
            "total=77",
        ],
    ));
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "alloc_stats",
            "--key",
            "42",
            "--value",
            "calls=3,bytes=300",
        ],
    ));

    // Reload under the same name with another --set: rodata rewritten, state kept.
    let j = json(&run(
        &home,
        &[
            "-j",
            "load",
            counter.to_str().unwrap(),
            "--set",
            "limit_bytes=9",
            "--attach",
            "cuMemAlloc_v2",
        ],
    ));
    assert!(j["generation"].as_u64().unwrap() > g1);
    assert!(j["maps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["created"] == false));
    assert_eq!(j["programs"][0]["links"][0]["attach_point"], "cuMemAlloc");
    assert_eq!(j["programs"][0]["links"][0]["requested"], "cuMemAlloc_v2");
    let r = json(&run(&home, &["-j", "maps", "dump", "counter.rodata"]));
    assert_eq!(r[0]["formatted"]["value"]["limit_bytes"], 9);
    assert_eq!(
        json(&run(&home, &["-j", "maps", "dump", "counter.bss"]))[0]["formatted"]["value"]["total"],
        77
    );
    let s = json(&run(
        &home,
        &["-j", "maps", "lookup", "alloc_stats", "--key", "42"],
    ));
    assert_eq!(
        s["formatted"]["value"],
        serde_json::json!({"calls": 3, "bytes": 300})
    );

    // Conflicting definition of `alloc_stats`: both definitions named.
    let out = run(&home, &["load", conflict.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("alloc_stats") && err.contains("value 8B") && err.contains("value 16B"),
        "{err}"
    );
    assert!(
        matches!(
            reg.object("conflict"),
            Err(RegistryError::NoSuchProgram { .. })
        ),
        "nothing recorded on failure"
    );

    // Verifier rejection: exit code 3, the diagnostic, and nothing recorded.
    let out = run(&home, &["load", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rejected by the verifier") && err.contains("NULL check"),
        "{err}"
    );
    let out = run(&home, &["-j", "load", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["detail"]["program"], "bad");
    assert!(e["detail"]["verifier"]["pc"].is_u64(), "{e}");
    assert!(
        reg.map_path("arr").map(|p| !p.exists()).unwrap(),
        "no map created on rejection"
    );

    // Unknown attach point, unreadable object.
    let out = run(
        &home,
        &["load", counter.to_str().unwrap(), "--attach", "cudaMallocc"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean"));
    let junk = d.path().join("junk.o");
    std::fs::write(&junk, b"not an elf").unwrap();
    assert_eq!(
        run(&home, &["load", junk.to_str().unwrap()]).status.code(),
        Some(4)
    );

    // prog list / show / unload.
    let l = json(&run(&home, &["-j", "prog", "list"]));
    assert_eq!(l.as_array().unwrap().len(), 1);
    assert_eq!(l[0]["links"][0]["attach_point"], "cuMemAlloc");
    let t = ok(&run(&home, &["prog", "list"]));
    assert!(t.contains("count_alloc") && t.contains("cuMemAlloc"), "{t}");
    let s = json(&run(&home, &["-j", "prog", "show", "counter"]));
    assert_eq!(s["object_sha256"].as_str().unwrap().len(), 64);
    let out = run(&home, &["maps", "rm", "alloc_stats"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("used by `counter`"));
    let u = json(&run(&home, &["-j", "prog", "unload", "counter"]));
    assert_eq!(
        u["maps_removed"],
        serde_json::json!(["counter.events", "counter.rodata", "counter.bss"])
    );
    assert_eq!(u["maps_kept"], serde_json::json!(["alloc_stats"]));
    assert!(json(&run(&home, &["-j", "prog", "list"]))
        .as_array()
        .unwrap()
        .is_empty());
    // A pinned map outlives its programs until removed.
    assert_eq!(
        json(&run(
            &home,
            &["-j", "maps", "lookup", "alloc_stats", "--key", "42"]
        ))["formatted"]["value"]["calls"],
        3
    );
    ok(&run(&home, &["maps", "rm", "alloc_stats"]));
    let out = run(&home, &["prog", "show", "counter"]);
    assert_eq!(out.status.code(), Some(1));
}
