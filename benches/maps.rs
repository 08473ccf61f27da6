//! Map benchmarks: the helpers as programs call them (through the helper table's function
//! pointers), single-threaded and with 8 threads in 2 processes sharing the map file, next
//! to an in-process `Mutex<HashMap>` and a `DashMap` of the same size. Also
//! `gpubpf_get_kernel_name` (what trace.bpf.c calls on every launch) with a short name and
//! with a mangled name as long as PyTorch's, filling trace's 64-byte buffer.
//!
//! `cargo bench --bench maps` (filter: `cargo bench --bench maps -- hash`). The second
//! process of the `8t-2p` cases is this executable re-run with `GPUBPF_BENCH_CHILD` set;
//! both processes start together on a flag in shared memory.
//!
//! Times are **thread CPU time** per operation (`CLOCK_THREAD_CPUTIME_ID`), not wall time:
//! on a shared or oversubscribed machine (CI has 2 cores) wall time measures the
//! scheduler; CPU time measures the operation, including what contention costs it (cache
//! line transfers, lock waits spent spinning in `futex` fast paths). For the multi-thread
//! cases the figure is the mean over the 8 threads of CPU time per operation.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use dashmap::DashMap;
use gpubpf_runtime::helper_table::HelperFn;
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::maps::{mapping, Map, MapMeta, MapSpec, MapType};

const ENTRIES: u32 = 1024;
const THREADS_PER_PROC: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    ArrayLookup,
    HashHit,
    HashMiss,
    HashUpdate,
    RingOutput,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::ArrayLookup => "array_lookup",
            Op::HashHit => "hash_lookup_hit",
            Op::HashMiss => "hash_lookup_miss",
            Op::HashUpdate => "hash_update",
            Op::RingOutput => "ringbuf_output",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        [
            Op::ArrayLookup,
            Op::HashHit,
            Op::HashMiss,
            Op::HashUpdate,
            Op::RingOutput,
        ]
        .into_iter()
        .find(|o| o.name() == s)
    }
}

fn spec(op: Op) -> MapSpec {
    match op {
        Op::ArrayLookup => MapSpec {
            map_type: MapType::Array,
            key_size: 4,
            value_size: 8,
            max_entries: ENTRIES,
            flags: 0,
        },
        Op::RingOutput => MapSpec {
            map_type: MapType::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: (mapping::page_size() * 256) as u32,
            flags: 0,
        },
        _ => MapSpec {
            map_type: MapType::Hash,
            key_size: 4,
            value_size: 8,
            max_entries: ENTRIES,
            flags: 0,
        },
    }
}

fn create(dir: &Path, op: Op) -> Map {
    let m = Map::create(&dir.join(op.name()), &spec(op), &MapMeta::default()).unwrap();
    if matches!(op, Op::HashHit | Op::HashMiss | Op::HashUpdate) {
        for k in 0..ENTRIES {
            m.update(&k.to_ne_bytes(), &u64::from(k).to_ne_bytes(), 0)
                .unwrap();
        }
    }
    m
}

/// One operation as a program does it: a helper call through a function pointer.
struct Runner {
    f: HelperFn,
    handle: u64,
    op: Op,
}

impl Runner {
    fn new(map: &Map, op: Op) -> Self {
        let t = standard_helpers();
        let id = match op {
            Op::ArrayLookup | Op::HashHit | Op::HashMiss => 1,
            Op::HashUpdate => 2,
            Op::RingOutput => 130,
        };
        Runner {
            f: t.get(id).unwrap(),
            handle: map.handle(),
            op,
        }
    }

    #[inline(always)]
    fn run(&self, i: u64) -> u64 {
        let key: u32 = match self.op {
            Op::HashMiss => ENTRIES + (i as u32 & 0xffff),
            _ => (i.wrapping_mul(7919) % u64::from(ENTRIES)) as u32,
        };
        let k = key.to_ne_bytes();
        let v = i.to_ne_bytes();
        let (a2, a3, a4) = match self.op {
            Op::HashUpdate => (k.as_ptr() as u64, v.as_ptr() as u64, 2),
            Op::RingOutput => (v.as_ptr() as u64, 8, 0),
            _ => (k.as_ptr() as u64, 0, 0),
        };
        (self.f)(self.handle, black_box(a2), a3, a4, 0)
    }
}

