//! Verification speed on a synthetic 4 000-instruction program with several bounded loops
//! and many branches, and the time to exhaust the instruction budget on a program that never
//! converges (it must grow linearly with the budget).
//! Run: `cargo run --release -p gpubpf-verifier --example verify_perf`.

use std::time::Instant;

use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};

/// A program of about `target` slots: a map value looked up once, then diamonds on ctx
/// values whose results go to the map value, bounded loops summing a stack array, and
/// further lookups with null checks.
///
/// Note: without the kernel's precision tracking, diamonds that leave *different* scalar
/// values in live registers or stack slots at their join do not prune; here results go to
/// map memory (not tracked), which is how policies keep counters.
fn program(target: usize, loops: usize) -> String {
    let mut s = String::new();
    let mut n = 0usize;
    let mut label = 0usize;
    let emit = |s: &mut String, line: &str, n: &mut usize| {
        s.push_str(line);
        s.push('\n');
        *n += if line.starts_with("lddw") { 2 } else { 1 };
    };
    emit(&mut s, "mov %r6, %r1", &mut n);
    for k in 0..8 {
        emit(&mut s, &format!("stdw [%r10-{}], {k}", 8 * (k + 1)), &mut n);
    }
    emit(&mut s, "stw [%r10-68], 0", &mut n);
    emit(&mut s, "mov %r2, %r10", &mut n);
    emit(&mut s, "add %r2, -68", &mut n);
    emit(&mut s, "lddw %r1, map_idx 0", &mut n);
    emit(&mut s, "call 1", &mut n);
    emit(&mut s, "jne %r0, 0, found", &mut n);
    emit(&mut s, "exit", &mut n);
    s.push_str("found:\n");
    emit(&mut s, "mov %r9, %r0", &mut n);
    let per_loop = target / (loops + 1);
    let mut loops_left = loops;
    while n + 40 < target {
        if loops_left > 0 && n > (loops - loops_left + 1) * per_loop {
            loops_left -= 1;
            // A bounded loop over the stack array with a branch in the body.
            label += 1;
            emit(&mut s, "mov %r7, 0", &mut n);
            emit(&mut s, "mov %r8, 0", &mut n);
            s.push_str(&format!("loop{label}:\n"));
            emit(&mut s, "mov %r2, %r7", &mut n);
            emit(&mut s, "and %r2, 7", &mut n);
            emit(&mut s, "lsh %r2, 3", &mut n);
            emit(&mut s, "mov %r3, %r10", &mut n);
            emit(&mut s, "add %r3, -64", &mut n);
            emit(&mut s, "add %r3, %r2", &mut n);
            emit(&mut s, "ldxdw %r4, [%r3]", &mut n);
            emit(&mut s, &format!("jgt %r4, 1000, skip{label}"), &mut n);
            emit(&mut s, "add %r8, %r4", &mut n);
            s.push_str(&format!("skip{label}:\n"));
            emit(&mut s, "add %r7, 1", &mut n);
            emit(&mut s, &format!("jlt %r7, 64, loop{label}"), &mut n);
            emit(&mut s, "stxdw [%r9+8], %r8", &mut n);
            continue;
        }
        label += 1;
        // A diamond on a ctx value with arithmetic on both sides.
        emit(&mut s, "ldxdw %r2, [%r6+32]", &mut n);
        emit(
            &mut s,
            &format!("jgt %r2, {}, else{label}", label * 3),
            &mut n,
        );
        for i in 0..6 {
            emit(&mut s, &format!("add %r2, {i}"), &mut n);
            emit(&mut s, "mul %r2, 3", &mut n);
        }
        emit(&mut s, "stxdw [%r9], %r2", &mut n);
        emit(&mut s, &format!("ja end{label}"), &mut n);
        s.push_str(&format!("else{label}:\n"));
        for _ in 0..6 {
            emit(&mut s, "xor %r2, 5", &mut n);
            emit(&mut s, "rsh %r2, 1", &mut n);
        }
        emit(&mut s, "stxdw [%r9+8], %r2", &mut n);
        s.push_str(&format!("end{label}:\n"));
        // Another lookup with a null check every few blocks.
        if label % 4 == 0 {
            emit(&mut s, "stw [%r10-68], 1", &mut n);
            emit(&mut s, "mov %r2, %r10", &mut n);
            emit(&mut s, "add %r2, -68", &mut n);
            emit(&mut s, "lddw %r1, map_idx 0", &mut n);
            emit(&mut s, "call 1", &mut n);
            emit(&mut s, &format!("jeq %r0, 0, miss{label}"), &mut n);
            emit(&mut s, "ldxdw %r3, [%r0]", &mut n);
            emit(&mut s, "add %r3, 1", &mut n);
            emit(&mut s, "stxdw [%r0], %r3", &mut n);
            s.push_str(&format!("miss{label}:\n"));
        }
    }
    emit(&mut s, "mov %r0, 0", &mut n);
    emit(&mut s, "exit", &mut n);
    s
}

