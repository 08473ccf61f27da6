//! `gpubpf load NEW --replace OLD` and `unload --wait`, end to end: the new object takes the
//! old one's place in exactly one registry generation (a reader never sees neither nor
//! both, also under another name), keeps its maps by name with their contents while `--set`
//! changes a knob, removes the maps the new object does not use unless pinned, refuses a
//! missing name and a changed map definition (unless `--recreate-maps`); `unload --wait`
//! says how many live processes acknowledged the unload.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang. The
//! live-process test runs the mock CUDA stack of `shim_e2e.rs` (skipped without `cc`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use gpubpf_runtime::registry::Registry;
use serde_json::{json, Value};

use common::cli::{build_object, ok, ok_json as j, run_with_registry as run, with_policies};
use common::shim::{session, Session};

/// Two maps and a knob.
const V1: &str = r#"
#include "gpubpf.h"
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} extra SEC(".maps");
const volatile __u64 step = 1;
SEC("cuda/cuMemAlloc")
int count(void *ctx)
{
	__u32 k = 1, z = 0;
	__u64 *v = bpf_map_lookup_elem(&counts, &k);
	if (v)
		__sync_fetch_and_add(v, step);
	__u64 *e = bpf_map_lookup_elem(&extra, &z);
	if (e)
		__sync_fetch_and_add(e, 1);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"#;

/// V1 without `extra`.
const V2: &str = r#"
#include "gpubpf.h"
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");
const volatile __u64 step = 1;
SEC("cuda/cuMemAlloc")
int count(void *ctx)
{
	__u32 k = 1;
	__u64 *v = bpf_map_lookup_elem(&counts, &k);
	if (v)
		__sync_fetch_and_add(v, step);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"#;

/// V2 with a 16-byte value in `counts`.
const V3: &str = r#"
#include "gpubpf.h"
struct pair {
	__u64 n;
	__u64 last;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct pair);
} counts SEC(".maps");
const volatile __u64 step = 1;
SEC("cuda/cuMemAlloc")
int count(void *ctx)
{
	__u32 k = 1;
	struct pair *v = bpf_map_lookup_elem(&counts, &k);
	if (v)
		__sync_fetch_and_add(&v->n, step);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"#;

/// Builds the sources into `dir` (`v1.o`, …); `None` without clang.
fn build_versions(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut objs = Vec::new();
    for (name, src) in [("v1", V1), ("v2", V2), ("v3", V3)] {
        let c = dir.join(format!("{name}.bpf.c"));
        std::fs::write(&c, src).unwrap();
        let o = dir.join(format!("{name}.o"));
        if !build_object(&c, &o, &dir.join("cache")) {
            return None;
        }
        objs.push(o);
    }
    Some(objs)
}

fn fails(out: &std::process::Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{err}");
    err
}

fn map_names(home: &Path) -> Vec<String> {
    j(&run(home, &["-j", "maps", "list"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

fn loaded(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = j(&run(home, &["-j", "prog", "list"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["object"].as_str().unwrap().to_string())
        .collect();
    names.dedup();
    names
}

/// `bytes` of key 7 of `proc_usage` (the formatted value of bpftool-style JSON).
fn usage_bytes(home: &Path) -> Value {
    j(&run(
        home,
        &["-j", "maps", "lookup", "proc_usage", "--key", "7"],
    ))["formatted"]["value"]["bytes"]
        .clone()
}

/// The `limit_bytes` knob of object `object` (its `.rodata`).
fn limit_bytes(home: &Path, object: &str) -> Value {
    let rodata = format!("{object}.rodata");
    j(&run(home, &["-j", "maps", "lookup", &rodata, "--key", "0"]))["formatted"]["value"]
        ["limit_bytes"]
        .clone()
}

/// quota's maps are pinned by name (`proc_usage`, …: LIBBPF_PIN_BY_NAME); only its
/// `.rodata` is the object's own.
const QUOTA_PINNED: [&str; 5] = [
    "dev_usage",
    "proc_usage",
    "quota_allocs",
    "quota_limits",
    "user_usage",
];

/// The registry's maps: quota's pinned ones and `OBJECT.rodata`, sorted by name.
fn quota_maps(object: &str) -> Vec<String> {
    let mut names: Vec<String> = QUOTA_PINNED.iter().map(|m| m.to_string()).collect();
    names.push(format!("{object}.rodata"));
    names.push(format!("{object}.quota_pending"));
    names.sort();
    names
}

/// quota's maps are pinned by name: a replacement (same name, loaded again, or another
/// name) binds them again with their contents, never "takes them over"; the knob changes.
#[test]
fn replace_keeps_map_contents_and_changes_the_knob() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    let first = j(&run(&home, &["-j", "load", q, "--set", "limit_bytes=1GiB"]));
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "proc_usage",
            "--key",
            "7",
            "--value",
            "bytes=123",
        ],
    ));

    // Same name (the default): counters kept, the knob changed, one generation.
    let reg = Registry::open(&home).unwrap();
    let g = reg.generation();
    let v = j(&run(
        &home,
        &[
            "-j",
            "load",
            q,
            "--replace",
            "quota",
            "--set",
            "limit_bytes=2GiB",
            "--set",
            "log_denials=0",
        ],
    ));
    assert_eq!(reg.generation(), g + 1);
    assert_eq!(v["generation"], g + 1);
    assert_eq!(v["name"], "quota");
    assert_eq!(v["replaced"], json!({"id": first["id"], "name": "quota"}));
    assert!(v["id"].as_u64().unwrap() > first["id"].as_u64().unwrap());
    assert_eq!(v["maps_taken_over"], json!([]));
    assert_eq!(v["maps_removed"], json!([]));
    assert_eq!(
        v["globals_parsed"][0],
        json!({"name": "limit_bytes", "given": "2GiB", "value": 2147483648u64,
               "type": "const volatile __u64"})
    );
    assert_eq!(usage_bytes(&home), 123);
    assert_eq!(limit_bytes(&home, "quota"), 2147483648u64);
    assert_eq!(map_names(&home), quota_maps("quota"));
    let text = ok(&run(&home, &["prog", "show", "quota"]));
    assert!(
        text.contains("global limit_bytes = 2147483648 (--set limit_bytes=2GiB)"),
        "{text}"
    );

    // Loaded again under its name without --replace: the same, in one generation.
    let g = reg.generation();
    let again = j(&run(
        &home,
        &["-j", "load", q, "--set", "limit_bytes=1536MiB"],
    ));
    assert_eq!(reg.generation(), g + 1);
    assert_eq!(again["replaced"], json!({"id": v["id"], "name": "quota"}));
    assert_eq!(again["maps_taken_over"], json!([]));
    assert_eq!(usage_bytes(&home), 123);
    assert_eq!(limit_bytes(&home, "quota"), 1610612736u64);
    assert_eq!(loaded(&home), ["quota"]);

    // Under another name: the pinned maps are bound again (contents kept), only the old
    // object's own `.rodata` is taken over (and rewritten), in one generation.
    let g = reg.generation();
    let v = j(&run(
        &home,
        &[
            "-j",
            "load",
            q,
            "--replace",
            "quota",
            "--name",
            "q2",
            "--set",
            "limit_bytes=3GiB",
        ],
    ));
    assert_eq!(reg.generation(), g + 1);
    assert_eq!(
        v["maps_taken_over"],
        json!([{"from": "quota.quota_pending", "to": "q2.quota_pending"},
               {"from": "quota.rodata", "to": "q2.rodata"}])
    );
    assert_eq!(loaded(&home), ["q2"]);
    assert_eq!(map_names(&home), quota_maps("q2"));
    assert_eq!(usage_bytes(&home), 123);
    let shown = j(&run(&home, &["-j", "maps", "show", "proc_usage"]));
    assert_eq!(shown["name"], "proc_usage");
    assert_eq!(shown["pinned"], true);
    assert_eq!(shown["used_by"], json!(["q2"]));
    assert_eq!(limit_bytes(&home, "q2"), 3221225472u64);
    let text = ok(&run(&home, &["prog", "show", "q2"]));
    assert!(text.contains("replaced quota (id "), "{text}");
}

/// A map of the object's own (`OLD.m`, not pinned) goes to a replacement under another
/// name with its contents (`NEW.m`, one map under a second name).
#[test]
fn private_maps_are_taken_over_with_their_contents_under_another_name() {
    let d = tempfile::tempdir().unwrap();
    let Some(objs) = build_versions(d.path()) else {
        return;
    };
    let v1 = objs[0].to_str().unwrap();
    let home = d.path().join("reg");
    ok(&run(&home, &["load", v1, "--name", "pol"]));
    ok(&run(
        &home,
        &["maps", "update", "pol.counts", "--key", "1", "--value", "5"],
    ));
    let reg = Registry::open(&home).unwrap();
    let g = reg.generation();
    let v = j(&run(
        &home,
        &[
            "-j",
            "load",
            v1,
            "--replace",
            "pol",
            "--name",
            "p2",
            "--set",
            "step=2",
        ],
    ));
    assert_eq!(reg.generation(), g + 1);
    assert_eq!(
        v["maps_taken_over"],
        json!([
            {"from": "pol.counts", "to": "p2.counts"},
            {"from": "pol.extra", "to": "p2.extra"},
            {"from": "pol.rodata", "to": "p2.rodata"}
        ])
    );
    assert_eq!(loaded(&home), ["p2"]);
    assert_eq!(map_names(&home), ["p2.counts", "p2.extra", "p2.rodata"]);
    let kept = j(&run(
        &home,
        &["-j", "maps", "lookup", "p2.counts", "--key", "1"],
    ));
    assert_eq!(kept["formatted"]["value"], 5);
    let step = j(&run(
        &home,
        &["-j", "maps", "lookup", "p2.rodata", "--key", "0"],
    ));
    assert_eq!(step["formatted"]["value"]["step"], 2);
}

#[test]
fn maps_the_new_object_does_not_use_go_unless_pinned() {
    let d = tempfile::tempdir().unwrap();
    let Some(objs) = build_versions(d.path()) else {
        return;
    };
    let [v1, v2] = [objs[0].to_str().unwrap(), objs[1].to_str().unwrap()];
    let home = d.path().join("reg");
    ok(&run(&home, &["load", v1, "--name", "pol"]));
    let v = j(&run(&home, &["-j", "load", v2, "--replace", "pol"]));
    assert_eq!(v["maps_removed"], json!(["pol.extra"]));
    assert_eq!(map_names(&home), ["pol.counts", "pol.rodata"]);
    // Pinned, it stays.
    ok(&run(&home, &["load", v1, "--replace", "pol"]));
    ok(&run(&home, &["maps", "pin", "pol.extra"]));
    let v = j(&run(&home, &["-j", "load", v2, "--replace", "pol"]));
    assert_eq!(v["maps_removed"], json!([]));
    assert_eq!(map_names(&home), ["pol.counts", "pol.extra", "pol.rodata"]);
}

#[test]
fn a_changed_map_definition_is_refused_unless_recreated() {
    let d = tempfile::tempdir().unwrap();
    let Some(objs) = build_versions(d.path()) else {
        return;
    };
    let [v2, v3] = [objs[1].to_str().unwrap(), objs[2].to_str().unwrap()];
    let home = d.path().join("reg");
    ok(&run(&home, &["load", v2, "--name", "pol"]));
    ok(&run(
        &home,
        &["maps", "update", "pol.counts", "--key", "1", "--value", "5"],
    ));
    let reg = Registry::open(&home).unwrap();
    let g = reg.generation();
    let err = fails(&run(&home, &["load", v3, "--replace", "pol"]), 1);
    assert!(
        err.contains("map `pol.counts` changed its definition (value 8B -> 16B)")
            && err.contains("--recreate-maps"),
        "{err}"
    );
    assert_eq!(reg.generation(), g, "a refused replacement changes nothing");
    let kept = j(&run(
        &home,
        &["-j", "maps", "lookup", "pol.counts", "--key", "1"],
    ));
    assert_eq!(kept["formatted"]["value"], 5);
    // Under another name the old object's map is named.
    let err = fails(
        &run(&home, &["load", v3, "--replace", "pol", "--name", "p2"]),
        1,
    );
    assert!(err.contains("map `pol.counts` changed"), "{err}");
    assert!(!map_names(&home).iter().any(|m| m.starts_with("p2.")));

    let v = j(&run(
        &home,
        &["-j", "load", v3, "--replace", "pol", "--recreate-maps"],
    ));
    assert_eq!(v["maps_recreated"], json!(["pol.counts"]));
    let shown = j(&run(&home, &["-j", "maps", "show", "pol.counts"]));
    assert_eq!(shown["value_size"], 16, "{shown}");
    assert_eq!(shown["entries"], 0, "{shown}");
}

#[test]
fn replacing_a_name_that_is_not_loaded_fails_and_changes_nothing() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    let err = fails(&run(&home, &["load", q, "--replace", "quota"]), 1);
    assert!(
        err.contains("cannot replace `quota`: no loaded program has that name (nothing is loaded"),
        "{err}"
    );
    ok(&run(&home, &["load", q, "--name", "a"]));
    ok(&run(&home, &["load", q, "--name", "b"]));
    let reg = Registry::open(&home).unwrap();
    let g = reg.generation();
    let err = fails(&run(&home, &["load", q, "--replace", "nope"]), 1);
    assert!(err.contains("(loaded: a, b)"), "{err}");
    let err = fails(
        &run(&home, &["load", q, "--replace", "a", "--name", "b"]),
        1,
    );
    assert!(err.contains("`b` is loaded too"), "{err}");
    assert_eq!(reg.generation(), g);
    assert_eq!(loaded(&home), ["a", "b"]);
}

/// 200 replacements back and forth between two names while a thread of this process takes
/// snapshots as fast as it can: each moves the generation by exactly one, and no snapshot
/// lacks the object or holds both.
#[test]
fn replace_is_one_generation_and_never_neither_nor_both() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    ok(&run(&home, &["load", q, "--name", "a"]));
    let reg = Registry::open(&home).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut snapshots = 0u64;
            while !done.load(Ordering::Acquire) {
                let snap = reg.snapshot().unwrap();
                let names: Vec<&str> = snap.objects.iter().map(|o| o.name.as_str()).collect();
                assert!(
                    names == ["a"] || names == ["b"],
                    "generation {}: {names:?}",
                    snap.generation
                );
                snapshots += 1;
            }
            snapshots
        });
        let mut names = ("a", "b");
        for i in 0..200 {
            let g = reg.generation();
            let out = run(&home, &["load", q, "--replace", names.0, "--name", names.1]);
            if !out.status.success() {
                done.store(true, Ordering::Release);
            }
            ok(&out);
            assert_eq!(reg.generation(), g + 1, "replacement {i}");
            names = (names.1, names.0);
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 200);
    });
    assert_eq!(loaded(&home), ["a"]);
}