/// Drains the ring buffer now and then so that `RingOutput` measures successful outputs.
fn drain_if_needed(map: &Map, op: Op, i: u64) {
    if op == Op::RingOutput && i & 4095 == 0 {
        let _ = map.ringbuf_consume(|r| {
            black_box(r);
        });
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `iters` operations; returns the thread CPU time they took.
fn thread_loop(map: &Map, op: Op, iters: u64, seed: u64) -> Duration {
    let r = Runner::new(map, op);
    let t0 = thread_cpu();
    for i in 0..iters {
        black_box(r.run(i.wrapping_add(seed)));
        drain_if_needed(map, op, i);
    }
    thread_cpu() - t0
}

/// Waits for a shared flag without hogging an oversubscribed CPU.
fn wait_for(f: &AtomicU64, at_least: u64) {
    let mut spins = 0u32;
    while f.load(Ordering::Acquire) < at_least {
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Shared start/stop flags of a multi-process run: [ready, go, done, cpu_ns].
fn flags(dir: &Path) -> Map {
    let spec = MapSpec {
        map_type: MapType::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
    };
    let p = dir.join("flags");
    match Map::open(&p) {
        Ok(m) => m,
        Err(_) => Map::create(&p, &spec, &MapMeta::default()).unwrap(),
    }
}

fn flag(m: &Map, i: u32) -> &AtomicU64 {
    let p = m.array_value_ptr(i).unwrap();
    // SAFETY: an 8-byte, 8-aligned value of the shared array.
    unsafe { &*(p as *const AtomicU64) }
}

fn child_main(dir: PathBuf, op: Op, iters: u64) {
    let map = Map::open(&dir.join(op.name())).unwrap();
    let f = flags(&dir);
    std::thread::scope(|s| {
        for t in 0..THREADS_PER_PROC {
            let (map, f) = (&map, &f);
            s.spawn(move || {
                flag(f, 0).fetch_add(1, Ordering::SeqCst);
                wait_for(flag(f, 1), 1);
                let cpu = thread_loop(map, op, iters, 1_000_003 * (t as u64 + 100));
                flag(f, 3).fetch_add(cpu.as_nanos() as u64, Ordering::SeqCst);
                flag(f, 2).fetch_add(1, Ordering::SeqCst);
            });
        }
    });
}

/// 8 threads in 2 processes, `iters` operations each; returns the mean thread CPU time.
fn two_process_run(dir: &Path, map: &Map, op: Op, iters: u64) -> Duration {
    let f = flags(dir);
    for i in 0..4 {
        flag(&f, i).store(0, Ordering::SeqCst);
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(
            "GPUBPF_BENCH_CHILD",
            format!("{}:{}:{}", dir.display(), op.name(), iters),
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let total = 2 * THREADS_PER_PROC as u64;
    std::thread::scope(|s| {
        let f = &f;
        for t in 0..THREADS_PER_PROC {
            s.spawn(move || {
                flag(f, 0).fetch_add(1, Ordering::SeqCst);
                wait_for(flag(f, 1), 1);
                let cpu = thread_loop(map, op, iters, 7_000_001 * (t as u64 + 1));
                flag(f, 3).fetch_add(cpu.as_nanos() as u64, Ordering::SeqCst);
                flag(f, 2).fetch_add(1, Ordering::SeqCst);
            });
        }
        wait_for(flag(f, 0), total);
        flag(f, 1).store(1, Ordering::Release);
        wait_for(flag(f, 2), total);
    });
    assert!(child.wait().unwrap().success());
    Duration::from_nanos(flag(&f, 3).load(Ordering::SeqCst) / total)
}

extern "C" fn noop_helper(a: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    a
}

/// The harness itself: key computation and a helper call through a function pointer that
/// does nothing. Subtract it from the other figures for the cost of the map operation.
fn bench_overhead(c: &mut Criterion) {
    let f: HelperFn = black_box(noop_helper);
    c.bench_function("call_overhead/noop_helper/1t", |b| {
        b.iter_custom(|iters| {
            let t0 = thread_cpu();
            for i in 0..iters {
                let key = (i.wrapping_mul(7919) % u64::from(ENTRIES)) as u32;
                let k = key.to_ne_bytes();
                black_box(f(0, black_box(k.as_ptr() as u64), 0, 0, 0));
            }
            thread_cpu() - t0
        });
    });
}

fn bench_shared_maps(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for op in [
        Op::ArrayLookup,
        Op::HashHit,
        Op::HashMiss,
        Op::HashUpdate,
        Op::RingOutput,
    ] {
        let map = create(dir.path(), op);
        let mut g = c.benchmark_group(op.name());
        g.bench_function(BenchmarkId::new("gpubpf", "1t"), |b| {
            let mut seed = 0u64;
            b.iter_custom(|iters| {
                seed = seed.wrapping_add(iters);
                thread_loop(&map, op, iters, seed)
            });
        });
        g.sample_size(20);
        g.bench_function(BenchmarkId::new("gpubpf", "8t-2p"), |b| {
            b.iter_custom(|iters| two_process_run(dir.path(), &map, op, iters));
        });
        g.finish();
    }
}

/// 8 threads, `iters` operations each; returns the mean thread CPU time.
fn multi_thread(iters: u64, f: &(dyn Fn(u64) + Sync)) -> Duration {
    let n = 2 * THREADS_PER_PROC as u64;
    let total: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|t| {
                s.spawn(move || {
                    let t0 = thread_cpu();
                    for i in 0..iters {
                        f(i.wrapping_add(t * 7_000_001));
                    }
                    (thread_cpu() - t0).as_nanos() as u64
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    Duration::from_nanos(total / n)
}

fn bench_baselines(c: &mut Criterion) {
    let mutex: Arc<Mutex<HashMap<u32, u64>>> = Arc::new(Mutex::new(
        (0..ENTRIES).map(|k| (k, u64::from(k))).collect(),
    ));
    let dash: DashMap<u32, u64> = (0..ENTRIES).map(|k| (k, u64::from(k))).collect();
    let hit = |i: u64| (i.wrapping_mul(7919) % u64::from(ENTRIES)) as u32;
    let miss = |i: u64| ENTRIES + (i as u32 & 0xffff);
    type Case<'a> = (&'a str, Box<dyn Fn(u64) + Sync + 'a>);
    let cases: Vec<(&str, Vec<Case<'_>>)> = vec![
        (
            "hash_lookup_hit",
            vec![
                (
                    "mutex_hashmap",
                    Box::new(|i| {
                        black_box(mutex.lock().unwrap().get(&hit(i)).copied());
                    }),
                ),
                (
                    "dashmap",
                    Box::new(|i| {
                        black_box(dash.get(&hit(i)).map(|v| *v));
                    }),
                ),
            ],
        ),
        (
            "hash_lookup_miss",
            vec![
                (
                    "mutex_hashmap",
                    Box::new(|i| {
                        black_box(mutex.lock().unwrap().get(&miss(i)).copied());
                    }),
                ),
                (
                    "dashmap",
                    Box::new(|i| {
                        black_box(dash.get(&miss(i)).map(|v| *v));
                    }),
                ),
            ],
        ),
        (
            "hash_update",
            vec![
                (
                    "mutex_hashmap",
                    Box::new(|i| {
                        if let Some(v) = mutex.lock().unwrap().get_mut(&hit(i)) {
                            *v = i;
                        }
                    }),
                ),
                (
                    "dashmap",
                    Box::new(|i| {
                        if let Some(mut v) = dash.get_mut(&hit(i)) {
                            *v = i;
                        }
                    }),
                ),
            ],
        ),
    ];
    for (group, impls) in &cases {
        let mut g = c.benchmark_group(*group);
        for (name, f) in impls {
            g.bench_function(BenchmarkId::new(*name, "1t"), |b| {
                let mut seed = 0u64;
                b.iter_custom(|iters| {
                    seed = seed.wrapping_add(iters);
                    let t0 = thread_cpu();
                    for i in 0..iters {
                        f(black_box(i.wrapping_add(seed)));
                    }
                    thread_cpu() - t0
                });
            });
        }
        g.sample_size(20);
        for (name, f) in impls {
            g.bench_function(BenchmarkId::new(*name, "8t-1p"), |b| {
                b.iter_custom(|iters| multi_thread(iters, f.as_ref()));
            });
        }
        g.finish();
    }
}

/// A kernel name of the length PyTorch's elementwise kernels have (longer than the buffer).
static LONG_NAME: &[u8] =
    b"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_\0";
static SHORT_NAME: &[u8] = b"vector_add\0";

/// A `cuFuncGetName` that names function 1 with [`SHORT_NAME`] and any other with
/// [`LONG_NAME`].
unsafe extern "C" fn name_of(name: *mut *const std::ffi::c_char, f: u64) -> i32 {
    let s = if f == 1 { SHORT_NAME } else { LONG_NAME };
    // SAFETY: the helper passes a writable out-pointer.
    unsafe { *name = s.as_ptr().cast() };
    0
}

/// `gpubpf_get_kernel_name` through the helper table into a 64-byte buffer (trace's
/// `KERNEL_NAME_LEN`), the driver's own lookup replaced by [`name_of`].
fn bench_kernel_name(c: &mut Criterion) {
    let table = standard_helpers();
    let id = gpubpf_verifier::helpers::GPUBPF_HELPER_BASE;
    let f: HelperFn = table.get(id).expect("gpubpf_get_kernel_name registered");
    gpubpf_runtime::helpers::set_kernel_name_resolver(Some(name_of));
    let mut g = c.benchmark_group("get_kernel_name");
    for (label, func) in [
        ("short (10 bytes)", 1u64),
        ("long (96 bytes, truncated to 63)", 2),
    ] {
        g.bench_function(label, |b| {
            let mut buf = [0u8; 64];
            b.iter_custom(|iters| {
                let t0 = thread_cpu();
                for _ in 0..iters {
                    black_box(f(black_box(func), buf.as_mut_ptr() as u64, 64, 0, 0));
                }
                thread_cpu() - t0
            });
        });
    }
    g.finish();
    gpubpf_runtime::helpers::set_kernel_name_resolver(None);
}

/// `bpf_get_current_comm`, cached per thread for a tick of the coarse clock (a `prctl`
/// system call per call before).
fn bench_comm(c: &mut Criterion) {
    let table = standard_helpers();
    let f: HelperFn = table.get(16).expect("bpf_get_current_comm registered");
    let mut g = c.benchmark_group("get_current_comm");
    g.bench_function("16-byte buffer", |b| {
        let mut buf = [0u8; 16];
        b.iter_custom(|iters| {
            let t0 = thread_cpu();
            for _ in 0..iters {
                black_box(f(buf.as_mut_ptr() as u64, 16, 0, 0, 0));
            }
            thread_cpu() - t0
        });
    });
    g.finish();
}

fn main() {
    if let Ok(spec) = std::env::var("GPUBPF_BENCH_CHILD") {
        let mut parts = spec.rsplitn(3, ':');
        let iters = parts.next().and_then(|s| s.parse().ok()).expect("iters");
        let op = parts.next().and_then(Op::parse).expect("op");
        let dir = PathBuf::from(parts.next().expect("dir"));
        child_main(dir, op, iters);
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    bench_overhead(&mut c);
    bench_kernel_name(&mut c);
    bench_comm(&mut c);
    bench_shared_maps(&mut c);
    bench_baselines(&mut c);
    c.final_summary();
}
