//! `runtime::dispatch` semantics on programs loaded through the real CLI: priority order,
//! first non-zero verdict wins and skips the real call, exit programs run after a veto and
//! may override the result and writable out-values, policies re-verified per process.
//! Needs clang (scripts/test.sh installs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gpubpf_runtime::attach::{self, Phase};
use gpubpf_runtime::dispatch::{
    AttachedProgram, Chain, CtxBuf, Decision, PolicySet, RunError, RunRecorder, Stack, Tier,
    FAIL_CLOSED_RESULT,
};
use gpubpf_runtime::helper_table::RUN_ITERATION_BUDGET;
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::jit;
use gpubpf_runtime::registry::Registry;
use gpubpf_verifier::sanitize::TRAP_INSN;

fn load(home: &Path, src: &str, name: &str, priority: i32) -> bool {
    load_with(home, src, name, priority, &[])
}

/// [`load`] with more `gpubpf load` arguments (`--shadow`).
fn load_with(home: &Path, src: &str, name: &str, priority: i32, extra: &[&str]) -> bool {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let obj = home.join(format!("{name}.o"));
    let src = repo.join("tests/data/dispatch").join(src);
    if !common::cli::build_object(&src, &obj, &home.join("sdk")) {
        return false;
    }
    let out = Command::new(common::cli::gpubpf())
        .arg("load")
        .arg(&obj)
        .args(["--name", name, "--priority", &priority.to_string()])
        .args(extra)
        .env("GPUBPF_HOME", home.join("reg"))
        .output()
        .expect("run gpubpf load");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// Loads each `(source, name, priority)` with [`load`], then builds the process's view of
/// the registry as the shim does; `None` when clang is missing (the test is skipped).
fn policy_set(home: &Path, policies: &[(&str, &str, i32)]) -> Option<PolicySet> {
    for &(src, name, priority) in policies {
        if !load(home, src, name, priority) {
            return None;
        }
    }
    let reg = Registry::open(&home.join("reg")).expect("open registry");
    Some(PolicySet::load(&reg, &standard_helpers()).expect("re-verify and compile"))
}

#[test]
fn chain_order_verdicts_and_exit_overrides() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // veto_small has the larger priority number, so veto_big runs first.
    let Some(set) = policy_set(
        tmp.path(),
        &[
            ("veto_small.bpf.c", "small", 10),
            ("veto_big.bpf.c", "big", 0),
        ],
    ) else {
        return;
    };
    assert_eq!(set.programs().count(), 4);
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let chain = set.chain(alloc).expect("programs on cuMemAlloc");
    let order: Vec<&str> = chain.entry.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["veto_big", "veto_all"]);
    let mut stack = Stack::new_boxed();

    // 200 bytes: veto_big says 7 first; veto_all never runs; the real call is skipped;
    // forgive (exit) sees 7 and leaves it.
    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    ctx.set("args.bytesize", 200).expect("field");
    let o = chain.call(&mut ctx, &mut stack, |_| panic!("vetoed call must not run"));
    assert_eq!((o.result, o.called), (7, false));
    assert_eq!(o.denied_by, Some(("big".into(), "veto_big".into())));

    // 50 bytes: veto_big passes, veto_all says 5, forgive turns 5 into success.
    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    ctx.set("args.bytesize", 50).expect("field");
    let o = chain.call(&mut ctx, &mut stack, |_| panic!("vetoed call must not run"));
    assert_eq!((o.result, o.called), (0, false));
    assert_eq!(o.denied_by, Some(("small".into(), "veto_all".into())));
    assert!(o.faults.is_empty());

    // cuMemGetInfo has only an exit program: the real call runs and its out-value is
    // rewritten for the application.
    let info = attach::resolve("cuMemGetInfo").expect("catalog");
    let chain = set.chain(info).expect("program on cuMemGetInfo");
    let mut ctx = CtxBuf::new(info, Phase::Entry);
    let o = chain.call(&mut ctx, &mut stack, |ctx| {
        ctx.set("out.free", 80 << 30).expect("field");
        ctx.set("out.total", 80 << 30).expect("field");
        0
    });
    assert_eq!((o.result, o.called), (0, true));
    assert_eq!(ctx.get("out.free").expect("field"), 40 << 30);
    assert_eq!(ctx.get("out.total").expect("field"), 80 << 30);
}

