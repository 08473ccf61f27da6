//! End to end: `policies/quota.bpf.c` and `policies/meminfo.bpf.c` on every allocation family
//! (INTERCEPTION.md §5), with unmodified test applications on the mock CUDA driver
//! (`tests/shim/`), `libgpubpf.so` preloaded and the policies loaded by the real CLI:
//!
//! - each family is refused exactly at the allocation that crosses the limit, with
//!   CUDA_ERROR_OUT_OF_MEMORY (2), without reaching the driver;
//! - each family's free credits what it charged: an allocate/free loop far past the limit
//!   never hits it;
//! - two processes' usage: a per-user and a per-device limit shared by two processes that hold
//!   the same handle values and device addresses, each credited only for its own;
//! - meminfo: cuMemGetInfo and cuDeviceTotalMem report the quota and quota − usage.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use serde_json::{json, Value};

use common::cli::{ok_json, run_with_registry as cli};
use common::process::wait_for_files;
use common::shim::{session, MockStack, Session};

/// Every family the app knows, allocated and freed by its own driver calls.
const FAMILIES: [&str; 9] = [
    "alloc", "pitch", "managed", "async", "pool", "create", "array", "array3d", "mipmap",
];
/// Bytes of one allocation: a multiple of the mock's 512-byte pitch, and a valid array width.
const SIZE: u64 = 65536;

fn policy(dir: &Path, src: &str) -> PathBuf {
    common::cli::build_policy(dir, src).expect("clang present: policy built")
}

fn load(home: &Path, obj: &Path, sets: &[&str]) {
    let mut args = vec!["-j", "load", obj.to_str().expect("utf-8 path")];
    for s in sets {
        args.extend(["--set", s]);
    }
    ok_json(&cli(home, &args));
}

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `gpubpf maps dump MAP` as key -> value (the `formatted` part of bpftool-style entries).
fn dump(home: &Path, map: &str) -> BTreeMap<u64, Value> {
    ok_json(&cli(home, &["-j", "maps", "dump", map]))
        .as_array()
        .expect("array")
        .iter()
        .map(|e| {
            let f = &e["formatted"];
            (f["key"].as_u64().expect("integer key"), f["value"].clone())
        })
        .collect()
}

fn usage(home: &Path, map: &str, key: u64) -> Value {
    dump(home, map)
        .remove(&key)
        .unwrap_or_else(|| panic!("no {map}[{key}]"))
}

fn uid() -> u64 {
    // SAFETY: getuid has no preconditions and cannot fail.
    u64::from(unsafe { libc::getuid() })
}

