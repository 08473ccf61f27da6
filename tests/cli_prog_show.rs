//! `gpubpf prog show` / `prog list` with bpftool's habits: no selector lists every program,
//! `id N` one program (or an object by its id), `name X` programs of that name or of that
//! object; ids are given at load time, increase and are never reused; `prog list -j` has,
//! per program, id, name, object, links, phase, instruction count, JIT size (as built by
//! every process), load time, the maps it references and the parsed `--set` globals.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::Path;

use serde_json::{json, Value};

use common::cli::{ok, ok_json as j, run_with_registry as run, with_policies};

fn list(home: &Path) -> Vec<Value> {
    j(&run(home, &["-j", "prog", "list"]))
        .as_array()
        .unwrap()
        .clone()
}

fn fails(out: &std::process::Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{err}");
    err
}

#[test]
fn prog_list_json_has_ids_sizes_times_maps_and_parsed_globals() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let first = j(&run(
        &home,
        &[
            "-j",
            "load",
            q,
            "--set",
            "limit_bytes=2GiB",
            "--set",
            "log_denials=false",
        ],
    ));
    let progs = list(&home);
    // quota has an entry and an exit program for every allocation family, 25 in all, in
    // the object's order (as `inspect` lists them).
    assert_eq!(progs.len(), 25);
    let inspected = j(&run(&home, &["-j", "inspect", q]));
    let declared = inspected["programs"].as_array().unwrap();
    assert_eq!(declared.len(), progs.len());
    let oid = first["id"].as_u64().unwrap();
    assert!(oid >= 1);
    for (i, p) in progs.iter().enumerate() {
        assert_eq!(p["id"], oid + 1 + i as u64, "{p}");
        assert_eq!(p["name"], declared[i]["name"]);
        assert_eq!(p["phase"], declared[i]["phase"], "{p}");
        assert_eq!(p["links"][0]["attach_point"], declared[i]["attach"], "{p}");
        assert_eq!(p["object"], "quota");
        assert_eq!(p["object_id"], oid);
        assert!(p["insn_count"].as_u64().unwrap() > 10, "{p}");
        // Machine code was built and measured (the smallest quota program is ~80 bytes).
        assert!(p["jited_size"].as_u64().unwrap() > 32, "{p}");
        let t = p["loaded_at"].as_u64().unwrap();
        assert!(t >= before && t <= before + 60, "{p}");
        assert_eq!(
            p["globals"],
            json!([
                {"name": "limit_bytes", "given": "2GiB", "value": 2147483648u64,
                 "type": "const volatile __u64"},
                {"name": "log_denials", "given": "false", "value": false,
                 "type": "const volatile bool"},
            ])
        );
        assert!(p.get("error").is_none(), "{p}");
    }
    assert_eq!(progs[0]["name"], "quota_alloc");
    assert_eq!(progs[0]["phase"], "entry");
    assert_eq!(progs[1]["name"], "quota_alloc_done");
    assert_eq!(progs[1]["phase"], "exit");
    assert_eq!(
        progs[0]["links"],
        json!([{"attach_point": "cuMemAlloc", "requested": "cuMemAlloc", "phase": "entry",
                "priority": 0}])
    );
    let free = progs
        .iter()
        .position(|p| p["name"] == "quota_free_done")
        .expect("quota_free_done listed");
    assert_eq!(progs[free]["links"][0]["attach_point"], "cuMemFree");
    assert_eq!(progs[free]["phase"], "exit");
    // The maps each program references (quota_free_done does not read the limits); the
    // shared ones are pinned by name, `.rodata` and `quota_pending` are the object's own.
    let maps = |i: usize| -> Vec<&str> {
        let mut m: Vec<&str> = progs[i]["maps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        m.sort();
        m
    };
    assert_eq!(
        maps(0),
        [
            "dev_usage",
            "proc_usage",
            "quota.quota_pending",
            "quota.rodata",
            "user_usage"
        ]
    );
    assert!(!maps(free).contains(&"quota.rodata"), "{:?}", maps(free));
    assert!(maps(free).contains(&"quota_allocs"), "{:?}", maps(free));
    // The JIT size is the one `prog dump jited` builds.
    let dump = j(&run(
        &home,
        &[
            "-j",
            "prog",
            "dump",
            "jited",
            "quota",
            "--prog",
            "quota_alloc",
        ],
    ));
    assert_eq!(dump[0]["jited"]["code_size"], progs[0]["jited_size"]);

    // `prog show` without a selector is `prog list`, in JSON and in text.
    assert_eq!(
        j(&run(&home, &["-j", "prog", "show"])),
        Value::Array(progs.clone())
    );
    let text = ok(&run(&home, &["prog", "list"]));
    assert_eq!(text, ok(&run(&home, &["prog", "show"])));
    let jited = progs[0]["jited_size"].as_u64().unwrap();
    assert!(
        text.contains(&format!(
            "{}: quota_alloc  object quota (id {oid})",
            oid + 1
        )) && text.contains(&format!("jited {jited}B"))
            && text.contains("global limit_bytes = 2147483648 (--set limit_bytes=2GiB)")
            && text.contains("global log_denials = false (--set log_denials=false)"),
        "{text}"
    );
    let human = super_human(progs[0]["loaded_at"].as_u64().unwrap());
    assert!(text.contains(&format!("loaded_at {human} (")), "{text}");
}