/// Issue #11: nested `bpf_loop`s in restricted C are accepted by the verifier (here: by
/// `gpubpf load` and again by `PolicySet::load`), and a hooked call must still return
/// promptly: the run-time iteration budget ends the program, the chain fails open (the
/// real call runs, verdict 0) and counts the fault.
#[test]
fn a_policy_that_exhausts_the_iteration_budget_fails_open_and_is_counted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(set) = policy_set(tmp.path(), &[("nested_loops.bpf.c", "nested", 0)]) else {
        return;
    };
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let chain = set.chain(alloc).expect("program on cuMemAlloc");
    let mut stack = Stack::new_boxed();

    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    ctx.set("args.bytesize", 200).expect("field");
    let start = Instant::now();
    let o = chain.call(&mut ctx, &mut stack, |_| 0);
    let elapsed = start.elapsed();
    assert_eq!((o.result, o.called, o.denied_by), (0, true, None));
    assert_eq!(o.faults, ["nested_loops"]);
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    // The fault is the budget, at the inner `bpf_loop` call.
    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    match chain.entry[0].run(&mut ctx, &mut stack) {
        Err(RunError::Native(jit::ExecError::IterationBudget { budget, .. })) => {
            assert_eq!(budget, RUN_ITERATION_BUDGET)
        }
        other => panic!("expected the iteration budget fault, got {other:?}"),
    }
}

/// Code behind a branch the verifier decides (and clang could not fold) is never verified;
/// the process replaces it with dead-code traps before compiling, and the program runs.
#[test]
fn never_reached_code_becomes_traps_before_compiling() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(set) = policy_set(tmp.path(), &[("dead_branch.bpf.c", "dead", 0)]) else {
        return;
    };
    // `gpubpf verify` names the never-reached instructions, in text and JSON.
    let obj = tmp.path().join("dead.o");
    let out = Command::new(common::cli::gpubpf())
        .arg("verify")
        .arg(&obj)
        .output()
        .expect("run gpubpf verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("are never reached"),
        "{text}"
    );
    let out = Command::new(common::cli::gpubpf())
        .args(["verify", "-j"])
        .arg(&obj)
        .output()
        .expect("run gpubpf verify -j");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let listed = json["programs"][0]["stats"]["unreached"]
        .as_array()
        .map_or(0, Vec::len);

    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let chain = set.chain(alloc).expect("program on cuMemAlloc");
    let prog = &chain.entry[0];
    assert_eq!(listed, prog.stats.unreached.len());
    assert!(
        !prog.stats.unreached.is_empty(),
        "the decided branch leaves code unreached"
    );
    for &pc in &prog.stats.unreached {
        assert_eq!(prog.insns()[pc], TRAP_INSN, "slot {pc} is a trap");
    }
    let traps = prog.insns().iter().filter(|i| **i == TRAP_INSN).count();
    assert!(traps >= prog.stats.unreached.len());
    let mut stack = Stack::new_boxed();
    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    ctx.set("args.bytesize", 200).expect("field");
    let o = chain.call(&mut ctx, &mut stack, |_| 0);
    assert_eq!((o.result, o.called, o.denied_by), (0, true, None));
    assert!(o.faults.is_empty(), "{:?}", o.faults);
}

/// Counts what the chain reports to its recorder.
#[derive(Default)]
struct Counting {
    started: usize,
    finished: usize,
    faults: usize,
}

impl RunRecorder for Counting {
    fn start(&mut self) -> Option<u64> {
        self.started += 1;
        Some(self.started as u64)
    }
    fn finish(&mut self, _slot: Option<u32>, start: Option<u64>, fault: bool) {
        self.finished += 1;
        assert_eq!(
            start,
            Some(self.finished as u64),
            "finish pairs with its start"
        );
        self.faults += usize::from(fault);
    }
}

