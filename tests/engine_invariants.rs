//! Run-time invariants that the interpreter and the JIT must share (issue #11), each checked
//! by running the same program on both engines and comparing:
//!
//! - a register the verifier considers uninitialised holds 0: at entry (r0, r6–r9), in a
//!   callee (r0, r6–r9), and after every call (r1–r5), so `bpf_trace_printk`'s optional
//!   arguments never print a stale pointer;
//! - code the verifier never reached, replaced by dead-code traps, ends the run with the
//!   same fault at the same pc;
//! - every run has a bounded number of iterations (backward jumps taken plus `bpf_loop`
//!   callback invocations, shared by all frames), see `docs/design-decisions.md`.

use std::sync::Arc;

use gpubpf_isa::{assemble, Insn};
use gpubpf_runtime::attach;
use gpubpf_runtime::helper_table::{HelperTable, RUN_ITERATION_BUDGET, STACK_SIZE};
use gpubpf_runtime::helpers::{standard_helpers, trace};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};
use gpubpf_runtime::jit;
use gpubpf_runtime::maps::{mapping::page_size, Map, MapMeta, MapSpec, MapType};
use gpubpf_verifier::sanitize::{sanitize_dead_code, TRAP_INSN};
use gpubpf_verifier::VerifyInput;
use std::time::{Duration, Instant};

/// Runs `src` on both engines with `r1` = a 64-byte ctx; returns `(interpreter, jit)`, each
/// `r0` or the error message.
fn both(src: &str, helpers: &HelperTable) -> (Result<u64, String>, Result<u64, String>) {
    both_with_budget(src, helpers, RUN_ITERATION_BUDGET)
}

/// [`both`] with an iteration budget of `budget` in both engines.
fn both_with_budget(
    src: &str,
    helpers: &HelperTable,
    budget: u64,
) -> (Result<u64, String>, Result<u64, String>) {
    run_both(&assemble(src).expect("assembles"), helpers, budget)
}

/// Runs `insns` on both engines with `r1` = a 64-byte ctx and an iteration budget of
/// `budget`.
fn run_both(
    insns: &[Insn],
    helpers: &HelperTable,
    budget: u64,
) -> (Result<u64, String>, Result<u64, String>) {
    let mut ctx = [0u8; 64];
    let mut stack = vec![0u8; STACK_SIZE];
    let vm = Interpreter::new(
        Program::from_insns(insns).expect("decodes"),
        helpers.clone(),
    )
    .with_iteration_budget(budget);
    let interp = {
        let mut memory = Memory::new();
        let c = memory.add_mut("ctx", &mut ctx);
        vm.execute(&[c], &mut stack, &memory)
            .map_err(|e| e.to_string())
    };
    let prog = jit::compile(insns, helpers)
        .expect("compiles")
        .with_iteration_budget(budget);
    let mut ctx = [0u8; 64];
    let mut stack = [0u8; STACK_SIZE];
    // SAFETY: the test programs only touch their stack, and helpers only what they pass.
    let jit = unsafe { prog.execute(ctx.as_mut_ptr(), &mut stack) }.map_err(|e| e.to_string());
    (interp, jit)
}

/// Asserts that both engines return `expected`.
fn agree(src: &str, helpers: &HelperTable, expected: u64) {
    let (i, j) = both(src, helpers);
    assert_eq!(i, Ok(expected), "interpreter");
    assert_eq!(j, Ok(expected), "jit");
}

#[test]
fn callee_starts_with_zero_r0_and_r6_to_r9() {
    let src = "
        mov %r0, 9
        mov %r6, 6
        mov %r7, 7
        mov %r8, 8
        mov %r9, 9
        call local f
        exit
    f:
        add %r0, %r6
        add %r0, %r7
        add %r0, %r8
        add %r0, %r9
        exit
    ";
    agree(src, &HelperTable::new(), 0);
}