#[test]
fn every_family_is_denied_exactly_at_the_crossing_allocation() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    // Three allocations fit, the fourth would cross the limit by half an allocation.
    let limit = 3 * SIZE + SIZE / 2;
    load(
        &home,
        &quota,
        &[&format!("limit_bytes={limit}"), "log_denials=0"],
    );
    let size = SIZE.to_string();
    for route in ["proc", "link"] {
        for family in FAMILIES {
            let out = mock.run_app(&home, route, &["family", family, "5", &size]);
            assert_eq!(
                lines(&out),
                [
                    "alloc 0 0",
                    "alloc 1 0",
                    "alloc 2 0",
                    "alloc 3 2",
                    "alloc 4 2",
                    "free 0",
                    "retry 0",
                    "mock used=0 live=0",
                    // The denied calls never reached the driver.
                    "mock alloc=4 free=4 launch=0 launch_ptsz=0 getinfo=0",
                ],
                "{family} through {route}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // One process per run: each charged 4 allocations, credited 4 frees, denied twice.
    let procs = dump(&home, "proc_usage");
    assert_eq!(procs.len(), 2 * FAMILIES.len(), "{procs:?}");
    for u in procs.values() {
        assert_eq!(
            u,
            &json!({"bytes": 0, "allocs": 4, "frees": 4, "denied": 2}),
            "{procs:?}"
        );
    }
    let n = 2 * FAMILIES.len() as u64;
    assert_eq!(
        usage(&home, "user_usage", uid()),
        json!({"bytes": 0, "allocs": 4 * n, "frees": 4 * n, "denied": 0})
    );
    assert_eq!(usage(&home, "dev_usage", 0)["bytes"], 0);
    assert!(
        dump_len(&home, "quota_allocs") == 0,
        "no live allocation left"
    );
}

fn dump_len(home: &Path, map: &str) -> usize {
    ok_json(&cli(home, &["-j", "maps", "dump", map]))
        .as_array()
        .expect("array")
        .len()
}

#[test]
fn frees_of_every_family_credit_the_usage() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    // Room for two allocations; each process allocates and frees 40 times.
    load(
        &home,
        &quota,
        &[
            &format!("limit_bytes={}", 2 * SIZE),
            &format!("user_limit_bytes={}", 2 * SIZE),
            &format!("device_limit_bytes={}", 2 * SIZE),
            "log_denials=0",
        ],
    );
    for family in FAMILIES {
        let out = mock.run_app(&home, "dlsym", &["loop", family, "40", &SIZE.to_string()]);
        assert_eq!(
            lines(&out)[..2],
            ["loop ok=40 first_error=0", "mock used=0 live=0"],
            "{family}"
        );
    }
    let u = usage(&home, "user_usage", uid());
    assert_eq!(
        (&u["bytes"], &u["allocs"], &u["frees"]),
        (&json!(0), &json!(360), &json!(360))
    );
    assert_eq!(usage(&home, "dev_usage", 0)["frees"], 360);
    // The limits are live: a third allocation held at once is refused.
    let out = mock.run_app(
        &home,
        "dlsym",
        &["family", "create", "3", &SIZE.to_string()],
    );
    assert_eq!(lines(&out)[..3], ["alloc 0 0", "alloc 1 0", "alloc 2 2"]);
}

/// Starts `hold FAMILY SIZE READY GO` and waits until it holds its allocation.
fn hold(mock: &MockStack, home: &Path, dir: &Path, family: &str, size: u64) -> (Child, PathBuf) {
    let (ready, go) = (
        dir.join(format!("ready-{family}")),
        dir.join(format!("go-{family}")),
    );
    let child = mock
        .command(&mock.app_dyn, home)
        .args(["proc", "hold", family, &size.to_string()])
        .arg(&ready)
        .arg(&go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holding process");
    wait_for_files(&[&ready], "the holding process never got ready");
    (child, go)
}

#[test]
fn two_processes_share_user_and_device_limits_and_are_credited_separately() {
    let Some(Session { mock, tmp, .. }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    // cuMemCreate against a per-user limit, cuMemAllocAsync against a per-device limit: in
    // both, the second process gets the same handle / device address the first one holds.
    for (family, limit, map, key) in [
        ("create", "user_limit_bytes", "user_usage", uid()),
        ("async", "device_limit_bytes", "dev_usage", 0),
    ] {
        let home = tmp.path().join(format!("reg-{family}"));
        load(
            &home,
            &quota,
            &[
                "limit_bytes=0",
                &format!("{limit}={}", 4 * SIZE),
                "log_denials=0",
            ],
        );
        let (a, go) = hold(mock, &home, tmp.path(), family, 2 * SIZE);
        let a_pid = u64::from(a.id());
        // The second process: 2 x SIZE fit beside the first one's 2 x SIZE, a third does not;
        // freeing its first (same id as the first process's) credits only its own.
        let out = mock.run_app(&home, "proc", &["family", family, "3", &SIZE.to_string()]);
        assert_eq!(
            lines(&out)[..5],
            ["alloc 0 0", "alloc 1 0", "alloc 2 2", "free 0", "retry 0"],
            "{family}"
        );
        assert_eq!(
            usage(&home, "proc_usage", a_pid)["bytes"],
            2 * SIZE,
            "{family}"
        );
        assert_eq!(usage(&home, map, key)["bytes"], 2 * SIZE, "{family}");
        assert_eq!(usage(&home, map, key)["denied"], 1, "{family}");
        std::fs::write(&go, b"").expect("create GO");
        let out = a.wait_with_output().expect("wait for the holding process");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let l = lines(&out);
        assert_eq!(l[1], "hold free 0", "{l:?}");
        // Its own allocation, by the id the second process also had.
        let want = if family == "create" {
            "0x1"
        } else {
            "0x7e0000000000"
        };
        assert_eq!(l[0], format!("hold alloc 0 id={want}"), "{family}");
        assert_eq!(usage(&home, "proc_usage", a_pid)["bytes"], 0, "{family}");
        assert_eq!(usage(&home, map, key)["bytes"], 0, "{family}");
        assert_eq!(dump_len(&home, "quota_allocs"), 0, "{family}");
    }
}

#[test]
fn meminfo_reports_the_quota_and_what_is_left_of_it() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let meminfo = policy(tmp.path(), "policies/meminfo.bpf.c");
    const MIB: u64 = 1 << 20;
    const MOCK_TOTAL: u64 = 1 << 30;
    let run =
        |home: &Path| lines(&mock.run_app(home, "proc", &["meminfo", &(100 * MIB).to_string()]));
    // meminfo loaded first (it creates the shared maps), quota after: a 256 MiB quota on
    // the mock's 1 GiB device.
    load(&home, &meminfo, &[]);
    load(&home, &quota, &["limit_bytes=256MiB"]);
    assert_eq!(
        run(&home)[..6],
        [
            format!("getinfo 0 free={} total={}", 256 * MIB, 256 * MIB),
            "alloc 0".into(),
            format!("getinfo 0 free={} total={}", 156 * MIB, 256 * MIB),
            format!("totalmem 0 bytes={}", 256 * MIB),
            "free 0".into(),
            format!("getinfo 0 free={} total={}", 256 * MIB, 256 * MIB),
        ]
    );
    // A quota larger than the device: the device's own figures (never more than it has).
    load(&home, &quota, &["limit_bytes=4GiB"]);
    assert_eq!(
        run(&home)[..4],
        [
            format!("getinfo 0 free={MOCK_TOTAL} total={MOCK_TOTAL}"),
            "alloc 0".into(),
            format!(
                "getinfo 0 free={} total={MOCK_TOTAL}",
                MOCK_TOTAL - 100 * MIB
            ),
            format!("totalmem 0 bytes={MOCK_TOTAL}"),
        ]
    );
    // Without quota the driver's values pass unchanged; meminfo alone changes nothing.
    let alone = tmp.path().join("reg-alone");
    load(&alone, &meminfo, &[]);
    assert_eq!(
        run(&alone)[2],
        format!(
            "getinfo 0 free={} total={MOCK_TOTAL}",
            MOCK_TOTAL - 100 * MIB
        )
    );
}

/// Allocations racing in threads never cross a limit together: each entry adds its size
/// first and takes it back when the sum crosses, so exactly the allocations that fit pass
/// (the former check-then-account let racing threads through on the same headroom).
#[test]
fn racing_threads_never_cross_the_limit() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = policy(tmp.path(), "policies/quota.bpf.c");
    let (threads, each, fit) = (8, 40, 10);
    load(
        &home,
        &quota,
        &[&format!("limit_bytes={}", fit * SIZE), "log_denials=0"],
    );
    let size = SIZE.to_string();
    for round in 0..5 {
        let out = mock.run_app(
            &home,
            "link",
            &["race", &threads.to_string(), &each.to_string(), &size],
        );
        assert_eq!(
            lines(&out)[0],
            format!("race ok={fit}"),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for u in dump(&home, "proc_usage").values() {
        assert_eq!(
            u,
            &json!({"bytes": 0, "allocs": fit, "frees": fit, "denied": threads * each - fit})
        );
    }
    assert_eq!(dump_len(&home, "quota_allocs"), 0);
}
