//! A process's first build leaves its programs to the interpreter (re-verification is all
//! its first driver call waits for); the watcher then swaps every chain for its native twin
//! (`Chain::to_native`) while calls go on. The swap must change speed, never decisions.

mod common;

use std::path::Path;

use gpubpf_runtime::attach::{self, AttachPoint};
use gpubpf_runtime::dispatch::{Chain, NoRecorder, PolicySet, Stack, Tier};
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::registry::Registry;

/// The pid the calls claim (`hdr.pid`).
const PID: u32 = 4242;

/// Loads `quota.o` (limit 1000 bytes) into a fresh registry at `home`.
fn load_quota(home: &Path, quota: &Path) {
    let quota = quota.to_str().expect("utf-8 path");
    common::cli::ok(&common::cli::run_with_registry(
        home,
        &[
            "load",
            quota,
            "--set",
            "limit_bytes=1000",
            "--set",
            "log_denials=0",
        ],
    ));
}

/// Word index of field `name` of `point`'s ctx.
fn word(point: &AttachPoint, name: &str) -> usize {
    point.field(name).expect("ctx field").offset as usize / 8
}

/// One policed call through `chain` on the shim's word path; the driver "succeeds" and
/// writes `out` to the out-value at `out_word` (if any). Returns the caller's result and
/// whether the driver was called.
fn call(
    chain: &Chain,
    point: &AttachPoint,
    stack: &mut Stack,
    args: &[(&str, u64)],
    out: Option<(usize, u64)>,
) -> (u32, bool) {
    let mut c = vec![0u64; point.ctx_size as usize / 8];
    c[0] = u64::from(point.id);
    // hdr.pid (low half of word 2): the process the policy charges.
    c[2] = u64::from(PID);
    for (name, v) in args {
        c[word(point, name)] = *v;
    }
    let v = chain.entry_words(&mut c, stack, &mut NoRecorder);
    let called = v.verdict == 0;
    if called {
        if let Some((w, value)) = out {
            c[w] = value;
        }
    }
    let (result, faults) = chain.exit_words(&mut c, stack, v.verdict, called, &mut NoRecorder);
    assert_eq!((v.faults, faults), (0, 0), "no program faults");
    (result, called)
}

/// Runs a fixed sequence of allocations and frees against `quota` loaded into `home`,
/// interpreted until call `switch_at` and native from then on; returns every call's
/// outcome and the usage the policy's `proc_usage` map holds at the end.
fn run(home: &Path, quota: &Path, switch_at: usize) -> (Vec<(u32, bool)>, Vec<u8>) {
    load_quota(home, quota);
    let reg = Registry::open(home).expect("open registry");
    let helpers = standard_helpers();
    let (set, failed) =
        PolicySet::load_each_in(&reg, &helpers, Tier::Interpreted, None).expect("build");
    assert!(failed.is_empty(), "{failed:?}");
    assert!(set.programs().all(|p| !p.is_native() && p.code_size() == 0));
    let alloc = attach::resolve("cuMemAlloc").expect("catalog");
    let free = attach::resolve("cuMemFree").expect("catalog");
    let mut chains = set.into_chains();
    let interp_alloc = chains.remove(&alloc.id).expect("alloc chain");
    let interp_free = chains.remove(&free.id).expect("free chain");
    assert!(interp_alloc.interpreted() && interp_free.interpreted());
    let native_alloc = interp_alloc.to_native(&helpers).expect("compile");
    let native_free = interp_free.to_native(&helpers).expect("compile");
    assert!(!native_alloc.interpreted() && !native_free.interpreted());
    assert!(native_alloc
        .entry
        .iter()
        .chain(&native_alloc.exit)
        .all(|p| p.code_size() > 0));
    let names = |c: &Chain| {
        c.entry
            .iter()
            .chain(&c.exit)
            .map(|p| (p.name.clone(), p.priority, p.phase))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&interp_alloc), names(&native_alloc));

    let mut stack = Stack::new_boxed();
    let out_dptr = word(alloc, "out.dptr");
    let mut live: Vec<u64> = Vec::new();
    let mut outcomes = Vec::new();
    for i in 0..60usize {
        let (a, f) = if i < switch_at {
            (&interp_alloc, &interp_free)
        } else {
            (&native_alloc, &native_free)
        };
        if i % 3 == 2 && !live.is_empty() {
            let handle = live.remove(i % live.len());
            outcomes.push(call(f, free, &mut stack, &[("args.dptr", handle)], None));
        } else {
            let handle = 0x10_0000 + i as u64 * 0x1000;
            let size = (i as u64 * 37) % 300 + 1;
            let o = call(
                a,
                alloc,
                &mut stack,
                &[("args.bytesize", size)],
                Some((out_dptr, handle)),
            );
            if o.1 && o.0 == 0 {
                live.push(handle);
            }
            outcomes.push(o);
        }
    }
    let usage = reg.open_map("proc_usage").expect("map");
    let key = PID.to_ne_bytes();
    let value = usage
        .lookup(&key)
        .expect("lookup")
        .expect("this process has an entry");
    (outcomes, value)
}

#[test]
fn interpreted_and_native_chains_decide_alike_across_the_switch() {
    let Some((dir, _, [quota])) = common::cli::with_policies(["policies/quota.bpf.c"]) else {
        return;
    };
    let interpreted = run(&dir.path().join("a"), &quota, usize::MAX);
    let native = run(&dir.path().join("b"), &quota, 0);
    let mixed = run(&dir.path().join("c"), &quota, 31);
    // The sequence crosses the limit: some allocations are refused with error 2.
    assert!(interpreted.0.contains(&(2, false)), "{interpreted:?}");
    assert!(interpreted.0.iter().filter(|o| o.1).count() > 20);
    assert_eq!(interpreted, native);
    assert_eq!(interpreted, mixed);
}
