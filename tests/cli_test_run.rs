//! `gpubpf test-run`: one program on a synthetic ctx, run by the interpreter and the JIT,
//! on scratch maps or the registry's. The policy unit tests of `policies/quota.bpf.c` and
//! `policies/meminfo.bpf.c` live here: each limit is checked at exactly the byte where it
//! is crossed (an off-by-one in the policy fails them), every family sizes its allocation
//! as documented, frees credit what was charged.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use common::cli::{ok, ok_json, run_with_registry as run, with_policies};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// `gpubpf -j test-run OBJ ARGS…` on scratch maps (the registry path must never be used).
fn test_run(home: &Path, obj: &Path, args: &[&str]) -> Output {
    let mut a = vec!["-j", "test-run", obj.to_str().unwrap()];
    a.extend_from_slice(args);
    run(home, &a)
}

fn runs(out: &Output) -> Vec<Value> {
    ok_json(out)["runs"].as_array().unwrap().clone()
}

/// The verdict (entry) of the only run.
fn verdict(home: &Path, obj: &Path, args: &[&str]) -> u64 {
    let r = runs(&test_run(home, obj, args));
    assert_eq!(r.len(), 1);
    r[0]["verdict"].as_u64().unwrap()
}

/// The `after` value of the change to `map[key]` in run `r`.
fn after<'a>(run: &'a Value, map: &str, key: &Value) -> &'a Value {
    run["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["map"] == map && &c["key"] == key)
        .map(|c| &c["after"])
        .unwrap_or_else(|| panic!("no change of {map}[{key}] in {run}"))
}

fn quota() -> Option<(tempfile::TempDir, PathBuf, [PathBuf; 2])> {
    with_policies(["policies/quota.bpf.c", "policies/meminfo.bpf.c"])
}

#[test]
fn quota_limits_are_exact_to_the_byte() {
    let Some((_d, home, [q, _])) = quota() else {
        return;
    };
    // Process limit 350 with 300 held: 50 more fit, 51 do not.
    let proc = |size: &str| {
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_alloc",
                "--set",
                "limit_bytes=350",
                "--map-set",
                "proc_usage",
                "42",
                "bytes=300",
                "--ctx",
                "hdr.pid=42",
                "--ctx",
                &format!("args.bytesize={size}"),
            ],
        )
    };
    assert_eq!(proc("50"), 0);
    assert_eq!(proc("51"), 2);
    // The same at the user limit (uid from --uid) and the device limit (hdr.device).
    let user = |size: &str| {
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_alloc",
                "--set",
                "limit_bytes=0",
                "--set",
                "user_limit_bytes=1GiB",
                "--uid",
                "1234",
                "--map-set",
                "user_usage",
                "1234",
                "bytes=805306368",
                "--ctx",
                &format!("bytesize={size}"),
            ],
        )
    };
    assert_eq!(user("256MiB"), 0);
    assert_eq!(user(&(256 * MIB + 1).to_string()), 2);
    let dev = |size: &str| {
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_async",
                "--set",
                "limit_bytes=0",
                "--set",
                "device_limit_bytes=1000",
                "--map-set",
                "dev_usage",
                "3",
                "bytes=999",
                "--ctx",
                "hdr.device=3",
                "--ctx",
                &format!("bytesize={size}"),
            ],
        )
    };
    assert_eq!(dev("1"), 0);
    assert_eq!(dev("2"), 2);
    // No device (-1): no device limit applies.
    assert_eq!(
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_async",
                "--set",
                "limit_bytes=0",
                "--set",
                "device_limit_bytes=1",
                "--ctx",
                "hdr.device=-1",
                "--ctx",
                "bytesize=1GiB",
            ],
        ),
        0
    );
}