#[test]
fn r1_to_r5_are_zero_after_a_local_call() {
    // The callee leaves 1..5 in r1..r5; the caller sums them after the call and keeps its
    // own r6.
    let src = "
        mov %r6, 100
        mov %r1, 1
        mov %r2, 2
        call local f
        add %r0, %r1
        add %r0, %r2
        add %r0, %r3
        add %r0, %r4
        add %r0, %r5
        add %r0, %r6
        exit
    f:
        mov %r6, 60
        mov %r1, 10
        mov %r2, 20
        mov %r3, 30
        mov %r4, 40
        mov %r5, 50
        mov %r0, 7
        exit
    ";
    agree(src, &HelperTable::new(), 107);
}

extern "C" fn leave_args(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    a ^ b ^ c ^ d ^ e
}

#[test]
fn r1_to_r5_are_zero_after_a_helper_call() {
    let mut helpers = HelperTable::new();
    helpers.register(1, "leave_args", leave_args);
    let src = "
        mov %r1, 0x10
        mov %r2, 0x200
        mov %r3, 0x3000
        mov %r4, 0x40000
        mov %r5, 0x500000
        call 1
        add %r0, %r1
        add %r0, %r2
        add %r0, %r3
        add %r0, %r4
        add %r0, %r5
        exit
    ";
    // The helper saw every argument; nothing of them is left in r1..r5 afterwards.
    agree(src, &helpers, 0x543210);
}

/// A stack address left in r3 across a helper call, then `bpf_trace_printk("%llx", 5)`
/// with arguments 3–5 uninitialised (`ArgKind::OptScalar`): the verifier accepts it and
/// both engines must print 0, not the address.
#[test]
fn trace_printk_optional_arguments_never_print_a_stale_pointer() {
    let src = "
        stdw [%r10-8], 0x786c6c25   # \"%llx\\0\"
        mov %r3, %r10
        add %r3, -16
        call 14                     # bpf_get_current_pid_tgid: r1-r5 now uninitialised
        mov %r1, %r10
        add %r1, -8
        mov %r2, 5
        call 6                      # bpf_trace_printk(fmt, 5, <r3>, <r4>, <r5>)
        mov %r0, 0
        exit
    ";
    let insns = assemble(src).expect("assembles");
    let pc = attach::program_context_for_section("cuda/cuMemAlloc").expect("section");
    gpubpf_verifier::verify(&VerifyInput {
        insns: &insns,
        maps: &[],
        ctx: &pc,
        line_info: None,
    })
    .unwrap_or_else(|e| panic!("rejected: {}", e.render()));

    let dir = tempfile::tempdir().expect("tempdir");
    let spec = MapSpec {
        map_type: MapType::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: page_size() as u32,
        flags: 0,
    };
    let ring =
        Arc::new(Map::create(&dir.path().join("trace"), &spec, &MapMeta::default()).unwrap());
    // The sink is process-wide; no other test of this binary calls bpf_trace_printk.
    trace::set_sink(trace::TraceSink::Ring(ring.clone()));
    let (i, j) = both(src, &standard_helpers());
    trace::set_sink(trace::TraceSink::Stderr);
    assert_eq!((i, j), (Ok(0), Ok(0)));
    let mut lines = Vec::new();
    ring.ringbuf_consume(|r| lines.push(String::from_utf8_lossy(r).into_owned()))
        .expect("consume");
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert!(line.ends_with(": 0\n"), "printed a stale value: {line}");
    }
}

// ----- run-time bound (hole 4) ---------------------------------------------------------

/// The message both engines give when the budget runs out at `pc`.
fn exhausted(pc: usize, budget: u64) -> String {
    format!(
        "instruction {pc}: run-time budget of {budget} iterations (backward jumps and \
         `bpf_loop` callbacks) exhausted"
    )
}

