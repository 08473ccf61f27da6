//! Diagnostics: listing with C lines, the registers involved, hints, the verbose log and
//! statistics.

#[path = "verifier_cases/support.rs"]
mod verifier_support;

use gpubpf_verifier::ctx::ReturnRule;
use gpubpf_verifier::{
    LineInfo, LogLevel, MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput,
};

const PROG: &str = "
mov %r6, %r1
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map_idx 0
call 1
ldxdw %r1, [%r0]
mov %r0, 0
exit
";

fn lines() -> Vec<LineInfo> {
    let l = |pc, line, source: &str| LineInfo {
        pc,
        file: "policy.bpf.c".into(),
        line,
        column: 1,
        source: source.into(),
    };
    vec![
        l(0, 10, "int prog(void *ctx) {"),
        l(1, 11, "__u32 key = 0;"),
        l(2, 0, ""),
        l(3, 12, "__u64 *v = bpf_map_lookup_elem(&counts, &key);"),
        l(7, 13, "return *v;"),
    ]
}

#[test]
fn error_names_instruction_line_registers_and_hint() {
    let insns = gpubpf_isa::assemble(PROG).unwrap();
    let maps = [MapInfo::new("counts", MapKind::Hash, 4, 8, 16)];
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let lines = lines();
    let e = gpubpf_verifier::verify(&VerifyInput {
        insns: &insns,
        maps: &maps,
        ctx: &ctx,
        line_info: Some(&lines),
    })
    .unwrap_err();
    assert_eq!(e.pc, 7);
    assert_eq!(e.kind.name(), "invalid_mem_access");
    assert_eq!(e.source_line.as_deref(), Some("return *v;"));
    let text = e.render();
    assert!(text.contains("; return *v; @ policy.bpf.c:13"), "{text}");
    assert!(text.contains(">    7: (79) r1 = *(u64 *)(r0 +0)"), "{text}");
    assert!(
        text.contains("^ r0 invalid mem access 'map_value_or_null'"),
        "{text}"
    );
    assert!(text.contains("r0 = map_value_or_null(map=counts"), "{text}");
    assert!(
        text.contains("hint: add a NULL check after bpf_map_lookup_elem"),
        "{text}"
    );
    // Line-0 entries (compiler-generated code) are not shown.
    assert!(!text.contains(":0\n"), "{text}");
    let d = serde_json::to_value(e.diagnostic()).unwrap();
    assert_eq!(d["pc"], 7);
    assert_eq!(d["kind"], "invalid_mem_access");
    assert_eq!(d["regs"][0]["reg"], 0);
}

#[test]
fn verbose_log_traces_every_instruction_and_branch() {
    let src = "
mov %r0, 0
ldxdw %r2, [%r1+32]
jgt %r2, 10, big
mov %r0, 1
big:
exit
";
    let insns = gpubpf_isa::assemble(src).unwrap();
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let v = Verifier::new(&VerifierConfig {
        log_level: LogLevel::Verbose,
        ..VerifierConfig::default()
    });
    let stats = v
        .verify(&VerifyInput {
            insns: &insns,
            maps: &[],
            ctx: &ctx,
            line_info: None,
        })
        .unwrap();
    let log = &stats.log;
    assert!(log.contains("0: R1=ctx(off=0) R10=fp0"), "{log}");
    assert!(
        log.contains("    2: (25) if r2 > 10 goto pc+1 (-> 4)"),
        "{log}"
    );
    assert!(log.contains("from 2 to 4: "), "{log}");
    assert!(log.contains("R2=scalar(umin=11)"), "{log}");
    assert!(log.contains("processed 6 insns"), "{log}");
    assert_eq!(stats.insns_processed, 6);
    assert!(stats.states_stored >= 1);
    assert!(stats.peak_states >= 1);
}

#[test]
fn log_is_empty_when_off_and_truncated_at_limit() {
    let insns =
        gpubpf_isa::assemble("mov %r0, 0\nl:\nadd %r0, 1\njlt %r0, 100, l\nmov %r0, 0\nexit\n")
            .unwrap();
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let input = VerifyInput {
        insns: &insns,
        maps: &[],
        ctx: &ctx,
        line_info: None,
    };
    let s = gpubpf_verifier::verify(&input).unwrap();
    assert!(s.log.is_empty());
    let v = Verifier::new(&VerifierConfig {
        log_level: LogLevel::Verbose,
        log_limit: 2000,
        ..VerifierConfig::default()
    });
    let s = v.verify(&input).unwrap();
    assert!(s.log.len() <= 2100, "{}", s.log.len());
    assert!(s.log.ends_with("... log truncated\n"));
}

#[test]
fn verbose_log_interleaves_source_lines_as_the_kernel_does() {
    let insns = gpubpf_isa::assemble(
        "mov %r6, %r1\nstw [%r10-4], 0\nmov %r2, %r10\nadd %r2, -4\nmov %r0, 0\nexit\n",
    )
    .unwrap();
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let l = |pc, line, source: &str| LineInfo {
        pc,
        file: "/src/dir/policy.bpf.c".into(),
        line,
        column: 1,
        source: source.into(),
    };
    // Two records of one line (two columns), a line-0 record (compiler-generated).
    let lines = [
        l(0, 10, "  int prog(void *ctx) {"),
        l(1, 11, "__u32 key = 0;"),
        l(2, 11, "__u32 key = 0;"),
        l(3, 0, ""),
        l(4, 12, "return 0;"),
    ];
    let v = Verifier::new(&VerifierConfig {
        log_level: LogLevel::Verbose,
        ..VerifierConfig::default()
    });
    let log = v
        .verify(&VerifyInput {
            insns: &insns,
            maps: &[],
            ctx: &ctx,
            line_info: Some(&lines),
        })
        .unwrap()
        .log;
    let comments: Vec<(usize, &str)> = log
        .lines()
        .enumerate()
        .filter(|(_, t)| t.starts_with("; "))
        .collect();
    assert_eq!(
        comments.iter().map(|c| c.1).collect::<Vec<_>>(),
        [
            "; int prog(void *ctx) { @ policy.bpf.c:10",
            "; __u32 key = 0; @ policy.bpf.c:11",
            "; return 0; @ policy.bpf.c:12",
        ],
        "{log}"
    );
    // Each comment comes right before the state line of its first instruction.
    let all: Vec<&str> = log.lines().collect();
    for ((i, _), pc) in comments.iter().zip([0, 1, 4]) {
        assert!(all[i + 1].starts_with(&format!("{pc}: ")), "{log}");
    }
    // Without line info, no comments.
    let plain = v
        .verify(&VerifyInput {
            insns: &insns,
            maps: &[],
            ctx: &ctx,
            line_info: None,
        })
        .unwrap()
        .log;
    assert!(!plain.contains("; "), "{plain}");
}