/// `2026-01-02T03:04:05Z` computed independently of the CLI (days from the epoch to the
/// civil date, Howard Hinnant's algorithm).
fn super_human(unix: u64) -> String {
    let days = (unix / 86400) as i64;
    let secs = unix % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[test]
fn prog_show_selects_by_id_and_name_and_ids_are_never_reused() {
    let Some((_d, home, [quota])) = with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let q = quota.to_str().unwrap();
    ok(&run(&home, &["load", q, "--set", "limit_bytes=1GiB"]));
    ok(&run(&home, &["load", q, "--name", "q2"]));
    let progs = list(&home);
    // 25 programs an object (an entry and an exit program for every allocation family).
    let per_object = 25;
    assert_eq!(progs.len(), 2 * per_object);
    let ids: Vec<u64> = progs.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // id N: that program (q2's second one).
    let p = &progs[per_object + 1];
    let id = p["id"].as_u64().unwrap().to_string();
    assert_eq!(&j(&run(&home, &["-j", "prog", "show", "id", &id])), p);
    let text = ok(&run(&home, &["prog", "show", "id", &id]));
    assert!(
        text.starts_with(&format!("{id}: quota_alloc_done  object q2")),
        "{text}"
    );
    // An object's id shows the object.
    let oid = p["object_id"].as_u64().unwrap().to_string();
    let o = j(&run(&home, &["-j", "prog", "show", "id", &oid]));
    assert_eq!(o["name"], "q2");
    assert_eq!(o["programs"][1]["id"], p["id"]);
    let err = fails(&run(&home, &["prog", "show", "id", "999"]), 1);
    assert!(
        err.contains("no loaded program has id 999 (loaded: quota (ids "),
        "{err}"
    );

    // name X: programs of that name, or of the object of that name.
    let by_name = j(&run(&home, &["-j", "prog", "show", "name", "quota_alloc"]));
    let objects: Vec<&str> = by_name
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["object"].as_str().unwrap())
        .collect();
    assert_eq!(objects, ["quota", "q2"], "by id");
    let of_object = j(&run(&home, &["-j", "prog", "show", "name", "q2"]));
    assert_eq!(of_object.as_array().unwrap().len(), per_object);
    let err = fails(&run(&home, &["prog", "show", "name", "nope"]), 1);
    assert!(
        err.contains("no loaded program or object named `nope`"),
        "{err}"
    );
    let err = fails(&run(&home, &["prog", "show", "tag", "x"]), 2);
    assert!(err.contains("prog show id N"), "{err}");

    // NAME: the object in detail, with the parsed value of each --set.
    let text = ok(&run(&home, &["prog", "show", "quota"]));
    assert!(
        text.contains("global limit_bytes = 1073741824 (--set limit_bytes=1GiB)")
            && text.contains(&format!("program quota_alloc (id {}, ", ids[0])),
        "{text}"
    );

    // Unloading gives no id back; a reload (replace) takes new ones.
    let max = *ids.iter().max().unwrap();
    ok(&run(&home, &["prog", "unload", "q2"]));
    let v = j(&run(&home, &["-j", "load", q, "--name", "q3"]));
    assert!(v["id"].as_u64().unwrap() > max, "{v}");
    let v = j(&run(&home, &["-j", "load", q]));
    // q3 took max+1 (the object) to max+1+per_object (its programs).
    assert!(
        v["id"].as_u64().unwrap() > max + 1 + per_object as u64,
        "{v}"
    );
    assert_eq!(v["replaced"]["id"], progs[0]["object_id"]);
}
