//! Maps shared between processes: exact totals of concurrent BPF-style atomic updates, and
//! survival of SIGKILLed lock holders.
//!
//! Worker processes are this test executable itself, re-run with `--ignored --exact
//! worker_*` and the worker's parameters in environment variables (the `worker_*` tests
//! are `#[ignore]`d, so a normal run does not execute them).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::maps::{lock, mapping, Map, MapMeta, MapSpec, MapType, BPF_ANY, BPF_NOEXIST};
use gpubpf_runtime::registry::Registry;

use common::process::within;

const ENV_MAP: &str = "GPUBPF_TEST_MAP";
const ENV_AUX: &str = "GPUBPF_TEST_AUX";
const ENV_HOME: &str = "GPUBPF_TEST_HOME";
const ENV_ITERS: &str = "GPUBPF_TEST_ITERS";
const THREADS: u64 = 4;
const KEYS: u64 = 64;

fn spawn_worker(name: &str, envs: &[(&str, &Path)], iters: Option<u64>) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    for (k, v) in envs {
        c.env(k, v);
    }
    if let Some(n) = iters {
        c.env(ENV_ITERS, n.to_string());
    }
    c.spawn().expect("spawn worker")
}

fn env_path(k: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(k).unwrap_or_else(|| panic!("worker needs {k}")))
}

fn counters_spec() -> MapSpec {
    MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 16,
        max_entries: 128,
        flags: 0,
    }
}

/// What a BPF program does: look up, insert if missing (`BPF_NOEXIST`, tolerating
/// `-EEXIST` from a racing inserter), then atomically add to the value in shared memory.
fn count(helpers: &gpubpf_runtime::helper_table::HelperTable, map: &Map, key: u32, add: u64) {
    let lookup = helpers.get(1).unwrap();
    let update = helpers.get(2).unwrap();
    let k = key.to_ne_bytes();
    let mut p = lookup(map.handle(), k.as_ptr() as u64, 0, 0, 0);
    if p == 0 {
        let zero = [0u8; 16];
        let rc = update(
            map.handle(),
            k.as_ptr() as u64,
            zero.as_ptr() as u64,
            BPF_NOEXIST,
            0,
        );
        assert!(
            rc == 0 || rc as i64 == -i64::from(libc::EEXIST),
            "update: {}",
            rc as i64
        );
        p = lookup(map.handle(), k.as_ptr() as u64, 0, 0, 0);
    }
    assert_ne!(p, 0);
    // SAFETY: the value is 16 bytes, 8-aligned, in the shared mapping.
    let v = unsafe { &*(p as *const [AtomicU64; 2]) };
    v[0].fetch_add(1, Ordering::SeqCst);
    v[1].fetch_add(add, Ordering::SeqCst);
}

#[test]
#[ignore = "worker process of two_processes_count_exactly"]
fn worker_adder() {
    let map = Map::open(&env_path(ENV_MAP)).unwrap();
    let iters: u64 = std::env::var(ENV_ITERS).unwrap().parse().unwrap();
    let helpers = standard_helpers();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for i in 0..iters {
                    count(&helpers, &map, (i % KEYS) as u32, i);
                }
            });
        }
    });
}

#[test]
fn two_processes_count_exactly() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("counts");
    let map = Map::create(&path, &counters_spec(), &MapMeta::default()).unwrap();
    let iters = 20_000u64;
    let kids: Vec<Child> = (0..2)
        .map(|_| spawn_worker("worker_adder", &[(ENV_MAP, &path)], Some(iters)))
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success(), "worker failed");
    }
    let mut calls = 0u64;
    let mut sum = 0u64;
    let entries = map.entries().unwrap();
    assert_eq!(entries.len() as u64, KEYS);
    for e in &entries {
        calls += u64::from_ne_bytes(e.value[..8].try_into().unwrap());
        sum += u64::from_ne_bytes(e.value[8..].try_into().unwrap());
    }
    let per_thread_sum: u64 = (0..iters).sum();
    assert_eq!(calls, 2 * THREADS * iters);
    assert_eq!(sum, 2 * THREADS * per_thread_sum);
}

fn small_hash() -> MapSpec {
    MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 64,
        flags: 0,
    }
}

fn ring_spec() -> MapSpec {
    MapSpec {
        map_type: MapType::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: mapping::page_size() as u32,
        flags: 0,
    }
}

#[test]
#[ignore = "worker process of sigkilled_lock_holders_never_block_survivors"]
fn worker_churn() {
    let map = Map::open(&env_path(ENV_MAP)).unwrap();
    let ring = Map::open(&env_path(ENV_AUX)).unwrap();
    let reg = Registry::open(&env_path(ENV_HOME)).unwrap();
    let mut i = 0u32;
    loop {
        // Mostly bucket-lock traffic on few keys, some ring and registry-lock traffic.
        let k = (i % 8).to_ne_bytes();
        let _ = map.update(&k, &u64::from(i).to_ne_bytes(), BPF_ANY);
        if i % 3 == 1 {
            let _ = map.delete(&k);
        }
        if i % 16 == 1 {
            let _ = ring.ringbuf_output(&[7; 24]);
        }
        if i % 64 == 1 {
            drop(reg.writer().unwrap());
        }
        i = i.wrapping_add(1);
    }
}