/// A bounded loop with many exits (as `log2l` in exec_tracker), then a `bpf_loop` whose
/// callback moves a pointer stored in the caller's stack on every round: widening never
/// applies to pointers, so only the budget ends the exploration.
const NON_CONVERGING: &str = "
ldxdw %r6, [%r1+32]
mov %r7, 0
loop:
jeq %r6, 0, out
rsh %r6, 1
add %r7, 1
jlt %r7, 64, loop
out:
stxdw [%r10-16], %r10
mov %r1, 4
lddw %r2, func cb
mov %r3, %r10
add %r3, -16
mov %r4, 0
call 181
mov %r0, 0
exit
cb:
ldxdw %r4, [%r2]
add %r4, -1
stxdw [%r2], %r4
mov %r0, 0
exit
";

fn main() {
    let ctx = ProgramContext {
        description: "perf".into(),
        ctx: CtxLayout {
            size: 64,
            fields: vec![CtxField {
                name: "args[0]".into(),
                offset: 32,
                size: 8,
                readable: true,
                writable: false,
            }],
        },
        ret: ReturnRule::Range { min: 0, max: 0 },
    };
    let maps = [MapInfo::new("counts", MapKind::Hash, 4, 16, 64)];
    for (target, loops) in [(4000, 4), (4000, 8), (1000, 2)] {
        let text = program(target, loops);
        let insns = gpubpf_isa::assemble(&text).expect("assembles");
        let v = Verifier::new(&VerifierConfig::default());
        let input = VerifyInput {
            insns: &insns,
            maps: &maps,
            ctx: &ctx,
            line_info: None,
        };
        let t = Instant::now();
        let mut stats = None;
        let runs = 5;
        for _ in 0..runs {
            stats = Some(
                v.verify(&input)
                    .unwrap_or_else(|e| panic!("{}", e.render())),
            );
        }
        let s = stats.unwrap();
        println!(
            "{} slots, {loops} loops: {:.2} ms/verify ({} insns processed, {} states stored, peak {}, {} pruned)",
            insns.len(),
            t.elapsed().as_secs_f64() * 1e3 / runs as f64,
            s.insns_processed,
            s.states_stored,
            s.peak_states,
            s.states_pruned
        );
    }
    let insns = gpubpf_isa::assemble(NON_CONVERGING).expect("assembles");
    let input = VerifyInput {
        insns: &insns,
        maps: &maps,
        ctx: &ctx,
        line_info: None,
    };
    for budget in [20_000, 100_000, 1_000_000] {
        let v = Verifier::new(&VerifierConfig {
            budget,
            ..VerifierConfig::default()
        });
        let t = Instant::now();
        let e = v.verify(&input).expect_err("never converges");
        println!(
            "budget {budget}: rejected in {:.1} ms ({}, {} states stored, peak {})",
            t.elapsed().as_secs_f64() * 1e3,
            e.kind,
            e.stats.states_stored,
            e.stats.peak_states
        );
    }
}