/// Failing closed (`GPUBPF_FAIL=closed`): an entry program that faults refuses the call
/// with CUDA_ERROR_NOT_PERMITTED instead of counting as verdict 0, and a point whose object
/// could not be built refuses every call without running anything.
#[test]
fn failing_closed_refuses_what_a_faulting_program_or_a_broken_object_would_police() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(set) = policy_set(tmp.path(), &[("nested_loops.bpf.c", "nested", 0)]) else {
        return;
    };
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let mut chain = set.into_chains().remove(&alloc.id).expect("chain");
    let mut stack = Stack::new_boxed();
    let words = alloc.ctx_size as usize / 8;
    let mut c = vec![0u64; words];
    let mut rec = Counting::default();
    let v = chain.entry_words(&mut c, &mut stack, &mut rec);
    assert_eq!((v.verdict, v.denied_by, v.faults), (0, None, 1), "open");
    chain.fail_closed = true;
    let v = chain.entry_words(&mut c, &mut stack, &mut rec);
    assert_eq!(
        (v.verdict, v.denied_by, v.faults),
        (FAIL_CLOSED_RESULT, Some(0), 1),
        "closed"
    );
    assert_eq!((rec.finished, rec.faults), (2, 2));
    let broken = Chain {
        broken: true,
        ..Chain::default()
    };
    let v = broken.entry_words(&mut c, &mut stack, &mut rec);
    assert_eq!((v.verdict, v.faults), (FAIL_CLOSED_RESULT, 0));
    assert_eq!(rec.started, 2, "a broken chain runs nothing");
    assert_eq!(FAIL_CLOSED_RESULT, 800, "CUDA_ERROR_NOT_PERMITTED");
}

/// The shim's allocation-free path (`entry_words`/`exit_words` on a ctx of 64-bit words)
/// decides exactly as `Chain::call` does on the same programs.
#[test]
fn word_ctx_path_matches_chain_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(set) = policy_set(
        tmp.path(),
        &[
            ("veto_small.bpf.c", "small", 10),
            ("veto_big.bpf.c", "big", 0),
        ],
    ) else {
        return;
    };
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let chain = set.chain(alloc).expect("programs on cuMemAlloc");
    let mut stack = Stack::new_boxed();
    let words = alloc.ctx_size as usize / 8;
    let size_slot = alloc.field("args.bytesize").expect("field").offset as usize / 8;
    for (size, verdict, denied_by, after_exit) in [
        (200u64, 7, Some(0), 7),
        (50, 5, Some(1), 0),
        (1, 5, Some(1), 0),
    ] {
        let mut c = vec![0u64; words];
        c[0] = u64::from(alloc.id);
        c[size_slot] = size;
        let mut rec = Counting::default();
        let v = chain.entry_words(&mut c, &mut stack, &mut rec);
        assert_eq!(
            (v.verdict, v.denied_by, v.faults),
            (verdict, denied_by, 0),
            "{size}"
        );
        // hdr.phase = entry (high half of word 0).
        assert_eq!(c[0] >> 32, 0);
        let (result, faults) = chain.exit_words(&mut c, &mut stack, v.verdict, false, &mut rec);
        assert_eq!((result, faults), (after_exit, 0), "{size}");
        // Every program run was reported to the recorder, started and finished in pairs.
        let runs = denied_by.map_or(chain.entry.len(), |i| i + 1) + chain.exit.len();
        assert_eq!(
            (rec.started, rec.finished, rec.faults),
            (runs, runs, 0),
            "{size}"
        );
        assert_eq!(c[0] >> 32, 1, "hdr.phase = exit");
        // The same call through CtxBuf/Chain::call.
        let mut ctx = CtxBuf::new(alloc, Phase::Entry);
        ctx.set("args.bytesize", size).expect("field");
        let o = chain.call(&mut ctx, &mut stack, |_| panic!("vetoed call must not run"));
        assert_eq!(o.result, after_exit, "{size}");
    }
    // A ctx shorter than the layout is refused, never run.
    let mut short = vec![0u64; words - 1];
    assert!(matches!(
        chain.entry[0].run_words(&mut short, &mut stack),
        Err(gpubpf_runtime::dispatch::WordsError::CtxTooSmall { .. })
    ));
}

/// Records the decisions the chain reports.
#[derive(Default)]
struct Decisions(Vec<(String, Decision)>);

impl RunRecorder for Decisions {
    fn start(&mut self) -> Option<u64> {
        None
    }
    fn finish(&mut self, _: Option<u32>, _: Option<u64>, _: bool) {}
    fn decision(&mut self, ctx: &[u64], prog: &AttachedProgram, d: Decision) {
        assert_eq!(ctx[0] as u32, 0x5eed, "the call's ctx");
        self.0.push((prog.name.clone(), d));
    }
}