#[test]
fn sigkilled_lock_holders_never_block_survivors() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    let reg = Registry::open(&home).unwrap();
    let map_path = reg.map_path("churn").unwrap();
    let ring_path = reg.map_path("events").unwrap();
    let map =
        std::sync::Arc::new(Map::create(&map_path, &small_hash(), &MapMeta::default()).unwrap());
    let ring =
        std::sync::Arc::new(Map::create(&ring_path, &ring_spec(), &MapMeta::default()).unwrap());
    drop(reg);
    let start = Instant::now();
    let rounds = 30;
    for round in 0..rounds {
        let mut child = spawn_worker(
            "worker_churn",
            &[
                (ENV_MAP, &map_path),
                (ENV_AUX, &ring_path),
                (ENV_HOME, &home),
            ],
            None,
        );
        // Let it get going (process start-up is a few ms), then kill it mid-flight.
        std::thread::sleep(Duration::from_millis(8 + (round % 7) * 3));
        // SAFETY: kill(2) on the pid of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let (m, r, h) = (map.clone(), ring.clone(), home.clone());
        within(
            Duration::from_secs(5),
            "map, ring and registry operations",
            move || {
                for k in 0u32..8 {
                    m.update(&k.to_ne_bytes(), &[1; 8], BPF_ANY).unwrap();
                    assert_eq!(m.lookup(&k.to_ne_bytes()).unwrap(), Some(vec![1; 8]));
                    m.delete(&k.to_ne_bytes()).unwrap();
                }
                // The killed producer may have filled the ring: drain it, then produce.
                r.ringbuf_consume(|_| {}).unwrap();
                r.ringbuf_output(&[1; 8]).unwrap();
                r.ringbuf_consume(|_| {}).unwrap();
                let reg = Registry::open(&h).unwrap();
                drop(reg.writer().unwrap());
            },
        );
    }
    eprintln!(
        "{rounds} kills in {:?}, {} locks recovered from dead owners",
        start.elapsed(),
        lock::recoveries()
    );
    assert!(
        lock::recoveries() > 0,
        "no kill hit a held lock: the test proved nothing"
    );
    // The map still works at full capacity: entries stranded by killed writers were
    // reclaimed when their bucket lock was recovered.
    map.clear().unwrap();
    let mut inserted = 0;
    for k in 0u32..64 {
        if map.update(&k.to_ne_bytes(), &[2; 8], BPF_NOEXIST).is_ok() {
            inserted += 1;
        }
    }
    assert_eq!(inserted, 64, "only {inserted} entries left");
    for k in 0u32..inserted as u32 {
        assert_eq!(map.lookup(&k.to_ne_bytes()).unwrap(), Some(vec![2; 8]));
    }
}

const RECORDS: u64 = 5_000;

#[test]
#[ignore = "worker process of ring_buffer_many_producers_one_consumer"]
fn worker_producer() {
    let ring = Map::open(&env_path(ENV_MAP)).unwrap();
    let drops = Map::open(&env_path(ENV_AUX)).unwrap();
    let pid = u64::from(std::process::id());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (ring, drops) = (&ring, &drops);
            s.spawn(move || {
                let mut rejected = 0u64;
                for seq in 0..RECORDS {
                    // Variable sizes so that records wrap at every offset.
                    let mut rec = vec![0u8; 16 + (seq % 5) as usize * 8];
                    rec[..8].copy_from_slice(&(pid << 8 | t).to_ne_bytes());
                    rec[8..16].copy_from_slice(&seq.to_ne_bytes());
                    while ring.ringbuf_output(&rec).is_err() {
                        rejected += 1;
                        std::thread::yield_now();
                    }
                }
                let p = drops.array_value_ptr(0).unwrap();
                // SAFETY: an 8-byte, 8-aligned array value in the shared mapping.
                unsafe { &*(p as *const AtomicU64) }.fetch_add(rejected, Ordering::SeqCst);
            });
        }
    });
}

#[test]
fn ring_buffer_many_producers_one_consumer() {
    let d = tempfile::tempdir().unwrap();
    let ring_path = d.path().join("ring");
    let drops_path = d.path().join("drops");
    let mut small = ring_spec();
    small.max_entries *= 4;
    let ring = Map::create(&ring_path, &small, &MapMeta::default()).unwrap();
    let drops_spec = MapSpec {
        map_type: MapType::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 1,
        flags: 0,
    };
    let drops = Map::create(&drops_path, &drops_spec, &MapMeta::default()).unwrap();
    let mut kids: Vec<Child> = (0..2)
        .map(|_| {
            spawn_worker(
                "worker_producer",
                &[(ENV_MAP, &ring_path), (ENV_AUX, &drops_path)],
                None,
            )
        })
        .collect();
    let mut next: std::collections::HashMap<u64, u64> = Default::default();
    let mut received = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut consume = |ring: &Map| {
        ring.ringbuf_consume(|r| {
            assert!(
                r.len() >= 16 && r.len() % 8 == 0,
                "record of {} bytes",
                r.len()
            );
            let who = u64::from_ne_bytes(r[..8].try_into().unwrap());
            let seq = u64::from_ne_bytes(r[8..16].try_into().unwrap());
            let want = next.entry(who).or_insert(0);
            assert_eq!(seq, *want, "producer {who:#x}: out of order or lost");
            assert_eq!(r.len(), 16 + (seq % 5) as usize * 8);
            *want += 1;
            received += 1;
        })
        .unwrap();
    };
    while kids.iter_mut().any(|k| k.try_wait().unwrap().is_none()) {
        assert!(Instant::now() < deadline, "producers did not finish");
        consume(&ring);
    }
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
    consume(&ring);
    assert_eq!(received, 2 * 2 * RECORDS);
    assert_eq!(next.len(), 4);
    let st = ring.ringbuf_stats().unwrap();
    let rejected = u64::from_ne_bytes(
        drops
            .lookup(&0u32.to_ne_bytes())
            .unwrap()
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert_eq!(
        st.dropped, rejected,
        "every rejected output is counted as a drop"
    );
    assert_eq!(st.pending, 0);
}