#[test]
fn a_denial_is_counted_and_logged_in_the_bucket_that_refused() {
    let Some((_d, home, [q, _])) = quota() else {
        return;
    };
    let r = runs(&test_run(
        &home,
        &q,
        &[
            "--prog",
            "quota_managed",
            "--set",
            "limit_bytes=1GiB",
            "--ctx",
            "hdr.pid=7",
            "--ctx",
            "args.bytesize=2GiB",
        ],
    ));
    assert_eq!(r[0]["verdict"], 2);
    assert_eq!(after(&r[0], "proc_usage", &json!(7))["denied"], 1);
    assert_eq!(
        r[0]["printk"],
        json!(["quota: pid 7 denied 2147483648 bytes (process limit)"])
    );
    // Text output: the verdict named, the map change, the printk line.
    let out = ok(&run(
        &home,
        &[
            "test-run",
            q.to_str().unwrap(),
            "--prog",
            "quota_managed",
            "--set",
            "limit_bytes=1GiB",
            "--ctx",
            "hdr.pid=7",
            "--ctx",
            "args.bytesize=2GiB",
        ],
    ));
    for want in [
        "quota_managed (cuda/cuMemAllocManaged at cuMemAllocManaged, entry): verified",
        "run 1: verdict 2 CUDA_ERROR_OUT_OF_MEMORY (the call is refused with it)",
        // Struct fields in declaration order (struct usage).
        "map proc_usage[7]: (none) -> {\"bytes\":0,\"allocs\":0,\"frees\":0,\"denied\":1}",
        "bpf_printk: quota: pid 7 denied 2147483648 bytes (process limit)",
        "interpreter and JIT agree on 1 run",
    ] {
        assert!(out.contains(want), "missing `{want}` in:\n{out}");
    }
}

/// The catalog id of attach point `api` (`gpubpf -j attach-points`).
fn api_id(home: &Path, api: &str) -> u64 {
    ok_json(&run(home, &["-j", "attach-points"]))
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == api)
        .unwrap_or_else(|| panic!("no attach point {api}"))["id"]
        .as_u64()
        .unwrap()
}

/// `--map-set` arguments for thread 5's `quota_pending` slot, holding `size` bytes of a
/// call to the attach point of id `api` ([`api_id`]) reserved for uid 1000 on device 0
/// (`tid`: whose call the slot says).
fn pending(api: u64, tid: u64, size: u64) -> Vec<String> {
    vec![
        "--map-set".into(),
        "quota_pending".into(),
        "5".into(),
        format!("tid={tid} api_id={api} size={size} device=0 uid=1000 held=1"),
    ]
}