/// `load --shadow`: a shadow program's entry verdict is reported but never returned, its
/// exit override of the result is reported but never applied, and its writes to writable
/// arguments and out-values land in a copy; enforced programs at the same points decide as
/// before, and their decisions are reported too.
#[test]
fn shadow_programs_decide_nothing_but_report_every_decision() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    if !load_with(home, "shadow_rewrite.bpf.c", "shadowed", 0, &["--shadow"]) {
        return;
    }
    let Some(set) = policy_set(home, &[("veto_small.bpf.c", "small", 10)]) else {
        return;
    };
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let chain = set.chain(alloc).expect("programs on cuMemAlloc");
    let shadow: Vec<(&str, bool)> = chain
        .entry
        .iter()
        .chain(&chain.exit)
        .map(|p| (p.name.as_str(), p.shadow))
        .collect();
    assert_eq!(
        shadow,
        [
            ("rewrite_deny", true),
            ("veto_all", false),
            ("override_alloc", true),
            ("forgive", false)
        ]
    );
    let mut stack = Stack::new_boxed();
    let size_slot = alloc.field("args.bytesize").expect("field").offset as usize / 8;
    let mut c = vec![0u64; alloc.ctx_size as usize / 8];
    c[0] = 0x5eed;
    c[size_slot] = 100;
    let mut rec = Decisions::default();
    let v = chain.entry_words(&mut c, &mut stack, &mut rec);
    // The shadow program's 3 is not the verdict; the enforced veto_all's 5 is.
    assert_eq!((v.verdict, v.denied_by, v.faults), (5, Some(1), 0));
    assert_eq!(
        c[size_slot], 100,
        "the shadow rewrite of args.bytesize is not applied"
    );
    let entry = |verdict, shadow| Decision {
        verdict,
        previous: None,
        shadow,
    };
    assert_eq!(
        rec.0,
        [
            ("rewrite_deny".to_string(), entry(3, true)),
            ("veto_all".to_string(), entry(5, false))
        ]
    );
    let mut rec = Decisions::default();
    c[0] = 0x5eed;
    let (result, faults) = chain.exit_words(&mut c, &mut stack, 5, false, &mut rec);
    // forgive turns 5 into 0; the shadow override to 9 is reported, not applied.
    assert_eq!((result, faults), (0, 0));
    let exit = |verdict, previous, shadow| Decision {
        verdict,
        previous: Some(previous),
        shadow,
    };
    assert_eq!(
        rec.0,
        [
            ("override_alloc".to_string(), exit(9, 5, true)),
            ("forgive".to_string(), exit(0, 5, false))
        ]
    );
    // Chain::call ignores shadow decisions the same way.
    let mut ctx = CtxBuf::new(alloc, Phase::Entry);
    ctx.set("args.bytesize", 100).expect("field");
    let o = chain.call(&mut ctx, &mut stack, |_| panic!("vetoed by veto_all"));
    assert_eq!(
        (o.result, o.denied_by.map(|d| d.1)),
        (0, Some("veto_all".into()))
    );

    // cuMemGetInfo: the shadow program's out.free and result are discarded; halve_free's
    // halving is applied.
    let info = attach::resolve("cuMemGetInfo").expect("point");
    let chain = set.chain(info).expect("programs on cuMemGetInfo");
    let free_slot = info.field("out.free").expect("field").offset as usize / 8;
    let mut c = vec![0u64; info.ctx_size as usize / 8];
    c[0] = 0x5eed;
    c[free_slot] = 1000;
    let mut rec = Decisions::default();
    let (result, _) = chain.exit_words(&mut c, &mut stack, 0, true, &mut rec);
    assert_eq!((result, c[free_slot]), (0, 500));
    assert_eq!(rec.0, [("override_info".to_string(), exit(9, 0, true))]);
    // Alone (only the shadow object loaded), nothing is decided at all.
    let tmp2 = tempfile::tempdir().expect("tempdir");
    assert!(load_with(
        tmp2.path(),
        "shadow_rewrite.bpf.c",
        "s",
        0,
        &["--shadow"]
    ));
    let reg = Registry::open(&tmp2.path().join("reg")).expect("open registry");
    let set = PolicySet::load(&reg, &standard_helpers()).expect("build");
    let chain = set.chain(alloc).expect("chain");
    let mut c = vec![0u64; alloc.ctx_size as usize / 8];
    c[0] = 0x5eed;
    c[size_slot] = 100;
    let mut rec = Decisions::default();
    let v = chain.entry_words(&mut c, &mut stack, &mut rec);
    assert_eq!((v.verdict, v.denied_by, c[size_slot]), (0, None, 100));
    let (result, _) = chain.exit_words(&mut c, &mut stack, 0, true, &mut rec);
    assert_eq!(result, 0);
    assert_eq!(rec.0.len(), 2, "{:?}", rec.0);
}

