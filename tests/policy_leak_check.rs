//! `policies/leak_check.bpf.c`: unit tests with `gpubpf test-run` (an allocation is
//! recorded with its size, API, pid/tid and time; a failed one is not; a free removes
//! exactly its own entry and credits the summary; `min_size`; the pitch size) and end to
//! end on the mock CUDA stack: for every tracked family an application that exits holding
//! one of three allocations leaves exactly that one in `gpubpf maps dump leak_live`.
//!
//! Needs clang (and `cc` for the mock stack); prints `skipped: …` without them.

mod common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::cli::{ok_json, run_with_registry as cli, with_policies};
use common::shim::{session, Session};

fn object() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (d, home, [o]) = with_policies(["policies/leak_check.bpf.c"])?;
    Some((d, home, o))
}

/// `(map, key, after)` of every map change of the only run of `gpubpf -j test-run`.
fn changes(home: &Path, obj: &Path, args: &[&str]) -> Vec<(String, Value, Value)> {
    let mut a = vec!["-j", "test-run", obj.to_str().unwrap()];
    a.extend_from_slice(args);
    let out = ok_json(&cli(home, &a));
    out["runs"][0]["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["map"].as_str().unwrap().to_string(),
                c["key"].clone(),
                c["after"].clone(),
            )
        })
        .collect()
}

#[test]
fn allocations_are_recorded_and_frees_remove_exactly_their_own() {
    let Some((_d, home, lc)) = object() else {
        return;
    };
    let alloc = |extra: &[&str]| {
        let mut a = vec![
            "--prog",
            "leak_alloc",
            "--ctx",
            "hdr.pid=42",
            "--ctx",
            "hdr.tid=43",
            "--ctx",
            "args.bytesize=4096",
            "--ctx",
            "out.dptr=0x7f00",
        ];
        a.extend_from_slice(extra);
        changes(&home, &lc, &a)
    };
    let key = json!({"handle": 0x7f00, "pid": 42, "kind": 1});
    assert_eq!(
        alloc(&[]),
        [
            (
                "leak_live".into(),
                key.clone(),
                // No shim under `test-run`: the call site is unknown.
                json!({"size": 4096, "time_ns": 1_000_000_000u64, "pid": 42, "tid": 43,
                       "api_id": 303, "kind": 1, "site": ""})
            ),
            (
                "leak_summary".into(),
                json!(42),
                json!({"allocs": 1, "frees": 0, "live_bytes": 4096, "untracked": 0})
            ),
        ]
    );
    assert!(
        alloc(&["--ctx", "hdr.result=2"]).is_empty(),
        "failed: nothing"
    );
    assert!(
        alloc(&["--set", "min_size=4097"]).is_empty(),
        "below min_size"
    );
    assert_eq!(alloc(&["--set", "min_size=4096"]).len(), 2, "at min_size");

    // A free of pid 42's pointer removes its entry and credits its summary; the same
    // address freed by another process, or a failed free, changes nothing.
    let free = |pid: &str, extra: &[&str]| {
        let mut a = vec![
            "--prog",
            "leak_free",
            "--map-set",
            "leak_live",
            "handle=0x7f00 pid=42 kind=1",
            "size=4096 pid=42 tid=43 api_id=303 kind=1",
            "--map-set",
            "leak_summary",
            "42",
            "allocs=1 live_bytes=4096",
            "--ctx",
            pid,
            "--ctx",
            "args.dptr=0x7f00",
        ];
        a.extend_from_slice(extra);
        changes(&home, &lc, &a)
    };
    assert_eq!(
        free("hdr.pid=42", &[]),
        [
            ("leak_live".into(), key, Value::Null),
            (
                "leak_summary".into(),
                json!(42),
                json!({"allocs": 1, "frees": 1, "live_bytes": 0, "untracked": 0})
            ),
        ]
    );
    assert!(
        free("hdr.pid=7", &[]).is_empty(),
        "another process's pointer"
    );
    assert!(free("hdr.pid=42", &["--ctx", "hdr.result=1"]).is_empty());
}

#[test]
fn pitch_records_pitch_times_height() {
    let Some((_d, home, lc)) = object() else {
        return;
    };
    let c = changes(
        &home,
        &lc,
        &[
            "--prog",
            "leak_pitch",
            "--ctx",
            "hdr.pid=42",
            "--ctx",
            "args.WidthInBytes=500",
            "--ctx",
            "args.Height=3",
            "--ctx",
            "out.pPitch=512",
            "--ctx",
            "out.dptr=0x7f00",
        ],
    );
    assert_eq!(c[0].2["size"], 1536, "{c:?}");
}