/// `bpf_loop(2^23, outer)` whose callback runs `bpf_loop(2^23, inner)`: 2^46 callback
/// invocations, accepted by the verifier, would never end. The call at slot 12 (the inner
/// `bpf_loop`) is where the budget runs out, after one outer and 2^23 - 1 inner callbacks.
const NESTED_LOOPS: &str = "
        mov %r1, 0x800000
        lddw %r2, func outer
        mov %r3, 0
        mov %r4, 0
        call 181
        exit
    outer:
        mov %r1, 0x800000
        lddw %r2, func inner
        mov %r3, 0
        mov %r4, 0
        call 181
        mov %r0, 0
        exit
    inner:
        mov %r0, 0
        exit
";

#[test]
fn nested_bpf_loops_stop_at_the_default_budget_in_both_engines() {
    let start = Instant::now();
    let (i, j) = both(NESTED_LOOPS, &HelperTable::new());
    let elapsed = start.elapsed();
    let expected = Err(exhausted(12, RUN_ITERATION_BUDGET));
    assert_eq!(i, expected, "interpreter");
    assert_eq!(j, expected, "jit");
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
}

#[test]
fn an_infinite_loop_stops_at_the_budget() {
    let (i, j) = both_with_budget("mov %r0, 0\nja -1\nexit", &HelperTable::new(), 1000);
    assert_eq!(i, Err(exhausted(1, 1000)));
    assert_eq!(j, Err(exhausted(1, 1000)));
}

/// Sums `0..n` with a backward conditional jump: `n - 1` backward jumps are taken.
fn back_edge_loop(n: u32) -> String {
    format!(
        "
        mov %r0, 0
        mov %r1, 0
    top:
        add %r0, %r1
        add %r1, 1
        jlt %r1, {n}, top
        exit
    "
    )
}

#[test]
fn a_bounded_back_edge_loop_uses_one_iteration_per_backward_jump() {
    let helpers = HelperTable::new();
    let (i, j) = both(&back_edge_loop(1000), &helpers);
    assert_eq!((i, j), (Ok(499_500), Ok(499_500)));
    // 10 iterations take 9 backward jumps: a budget of 9 is exactly enough.
    let (i, j) = both_with_budget(&back_edge_loop(10), &helpers, 9);
    assert_eq!((i, j), (Ok(45), Ok(45)));
    let (i, j) = both_with_budget(&back_edge_loop(10), &helpers, 8);
    assert_eq!(i, Err(exhausted(4, 8)));
    assert_eq!(j, Err(exhausted(4, 8)));
}

/// `bpf_loop(1000, cb, &acc)`, `cb` adds the index to `*acc` with a forward-only body;
/// returns `acc << 32 | iterations`.
const SINGLE_LOOP: &str = "
        stdw [%r10-8], 0
        mov %r1, 1000
        lddw %r2, func cb
        mov %r3, %r10
        add %r3, -8
        mov %r4, 0
        call 181
        ldxdw %r1, [%r10-8]
        lsh %r1, 32
        or %r0, %r1
        exit
    cb:
        ldxdw %r3, [%r2]
        add %r3, %r1
        stxdw [%r2], %r3
        mov %r0, 0
        exit
";

#[test]
fn a_single_bpf_loop_uses_one_iteration_per_callback() {
    let helpers = HelperTable::new();
    let sum = (0..1000u64).sum::<u64>();
    let (i, j) = both(SINGLE_LOOP, &helpers);
    assert_eq!((i, j), (Ok(sum << 32 | 1000), Ok(sum << 32 | 1000)));
    let (i, j) = both_with_budget(SINGLE_LOOP, &helpers, 1000);
    assert_eq!((i, j), (Ok(sum << 32 | 1000), Ok(sum << 32 | 1000)));
    // The 1000th invocation, at the `bpf_loop` call (slot 7), finds the budget empty.
    let (i, j) = both_with_budget(SINGLE_LOOP, &helpers, 999);
    assert_eq!(i, Err(exhausted(7, 999)));
    assert_eq!(j, Err(exhausted(7, 999)));
}

