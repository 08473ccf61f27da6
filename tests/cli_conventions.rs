//! Conventions the CLI keeps across commands (issue #14, "small things"): one spelling of
//! types in `inspect` and `maps show`, one size-suffix convention in every value parser,
//! a confirmation from every mutating command.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use serde_json::Value;

use common::cli::{ok_json as j, run_with_registry as run, with_policies};

#[test]
fn inspect_and_maps_show_spell_types_alike() {
    let Some((_d, home, objs)) = with_policies(["policies/quota.bpf.c", "policies/trace.bpf.c"])
    else {
        return;
    };
    let mut compared = 0;
    for obj in &objs {
        let o = obj.to_str().unwrap();
        let inspected = j(&run(&home, &["-j", "inspect", o]));
        let loaded = j(&run(&home, &["-j", "load", o]));
        let object = loaded["name"].as_str().unwrap().to_string();
        for m in inspected["maps"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            // Pinned by name (LIBBPF_PIN_BY_NAME): the registry map has the map's name.
            let registry = if m["pinned"] == true {
                name.to_string()
            } else {
                format!("{object}.{}", name.trim_start_matches('.'))
            };
            let shown = j(&run(&home, &["-j", "maps", "show", &registry]));
            for k in ["key_type", "value_type"] {
                assert_eq!(
                    m[k],
                    shown.get(k).cloned().unwrap_or(Value::Null),
                    "{registry} {k}"
                );
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 13);
    // The spelling is the source's: typedef names kept, the section for global data.
    let shown = j(&run(&home, &["-j", "maps", "show", "proc_usage"]));
    assert_eq!(
        (&shown["key_type"], &shown["value_type"]),
        (&"__u32".into(), &"struct usage".into())
    );
    let shown = j(&run(&home, &["-j", "maps", "show", "quota_allocs"]));
    assert_eq!(
        (&shown["key_type"], &shown["value_type"]),
        (&"struct quota_key".into(), &"struct quota_alloc".into())
    );
    let shown = j(&run(&home, &["-j", "maps", "show", "quota.rodata"]));
    assert_eq!(
        (&shown["key_type"], &shown["value_type"]),
        (&"__u32".into(), &".rodata".into())
    );
}

/// One size-suffix convention in every parser: `K`/`KiB` = 1024, `KB` = 1000 (as GNU
/// coreutils), for `--set`, `maps update` values and `maps create --max-entries`.
#[test]
fn size_suffixes_mean_the_same_everywhere() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    let loaded = j(&run(
        &home,
        &[
            "-j",
            "load",
            q,
            "--set",
            "limit_bytes=4KiB",
            "--set",
            "user_limit_bytes=4KB",
        ],
    ));
    assert!(loaded["name"].is_string(), "{loaded}");
    let rodata = &j(&run(&home, &["-j", "maps", "dump", "quota.rodata"]))[0]["formatted"]["value"];
    assert_eq!(rodata["limit_bytes"], 4096);
    assert_eq!(rodata["user_limit_bytes"], 4000);
    let put = |value: &str| {
        common::cli::ok(&run(
            &home,
            &[
                "maps",
                "update",
                "proc_usage",
                "--key",
                "7",
                "--value",
                value,
            ],
        ));
        j(&run(
            &home,
            &["-j", "maps", "lookup", "proc_usage", "--key", "7"],
        ))["formatted"]["value"]["bytes"]
            .clone()
    };
    assert_eq!(put("bytes=4KiB"), 4096);
    assert_eq!(put("bytes=4k"), 4096);
    assert_eq!(put("bytes=4KB"), 4000);
    assert_eq!(put(r#"{"bytes": "1.5MiB"}"#), 3 << 19);
    // An unknown suffix is an error that lists the known ones, in both parsers.
    for args in [
        vec!["load", q, "--set", "limit_bytes=4XB"],
        vec![
            "maps",
            "update",
            "proc_usage",
            "--key",
            "7",
            "--value",
            "bytes=4XB",
        ],
    ] {
        let out = run(&home, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("unknown size suffix `XB`"), "{args:?}: {e}");
    }
    let created = j(&run(
        &home,
        &[
            "-j",
            "maps",
            "create",
            "ring",
            "--type",
            "ringbuf",
            "--max-entries",
            "16KiB",
        ],
    ));
    assert_eq!(created["max_entries"], 16384);
}

/// Every mutating command says what it did in text mode (one line naming the map and the
/// change), and `{"status": …}` in JSON.
#[test]
fn mutating_commands_confirm_what_they_did() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let ok = |args: &[&str]| common::cli::ok(&run(&home, args));
    assert!(ok(&["load", quota.to_str().unwrap()]).starts_with("loaded quota"));
    let key = ["--key", "7"];
    let upd = |v: &str| {
        let mut a = vec!["maps", "update", "proc_usage"];
        a.extend(key);
        a.extend(["--value", v]);
        ok(&a)
    };
    assert_eq!(
        upd("denied=1"),
        "proc_usage key 7 updated (the named fields)\n"
    );
    assert_eq!(
        upd(r#"{"bytes":1,"allocs":2,"frees":3,"denied":4}"#),
        "proc_usage key 7 updated\n"
    );
    assert_eq!(
        ok(&["maps", "delete", "proc_usage", "--key", "7"]),
        "proc_usage key 7 deleted\n"
    );
    assert_eq!(ok(&["maps", "clear", "proc_usage"]), "proc_usage cleared\n");
    // quota pins its maps by name (LIBBPF_PIN_BY_NAME); its `.rodata` is not pinned.
    assert_eq!(
        ok(&["maps", "pin", "proc_usage"]),
        "proc_usage was already pinned\n"
    );
    assert_eq!(
        ok(&["maps", "pin", "quota.rodata"]),
        "quota.rodata pinned\n"
    );
    assert!(ok(&[
        "maps",
        "create",
        "x",
        "--type",
        "hash",
        "--max-entries",
        "4"
    ])
    .starts_with("created x: "));
    assert_eq!(ok(&["maps", "rm", "x"]), "x removed\n");
    assert!(ok(&["prog", "unload", "quota"]).starts_with("unloaded quota"));
    assert_eq!(
        j(&run(&home, &["-j", "maps", "clear", "proc_usage"])),
        serde_json::json!({"status": "cleared"})
    );
}

/// `gpubpf registry show` names the filesystem the registry is on and says when it is not
/// memory (policies' maps are shared file mappings: on a disk they are written back and
/// fault again): tmpfs in /dev/shm, the default place; the test's own directory elsewhere.
#[test]
fn registry_show_names_the_filesystem_and_flags_a_disk() {
    let shm = gpubpf_runtime::registry::shared_memory_dir();
    let mut homes = vec![tempfile::tempdir().expect("tempdir")];
    homes.extend(shm.map(|d| tempfile::tempdir_in(d).expect("tempdir in /dev/shm")));
    for dir in &homes {
        let home = dir.path().join("reg");
        common::cli::ok(&run(&home, &["registry", "init"]));
        let v = j(&run(&home, &["-j", "registry", "show"]));
        let fs = gpubpf_runtime::registry::filesystem(&home).expect("statfs");
        assert_eq!(v["filesystem"], fs.name.as_str(), "{v}");
        assert_eq!(v["in_memory"], fs.in_memory, "{v}");
        let text = common::cli::ok(&run(&home, &["registry", "show"]));
        let line = format!("  filesystem: {}", fs.name);
        assert!(text.contains(&line), "{text}");
        assert_eq!(text.contains("not memory"), !fs.in_memory, "{text}");
        if shm.is_some_and(|d| dir.path().starts_with(d)) {
            assert_eq!(v["filesystem"], "tmpfs", "{v}");
        }
    }
}

/// The `gpubpf load` that creates a registry says on stderr when the registry is not on
/// tmpfs, once: later loads into it, and loads into /dev/shm, say nothing of it.
#[test]
fn the_load_that_creates_a_disk_registry_says_so_once() {
    let Some((dir, disk_home, [obj])) = with_policies(["tests/shim/count_launch.bpf.c"]) else {
        return;
    };
    let o = obj.to_str().expect("utf-8 path");
    let shm_dir = gpubpf_runtime::registry::shared_memory_dir()
        .map(|d| tempfile::tempdir_in(d).expect("tempdir"));
    let mut homes = vec![disk_home];
    homes.extend(shm_dir.as_ref().map(|d| d.path().join("reg")));
    for home in &homes {
        std::fs::create_dir_all(home.parent().expect("parent")).expect("parent dir");
        let in_memory = {
            let parent = home.parent().expect("parent");
            gpubpf_runtime::registry::filesystem(parent)
                .expect("statfs")
                .in_memory
        };
        let first = run(home, &["load", o, "--name", "a"]);
        common::cli::ok(&first);
        let err = String::from_utf8_lossy(&first.stderr);
        assert_eq!(
            err.contains("not tmpfs"),
            !in_memory,
            "{}: {err}",
            home.display()
        );
        let again = run(home, &["load", o, "--name", "b"]);
        common::cli::ok(&again);
        let err = String::from_utf8_lossy(&again.stderr);
        assert!(!err.contains("not tmpfs"), "said again: {err}");
    }
    drop(dir);
}