#[test]
fn unload_wait_reports_the_processes_that_acknowledged() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    ok(&run(&home, &["load", q, "--name", "a"]));
    ok(&run(&home, &["load", q, "--name", "b"]));
    ok(&run(&home, &["load", q, "--name", "c"]));
    // No live process: returns at once, saying so.
    let text = ok(&run(&home, &["prog", "unload", "a", "--wait"]));
    assert!(text.contains("acknowledged by 0 process(es)"), "{text}");
    let reg = Registry::open(&home).unwrap();
    let g = reg.generation();
    let v = j(&run(&home, &["-j", "unload", "b", "--wait=5s"]));
    assert_eq!(v["acknowledged_by"], 0);
    assert_eq!(v["generation"], g + 1);

    // A registered process that acknowledges what it sees.
    let slot = reg.register_process().unwrap();
    slot.ack(reg.generation());
    let seen = reg.generation();
    std::thread::scope(|s| {
        let acker = s.spawn(|| {
            let g = reg
                .control()
                .wait_change(seen, std::time::Duration::from_secs(30));
            slot.ack(g);
            g
        });
        let text = ok(&run(&home, &["prog", "unload", "c", "--wait=30s"]));
        assert!(text.contains("acknowledged by 1 process(es)"), "{text}");
        assert_eq!(acker.join().unwrap(), seen + 1);
    });
    // One that does not: the wait fails after its timeout, naming it.
    ok(&run(&home, &["load", q, "--name", "d"]));
    let err = fails(&run(&home, &["unload", "d", "--wait=200ms"]), 1);
    assert!(
        err.contains(&format!("still waiting for pid {}", std::process::id())),
        "{err}"
    );
    assert!(loaded(&home).is_empty(), "the unload itself happened");
}