/// One budget for the whole run: back edges in a subprogram (called twice) and in a
/// callback count with the entry function's.
#[test]
fn the_budget_is_shared_by_all_frames() {
    let src = "
        mov %r6, 0
        call local f        # 4 backward jumps
        call local f        # 4 more
        mov %r1, 3
        lddw %r2, func cb   # 3 invocations, each with 4 backward jumps
        mov %r3, 0
        mov %r4, 0
        call 181
        mov %r0, 0
        exit
    f:
        mov %r1, 0
    f_top:
        add %r1, 1
        jlt %r1, 5, f_top
        mov %r0, %r1
        exit
    cb:
        call local f
        mov %r0, 0
        exit
    ";
    let helpers = HelperTable::new();
    // 8 + 3 + 3 * 4 = 23 iterations.
    let (i, j) = both_with_budget(src, &helpers, 23);
    assert_eq!((i, j), (Ok(0), Ok(0)));
    // The 23rd is f's last backward jump (slot 13) in the third callback.
    let (i, j) = both_with_budget(src, &helpers, 22);
    assert_eq!(i, Err(exhausted(13, 22)));
    assert_eq!(j, Err(exhausted(13, 22)));
    // The 19th is the third callback invocation, at the `bpf_loop` call (slot 8).
    let (i, j) = both_with_budget(src, &helpers, 18);
    assert_eq!(i, Err(exhausted(8, 18)));
    assert_eq!(j, Err(exhausted(8, 18)));
}

/// A maximal `bpf_loop` with a loop-free callback fits the default budget exactly.
#[test]
fn one_maximal_bpf_loop_completes_with_the_default_budget() {
    let src = "
        mov %r1, 0x800000
        lddw %r2, func cb
        mov %r3, 0
        mov %r4, 0
        call 181
        exit
    cb:
        mov %r0, 0
        exit
    ";
    let (i, j) = both(src, &HelperTable::new());
    assert_eq!((i, j), (Ok(1 << 23), Ok(1 << 23)));
}

// ----- dead-code traps ------------------------------------------------------------------

/// A trap ends the run in both engines with the same fault, also when it is the last slot
/// of a function or follows another trap (the JIT starts a new block after each).
#[test]
fn a_dead_code_trap_ends_the_run_in_both_engines() {
    let src = "mov %r0, 1\ncall 65535\ncall 65535\nmov %r0, 2\nexit";
    let want = "instruction 1: reached code the verifier proved unreachable (a dead-code trap)";
    assert_eq!(assemble(src).expect("assembles")[1], TRAP_INSN);
    let (i, j) = both(src, &standard_helpers());
    assert_eq!((i, j), (Err(want.to_string()), Err(want.to_string())));
}

/// A branch the verifier decides leaves code unreached; sanitised, the program computes what
/// it did before in both engines, and the unreached slots (both of an `lddw`) are traps.
#[test]
fn sanitised_programs_run_as_before() {
    let src = "
        mov %r0, 5
        mov %r6, %r0
        jeq %r6, 5, ok
        lddw %r1, 0x4000000         # never reached: the verifier knows r6 == 5
        stdw [%r1], 1
        mov %r0, 9
        exit
    ok:
        mov %r0, 3
        exit
    ";
    let insns = assemble(src).expect("assembles");
    let pc = attach::program_context_for_section("cuda/cuMemAlloc").expect("section");
    let stats = gpubpf_verifier::verify(&VerifyInput {
        insns: &insns,
        maps: &[],
        ctx: &pc,
        line_info: None,
    })
    .unwrap_or_else(|e| panic!("rejected: {}", e.render()));
    assert_eq!(stats.unreached, [3, 5, 6, 7]);
    let clean = sanitize_dead_code(&insns, &stats.unreached);
    assert!(clean[3..8].iter().all(|i| *i == TRAP_INSN));
    assert_eq!(clean[..3], insns[..3]);
    let (i, j) = run_both(&clean, &standard_helpers(), RUN_ITERATION_BUDGET);
    assert_eq!((i, j), (Ok(3), Ok(3)));
}