/// What a recorder saw of a call: decisions (program, decision) and failed runs.
#[derive(Default, Debug, PartialEq)]
struct Seen {
    decisions: Vec<(String, Decision)>,
    failed_runs: usize,
}

/// A recorder that counts every run ([`RunRecorder::counts_runs`] true: the general path)
/// or only what the lean path reports (false: the shim's common case).
struct Watch {
    every_run: bool,
    seen: Seen,
}

impl RunRecorder for Watch {
    fn counts_runs(&self) -> bool {
        self.every_run
    }
    fn start(&mut self) -> Option<u64> {
        self.every_run.then_some(1)
    }
    fn finish(&mut self, _: Option<u32>, _: Option<u64>, fault: bool) {
        self.seen.failed_runs += usize::from(fault);
    }
    fn decision(&mut self, _: &[u64], prog: &AttachedProgram, d: Decision) {
        self.seen.decisions.push((prog.name.clone(), d));
    }
}

/// The shim's lean path (a recorder that does not count every run: native programs that
/// let the call through run in a tight loop, anything else continues out of line from the
/// program at hand) decides, reports and rewrites exactly as the general path, for chains
/// mixing a faulting program, refusals, an exit override and a shadow program, on both
/// engines and failing open or closed.
#[test]
fn lean_path_matches_the_general_path() {
    let mixed = tempfile::tempdir().expect("tempdir");
    let Some(faulting) = policy_set(
        mixed.path(),
        &[
            ("nested_loops.bpf.c", "nested", 0),
            ("veto_big.bpf.c", "big", 5),
            ("veto_small.bpf.c", "small", 10),
        ],
    ) else {
        return;
    };
    let shadowed = tempfile::tempdir().expect("tempdir");
    assert!(load_with(
        shadowed.path(),
        "shadow_rewrite.bpf.c",
        "shadowed",
        0,
        &["--shadow"]
    ));
    let shadow = policy_set(
        shadowed.path(),
        &[
            ("veto_big.bpf.c", "big", 5),
            ("veto_small.bpf.c", "small", 10),
        ],
    )
    .expect("clang found above");
    let passing = tempfile::tempdir().expect("tempdir");
    let pass_only = policy_set(passing.path(), &[("veto_big.bpf.c", "big", 0)]).expect("built");
    // Two exit programs that both change the result: forgive (5 -> 0), then
    // override_alloc (-> 9), enforced.
    let overriding = tempfile::tempdir().expect("tempdir");
    let two_exits = policy_set(
        overriding.path(),
        &[
            ("veto_small.bpf.c", "small", 0),
            ("shadow_rewrite.bpf.c", "rewrite", 10),
        ],
    )
    .expect("built");
    // One program per phase, as the shim's summary runs them (`Chain::summary`): an entry
    // refusal and an exit override, and an entry program that faults.
    let forgiving = tempfile::tempdir().expect("tempdir");
    let one_each =
        policy_set(forgiving.path(), &[("veto_small.bpf.c", "small", 0)]).expect("built");
    let looping = tempfile::tempdir().expect("tempdir");
    let fault_only =
        policy_set(looping.path(), &[("nested_loops.bpf.c", "nested", 0)]).expect("built");
    let alloc = attach::resolve("cudaMalloc").expect("alias");
    let size_slot = alloc.field("args.bytesize").expect("field").offset as usize / 8;
    let helpers = standard_helpers();
    let mut stack = Stack::new_boxed();
    let mut cases = 0;
    for (set, home) in [
        (&faulting, mixed.path()),
        (&shadow, shadowed.path()),
        (&pass_only, passing.path()),
        (&two_exits, overriding.path()),
        (&one_each, forgiving.path()),
        (&fault_only, looping.path()),
    ] {
        let native = set
            .chain(alloc)
            .expect("chain")
            .to_native(&helpers)
            .expect("jit");
        assert!(!native.interpreted());
        // The same programs as a process's first build runs them: on the interpreter.
        let reg = Registry::open(&home.join("reg")).expect("open registry");
        let interpreted = PolicySet::load_each_in(&reg, &helpers, Tier::Interpreted, None)
            .expect("build")
            .0
            .into_chains()
            .remove(&alloc.id)
            .expect("chain");
        assert!(interpreted.interpreted());
        for mut chain in [native, interpreted] {
            for fail_closed in [false, true] {
                chain.fail_closed = fail_closed;
                let summary = chain.summary();
                for size in [1u64, 50, 150] {
                    let run = |every_run: bool, summarized: bool, stack: &mut Stack| {
                        let mut c = vec![0u64; alloc.ctx_size as usize / 8];
                        c[0] = 0x5eed;
                        c[size_slot] = size;
                        let mut rec = Watch {
                            every_run,
                            seen: Seen::default(),
                        };
                        let v = if summarized {
                            // SAFETY: `summary` is this chain's (taken after its last change).
                            unsafe {
                                chain.entry_words_summarized(&summary, &mut c, stack, &mut rec)
                            }
                        } else {
                            chain.entry_words(&mut c, stack, &mut rec)
                        };
                        let after_entry = c.clone();
                        let exit = if summarized {
                            // SAFETY: as above.
                            unsafe {
                                chain.exit_words_summarized(
                                    &summary, &mut c, stack, v.verdict, false, &mut rec,
                                )
                            }
                        } else {
                            chain.exit_words(&mut c, stack, v.verdict, false, &mut rec)
                        };
                        (v, after_entry, exit, c, rec.seen)
                    };
                    let general = run(true, false, &mut stack);
                    let lean = run(false, false, &mut stack);
                    assert_eq!(lean, general, "size {size}, fail_closed {fail_closed}");
                    let summarized = run(false, true, &mut stack);
                    assert_eq!(
                        summarized, general,
                        "summarized: size {size}, fail_closed {fail_closed}"
                    );
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 72);
    // The summaries of the one-program chains hold their programs (native only): the
    // summarized runs above took the summary's own path there.
    let native = |set: &PolicySet| {
        set.chain(alloc)
            .expect("chain")
            .to_native(&helpers)
            .expect("jit")
    };
    for (set, entry, exit) in [
        (&one_each, true, true),
        (&fault_only, true, false),
        (&pass_only, true, false),
        (&faulting, false, true),
        (&two_exits, false, false),
    ] {
        let s = native(set).summary();
        assert_eq!((s.has_lean_entry(), s.has_lean_exit()), (entry, exit));
        assert!(
            !s.interpreted(),
            "a native chain's summary says it is native"
        );
    }
    assert!(
        !shadow
            .chain(alloc)
            .expect("chain")
            .summary()
            .has_lean_entry(),
        "shadow"
    );
    let interpreted = one_each.chain(alloc).expect("chain");
    assert_eq!(
        interpreted.summary().interpreted(),
        interpreted.interpreted(),
        "the summary says whether the chain is interpreted"
    );
    if interpreted.interpreted() {
        assert!(!interpreted.summary().has_lean_entry(), "interpreted");
    }
    // The cases above reach every out-of-line branch: a fault, a refusal after a program
    // that let the call through, a shadow program first, an exit override.
    let mut c = vec![0u64; alloc.ctx_size as usize / 8];
    c[size_slot] = 150;
    let chain = faulting
        .chain(alloc)
        .expect("chain")
        .to_native(&helpers)
        .expect("jit");
    let mut rec = Watch {
        every_run: false,
        seen: Seen::default(),
    };
    let v = chain.entry_words(&mut c, &mut stack, &mut rec);
    assert_eq!((v.verdict, v.denied_by, v.faults), (7, Some(1), 1));
    let (result, faults) = chain.exit_words(&mut c, &mut stack, 5, false, &mut rec);
    assert_eq!((result, faults), (0, 0), "forgive turns 5 into 0");
    assert_eq!(rec.seen.failed_runs, 1);
    assert_eq!(rec.seen.decisions.len(), 2, "{:?}", rec.seen.decisions);
}