/// The README's story on the mock stack: an application runs under the shim with a 500-byte
/// limit (its 1000-byte allocation is refused), `load --replace quota --set
/// limit_bytes=2000 --wait` raises the limit while it runs, the process acknowledges, its
/// next allocation goes through, and `proc_usage` kept the refusal counted before.
#[test]
fn a_live_process_picks_up_a_replacement_and_keeps_its_counters() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").unwrap();
    let q = quota.to_str().unwrap();
    ok(&run(
        &home,
        &[
            "load",
            q,
            "--set",
            "limit_bytes=500",
            "--set",
            "log_denials=0",
        ],
    ));
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let child = mock
        .command(&mock.app_dyn, &home)
        .arg("proc")
        .arg("live")
        .arg(&ready)
        .arg(&go)
        .arg("1000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    common::process::wait_for_files(&[&ready], "application never got ready");
    let g = Registry::open(&home).unwrap().generation();
    let v = j(&run(
        &home,
        &[
            "-j",
            "load",
            q,
            "--replace",
            "quota",
            "--set",
            "limit_bytes=2000",
            "--set",
            "log_denials=0",
            "--wait=60s",
        ],
    ));
    assert_eq!(v["generation"], g + 1);
    assert_eq!(v["acknowledged_by"], 1, "{v}");
    std::fs::write(&go, b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines,
        [
            "before 2",
            "after 0",
            "mock alloc=1 free=0 launch=0 launch_ptsz=0 getinfo=0"
        ]
    );
    let usage = j(&run(
        &home,
        &[
            "-j",
            "maps",
            "lookup",
            "proc_usage",
            "--key",
            &pid.to_string(),
        ],
    ));
    assert_eq!(
        usage["formatted"]["value"],
        json!({"bytes": 1000, "allocs": 1, "frees": 0, "denied": 1}),
        "the refusal counted before the replacement is kept"
    );
}