#[test]
fn entries_reserve_and_exits_record_or_give_back() {
    let Some((_d, home, [q, _])) = quota() else {
        return;
    };
    let (alloc, alloc_async) = (
        api_id(&home, "cuMemAlloc"),
        api_id(&home, "cuMemAllocAsync"),
    );
    // Three allocations of 100 MiB: each entry reserves in every bucket (state carries
    // over) and says so in the thread's slot.
    let r = runs(&test_run(
        &home,
        &q,
        &[
            "--prog",
            "quota_alloc",
            "--repeat",
            "3",
            "--uid",
            "1000",
            "--ctx",
            "hdr.pid=42",
            "--ctx",
            "hdr.tid=5",
            "--ctx",
            "args.bytesize=100MiB",
        ],
    ));
    assert_eq!(r.len(), 3);
    for (i, run) in r.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(run["verdict"], 0);
        for (map, key) in [("proc_usage", 42), ("user_usage", 1000), ("dev_usage", 0)] {
            let u = after(run, map, &json!(key));
            assert_eq!(
                (&u["bytes"], &u["allocs"]),
                (&json!(n * 100 * MIB), &json!(n)),
                "{map} after run {n}"
            );
        }
    }
    assert_eq!(
        after(&r[0], "quota.quota_pending", &json!(5)),
        &json!({"tid": 5, "api_id": alloc, "size": 100 * MIB,
                "device": 0, "uid": 1000, "held": 1, "pad": 0})
    );
    // Success: the exit records the live allocation under the reserved size and releases
    // the slot; the buckets already hold it.
    let exit = |result: &str, slot: Vec<String>| {
        let mut args: Vec<String> = [
            "--prog",
            "quota_alloc_done",
            "--ctx",
            "hdr.pid=42",
            "--ctx",
            "hdr.tid=5",
            "--ctx",
            result,
            "--ctx",
            "args.bytesize=100MiB",
            "--ctx",
            "out.dptr=0x7f0000000000",
            "--map-set",
            "proc_usage",
            "42",
            "bytes=104857600 allocs=1",
            "--map-set",
            "user_usage",
            "1000",
            "bytes=104857600 allocs=1",
            "--map-set",
            "dev_usage",
            "0",
            "bytes=104857600 allocs=1",
        ]
        .map(String::from)
        .to_vec();
        args.extend(slot);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        runs(&test_run(&home, &q, &args)).remove(0)
    };
    let ok_run = exit("hdr.result=0", pending(alloc, 5, 100 * MIB));
    assert_eq!(
        after(
            &ok_run,
            "quota_allocs",
            &json!({"handle": 0x7f00_0000_0000u64, "pid": 42, "kind": 1})
        ),
        &json!({"size": 100 * MIB, "pid": 42, "uid": 1000, "device": 0, "kind": 1})
    );
    assert_eq!(after(&ok_run, "quota.quota_pending", &json!(5))["held"], 0);
    let changed: Vec<&Value> = ok_run["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["map"])
        .collect();
    assert_eq!(
        changed,
        [&json!("quota_allocs"), &json!("quota.quota_pending")]
    );
    // Failure (the driver's, or a later program's refusal): the reservation goes back.
    let failed = exit("hdr.result=2", pending(alloc, 5, 100 * MIB));
    for (map, key) in [("proc_usage", 42), ("user_usage", 1000), ("dev_usage", 0)] {
        let u = after(&failed, map, &json!(key));
        assert_eq!((&u["bytes"], &u["allocs"]), (&json!(0), &json!(0)), "{map}");
    }
    assert!(failed["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["map"] != "quota_allocs"));
    // Nothing held (quota's own refusal, a call that began before the policy), or the slot
    // of another thread with the same slot number, or of another call: nothing settles.
    for slot in [
        vec![],
        pending(alloc, 65536 + 5, 100 * MIB),
        pending(alloc_async, 5, 100 * MIB),
    ] {
        for result in ["hdr.result=0", "hdr.result=2"] {
            let r = exit(result, slot.clone());
            assert_eq!(r["map_changes"], json!([]), "{result} {slot:?}");
        }
    }
    // A free credits the owner's buckets and removes the live entry; a pointer the same
    // process never got (or another process's) changes nothing.
    let free = |pid: &str| {
        runs(&test_run(
            &home,
            &q,
            &[
                "--prog",
                "quota_free_async_done",
                "--map-set",
                "quota_allocs",
                "handle=0x1000 pid=42 kind=1",
                "size=300 pid=42 uid=5 device=0 kind=1",
                "--map-set",
                "proc_usage",
                "42",
                "bytes=1000",
                "--map-set",
                "user_usage",
                "5",
                "bytes=1000",
                "--map-set",
                "dev_usage",
                "0",
                "bytes=1000",
                "--ctx",
                &format!("hdr.pid={pid}"),
                "--ctx",
                "args.dptr=0x1000",
            ],
        ))
    };
    let r = free("42");
    assert_eq!(after(&r[0], "proc_usage", &json!(42))["bytes"], 700);
    assert_eq!(after(&r[0], "user_usage", &json!(5))["bytes"], 700);
    assert_eq!(after(&r[0], "dev_usage", &json!(0))["bytes"], 700);
    assert_eq!(
        after(
            &r[0],
            "quota_allocs",
            &json!({"handle": 0x1000, "pid": 42, "kind": 1})
        ),
        &Value::Null,
        "deleted"
    );
    assert_eq!(free("43")[0]["map_changes"], json!([]));
}

/// What the entry `prog` reserves for one allocation of its family with `ctx`.
fn reserved(home: &Path, q: &Path, prog: &str, ctx: &[&str]) -> Value {
    let mut args = vec!["--prog", prog, "--ctx", "hdr.pid=9"];
    for c in ctx {
        args.extend(["--ctx", c]);
    }
    let r = runs(&test_run(home, q, &args));
    after(&r[0], "proc_usage", &json!(9))["bytes"].clone()
}

/// The usage maps a run changed.
fn usage_changes(run: &Value) -> Vec<Value> {
    run["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["map"].as_str().unwrap().ends_with("_usage"))
        .cloned()
        .collect()
}

#[test]
fn every_family_is_sized_as_documented() {
    let Some((_d, home, [q, _])) = quota() else {
        return;
    };
    // Pitch: the entry reserves Width x Height, the exit charges the real pitch x Height.
    assert_eq!(
        reserved(
            &home,
            &q,
            "quota_pitch",
            &["args.WidthInBytes=1000", "args.Height=3"]
        ),
        3000
    );
    let mut args = vec![
        "--prog",
        "quota_pitch_done",
        "--uid",
        "1000",
        "--ctx",
        "hdr.pid=9",
        "--ctx",
        "hdr.tid=5",
        "--ctx",
        "args.WidthInBytes=1000",
        "--ctx",
        "args.Height=3",
        "--ctx",
        "out.pPitch=1024",
        "--ctx",
        "out.dptr=0x2000",
        "--map-set",
        "proc_usage",
        "9",
        "bytes=3000 allocs=1",
    ];
    let slot = pending(api_id(&home, "cuMemAllocPitch"), 5, 3000);
    args.extend(slot.iter().map(String::as_str));
    let r = runs(&test_run(&home, &q, &args));
    assert_eq!(after(&r[0], "proc_usage", &json!(9))["bytes"], 3072);
    assert_eq!(
        after(
            &r[0],
            "quota_allocs",
            &json!({"handle": 0x2000, "pid": 9, "kind": 1})
        )["size"],
        3072
    );
    // cuMemCreate: the size, on the device of prop->location (type 1 = device, id 2).
    let r = runs(&test_run(
        &home,
        &q,
        &[
            "--prog",
            "quota_create",
            "--ctx",
            "args.size=2MiB",
            "--ctx",
            "args.prop=buf:u32=0,u32=0,u32=1,i32=2",
        ],
    ));
    assert_eq!(after(&r[0], "dev_usage", &json!(2))["bytes"], 2 * MIB);
    // A host location (type 2) is not device memory: not policed.
    let r = runs(&test_run(
        &home,
        &q,
        &[
            "--prog",
            "quota_create",
            "--set",
            "limit_bytes=1",
            "--ctx",
            "args.size=2MiB",
            "--ctx",
            "args.prop=buf:u32=0,u32=0,u32=2,i32=0",
        ],
    ));
    assert_eq!(
        (&r[0]["verdict"], usage_changes(&r[0])),
        (&json!(0), vec![])
    );
    // 2D array: 1000 x 3 float4 (format 0x20, 4 channels) = 48000 bytes; 1D: height 0.
    assert_eq!(
        reserved(
            &home,
            &q,
            "quota_array",
            &["args.pAllocateArray=buf:u64=1000,u64=3,u32=0x20,u32=4"]
        ),
        48000
    );
    assert_eq!(
        reserved(
            &home,
            &q,
            "quota_array",
            &["args.pAllocateArray=buf:u64=1000,u64=0,u32=0x01,u32=1"]
        ),
        1000
    );
    // 3D array of half2 (0x10, 2 channels): 64 x 32 x 8 x 4 bytes.
    assert_eq!(
        reserved(
            &home,
            &q,
            "quota_array3d",
            &["args.pAllocateArray=buf:u64=64,u64=32,u64=8,u32=0x10,u32=2,u32=0"]
        ),
        65536
    );
    // Mipmap: levels 64x64, 32x32, 16x16 of 1-channel float.
    assert_eq!(
        reserved(
            &home,
            &q,
            "quota_mipmap",
            &[
                "args.pMipmappedArrayDesc=buf:u64=64,u64=64,u64=0,u32=0x20,u32=1,u32=0",
                "args.numMipmapLevels=3"
            ]
        ),
        4 * (64 * 64 + 32 * 32 + 16 * 16)
    );
    // The entry check uses the same size: 48000 bytes against a 47999-byte limit.
    let arr = |limit: &str| {
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_array",
                "--set",
                &format!("limit_bytes={limit}"),
                "--ctx",
                "args.pAllocateArray=buf:u64=1000,u64=3,u32=0x20,u32=4",
            ],
        )
    };
    assert_eq!((arr("48000"), arr("47999")), (0, 2));
    // A descriptor no device accepts is left to the driver (verdict 0, nothing charged).
    assert_eq!(
        verdict(
            &home,
            &q,
            &[
                "--prog",
                "quota_array",
                "--set",
                "limit_bytes=1",
                "--ctx",
                "args.pAllocateArray=buf:u64=0x100000000,u64=1,u32=1,u32=1",
            ],
        ),
        0
    );
}

#[test]
fn meminfo_reports_the_quota_as_total_and_the_headroom_as_free() {
    let Some((_d, home, [q, m])) = quota() else {
        return;
    };
    // quota publishes its limits on entry of cuMemGetInfo, meminfo reads them on exit.
    let r = runs(&test_run(
        &home,
        &q,
        &[
            "--prog",
            "quota_publish_getinfo",
            "--set",
            "limit_bytes=4GiB",
            "--set",
            "device_limit_bytes=6GiB",
        ],
    ));
    assert_eq!(
        after(&r[0], "quota_limits", &json!(0)),
        &json!({"process": 4 * GIB, "user": 0, "device": 6 * GIB})
    );
    let info = |sets: &[&str]| -> (u64, u64) {
        let mut args = vec![
            "--prog",
            "meminfo_getinfo",
            "--ctx",
            "hdr.pid=42",
            "--ctx",
            "out.total=80GiB",
            "--ctx",
            "out.free=79GiB",
            "--uid",
            "1000",
        ];
        for s in sets {
            args.extend(["--map-set"]);
            args.extend(s.splitn(3, ' '));
        }
        let r = runs(&test_run(&home, &m, &args));
        let field = |name: &str| {
            r[0]["ctx_changes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["field"] == name)
                .map_or(0, |c| c["after"].as_u64().unwrap())
        };
        (field("out.total"), field("out.free"))
    };
    // Without quota's limits: the driver's values pass unchanged.
    assert_eq!(info(&[]), (0, 0), "no ctx change");
    // Process limit 4 GiB, 1 GiB held: total 4 GiB, free 3 GiB.
    assert_eq!(
        info(&[
            "quota_limits 0 process=4294967296",
            "proc_usage 42 bytes=1073741824"
        ]),
        (4 * GIB, 3 * GIB)
    );
    // The user's headroom is smaller (2 GiB limit, 1.5 GiB held by all its processes).
    assert_eq!(
        info(&[
            "quota_limits 0 process=4294967296 user=2147483648",
            "proc_usage 42 bytes=1073741824",
            "user_usage 1000 bytes=1610612736"
        ]),
        (2 * GIB, 512 * MIB)
    );
    // Over the limit (allocated before the quota): free 0, never negative.
    assert_eq!(
        info(&[
            "quota_limits 0 device=1073741824",
            "dev_usage 0 bytes=3221225472"
        ]),
        (GIB, 0)
    );
    // cuDeviceTotalMem: the device of the argument.
    let r = runs(&test_run(
        &home,
        &m,
        &[
            "--prog",
            "meminfo_totalmem",
            "--map-set",
            "quota_limits",
            "0",
            "device=5368709120",
            "--ctx",
            "args.dev=1",
            "--ctx",
            "out.bytes=80GiB",
        ],
    ));
    assert_eq!(
        r[0]["ctx_changes"],
        json!([{"field": "out.bytes", "before": 80 * GIB, "after": 5 * GIB}])
    );
}

#[test]
fn against_the_registry_the_run_changes_its_maps() {
    let Some((_d, home, [q, _])) = quota() else {
        return;
    };
    let qs = q.to_str().unwrap();
    // No registry yet: an error, none created.
    let out = run(
        &home,
        &["test-run", qs, "--prog", "quota_alloc", "--registry"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no registry"));
    assert!(!home.exists());
    ok(&run(&home, &["load", qs, "--set", "limit_bytes=1000"]));
    ok(&run(
        &home,
        &[
            "maps",
            "update",
            "proc_usage",
            "--key",
            "42",
            "--value",
            "bytes=900",
        ],
    ));
    let go = |size: &str| {
        runs(&run(
            &home,
            &[
                "-j",
                "test-run",
                qs,
                "--prog",
                "quota_alloc",
                "--registry",
                "--ctx",
                "hdr.pid=42",
                "--ctx",
                &format!("bytesize={size}"),
            ],
        ))
    };
    // The loaded limit (1000) applies: 101 does not fit, 100 does and is reserved in the
    // registry's map (900 + 100), after which 1 more does not; both denials are counted.
    assert_eq!(go("101")[0]["verdict"], 2);
    assert_eq!(go("100")[0]["verdict"], 0);
    assert_eq!(go("1")[0]["verdict"], 2);
    let l = ok_json(&run(
        &home,
        &["-j", "maps", "lookup", "proc_usage", "--key", "42"],
    ));
    assert_eq!(
        (
            &l["formatted"]["value"]["bytes"],
            &l["formatted"]["value"]["denied"]
        ),
        (&json!(1000), &json!(2))
    );
    // --set would not apply to the loaded globals: refused.
    let out = run(
        &home,
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc",
            "--registry",
            "--set",
            "limit_bytes=1",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--set applies to scratch maps"));
    // Another name's maps are not there.
    let out = run(
        &home,
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc",
            "--registry",
            "--name",
            "other",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("map `other.quota_pending` is not in the registry")
            && err.contains("load the object first"),
        "{err}"
    );
}

#[test]
fn programs_attach_points_and_fields_are_checked() {
    let Some((d, home, [q, _])) = quota() else {
        return;
    };
    let fails = |args: &[&str], want: &str, code: i32| {
        let out = run(&home, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: missing `{want}` in {err}");
    };
    let qs = q.to_str().unwrap();
    fails(&["test-run", qs], "choose one with --prog", 1);
    fails(
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc",
            "--ctx",
            "args.nope=1",
        ],
        "has no ctx field `args.nope` (fields: hdr.api_id",
        1,
    );
    fails(
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc",
            "--ctx",
            "out.dptr=1",
        ],
        "exists on exit only",
        1,
    );
    fails(
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc_done",
            "--ctx",
            "dptr=1",
        ],
        "say args.dptr or out.dptr",
        1,
    );
    fails(
        &[
            "test-run",
            qs,
            "--prog",
            "quota_alloc",
            "--attach",
            "cuMemFree",
        ],
        "is written for `cuMemAlloc`",
        1,
    );
    // A generic SEC("cuda") program needs --attach.
    let Some(generic) = common::cli::build_policy(d.path(), "tests/data/attach/generic.bpf.c")
    else {
        return;
    };
    let gs = generic.to_str().unwrap();
    fails(
        &["test-run", gs, "--prog", "count_entry"],
        "names no API",
        1,
    );
    let r = runs(&run(
        &home,
        &[
            "-j",
            "test-run",
            gs,
            "--prog",
            "count_entry",
            "--attach",
            "cudaMalloc",
        ],
    ));
    assert_eq!(r[0]["verdict"], 0);
    assert_eq!(after(&r[0], "generic.bss", &json!(0))["calls"], 1);
    // A program the verifier rejects: exit code 3 with the diagnostic, nothing run.
    let src = d.path().join("bad.bpf.c");
    std::fs::write(
        &src,
        "#include \"gpubpf.h\"\n\
         struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 4);\n\
                  __type(key, __u32); __type(value, __u64); } m SEC(\".maps\");\n\
         GPUBPF_ENTRY(cuMemAlloc, bad) { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&m, &k);\n\
                  return *v ? 2 : 0; }\n\
         char LICENSE[] SEC(\"license\") = \"MIT\";\n",
    )
    .unwrap();
    let bad = d.path().join("bad.o");
    assert!(common::cli::build_object(
        &src,
        &bad,
        &d.path().join("cache")
    ));
    fails(
        &["test-run", bad.to_str().unwrap()],
        "rejected by the verifier",
        3,
    );
}

#[test]
fn a_run_time_fault_is_reported_the_same_by_both_engines() {
    // Nested bpf_loops: verified, but the run-time iteration budget ends the run at the same
    // instruction in the interpreter and the JIT (dispatch would treat it as verdict 0).
    let Some((_d, home, [nested])) = with_policies(["tests/data/dispatch/nested_loops.bpf.c"])
    else {
        return;
    };
    let r = runs(&test_run(&home, &nested, &["--ctx", "bytesize=1"]));
    assert_eq!(r[0]["return"], Value::Null);
    assert_eq!(r[0]["fault"]["kind"], "iteration_budget");
    assert!(r[0]["fault"]["pc"].as_u64().is_some(), "{}", r[0]);
    let out = ok(&run(
        &home,
        &["test-run", nested.to_str().unwrap(), "--ctx", "bytesize=1"],
    ));
    assert!(
        out.contains("run 1: fault: instruction ")
            && out.contains("counts as verdict 0")
            && out.contains("interpreter and JIT agree on 1 run"),
        "{out}"
    );
}