/// Address and size of symbol `name` of `binary`, from `nm -S`.
fn symbol(binary: &Path, name: &str) -> (u64, u64) {
    let out = std::process::Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(binary)
        .output()
        .expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [addr, size, _, n] if n == name => Some((
                    u64::from_str_radix(addr, 16).ok()?,
                    u64::from_str_radix(size, 16).ok()?,
                )),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("no symbol {name} in {}: {text}", binary.display()))
}

#[test]
fn mock_stack_lists_what_each_process_never_freed() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let _ = tmp;
    let Some((_d, _, lc)) = object() else {
        return;
    };
    ok_json(&cli(&home, &["-j", "load", lc.to_str().unwrap()]));
    const SIZE: u64 = 65536;
    // Family -> GPUBPF_API_* of its allocating call and the kind of its handle.
    let families = [
        ("alloc", 303, 1),
        ("pitch", 308, 1),
        ("managed", 307, 1),
        ("async", 304, 1),
        ("pool", 305, 1),
        ("create", 310, 3),
    ];
    for (family, _, _) in families {
        let out = mock.run_app(&home, "proc", &["leak", family, "3", &SIZE.to_string()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("leak free 0 0\nleak free 2 0\n"),
            "{family}: {text}"
        );
    }
    let live = ok_json(&cli(&home, &["-j", "maps", "dump", "leak_live"]));
    let live: Vec<&Value> = live
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["formatted"]["value"])
        .collect();
    assert_eq!(live.len(), families.len(), "one leak a process: {live:?}");
    for (family, api, kind) in families {
        let found = live
            .iter()
            .filter(|v| v["api_id"] == api && v["kind"] == kind && v["size"] == SIZE)
            .count();
        assert_eq!(found, 1, "{family}: {live:?}");
    }
    // Each leak's call site is the application's `family_alloc`, where it called the
    // driver: `app_dyn+0xOFFSET`, OFFSET inside that function's symbol.
    let (start, size) = symbol(&mock.app_dyn, "family_alloc");
    for v in &live {
        let site = v["site"].as_str().expect("site");
        let offset = site
            .strip_prefix("app_dyn+0x")
            .and_then(|o| u64::from_str_radix(o, 16).ok())
            .unwrap_or_else(|| panic!("call site `{site}`"));
        assert!(
            (start..start + size).contains(&offset),
            "{site} not in family_alloc at {start:#x}+{size:#x}"
        );
    }
    let summary = ok_json(&cli(&home, &["-j", "maps", "dump", "leak_summary"]));
    let summary = summary.as_array().unwrap();
    assert_eq!(summary.len(), families.len());
    for s in summary {
        assert_eq!(
            s["formatted"]["value"],
            json!({"allocs": 3, "frees": 2, "live_bytes": SIZE, "untracked": 0}),
            "{s}"
        );
    }
}

#[test]
fn a_release_and_a_free_of_the_same_value_remove_only_their_kind() {
    let Some((_d, home, lc)) = object() else {
        return;
    };
    // Pid 42 holds device pointer 7 and cuMemCreate handle 7 (different name spaces).
    let run = |prog: &str, field: &str| {
        changes(
            &home,
            &lc,
            &[
                "--prog",
                prog,
                "--map-set",
                "leak_live",
                "handle=7 pid=42 kind=1",
                "size=100 pid=42 kind=1",
                "--map-set",
                "leak_live",
                "handle=7 pid=42 kind=3",
                "size=200 pid=42 kind=3",
                "--ctx",
                "hdr.pid=42",
                "--ctx",
                &format!("{field}=7"),
            ],
        )
    };
    let release = run("leak_release", "args.handle");
    assert_eq!(release.len(), 1, "{release:?}");
    assert_eq!(release[0].1, json!({"handle": 7, "pid": 42, "kind": 3}));
    assert_eq!(release[0].2, Value::Null);
    let free = run("leak_free", "args.dptr");
    assert_eq!(free.len(), 1, "{free:?}");
    assert_eq!(free[0].1, json!({"handle": 7, "pid": 42, "kind": 1}));
    let host = run("leak_free_host", "args.p");
    assert!(host.is_empty(), "a host free of 7 is neither: {host:?}");
}
