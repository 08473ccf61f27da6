//! Verifier cases written in restricted C: the idioms clang emits for correct code must be
//! accepted, and typical mistakes rejected with the expected message. Also verifies every
//! policy in `policies/`. Compiles with clang (`-O2 -g -target bpf -mcpu=v3`, the SDK
//! headers of `policies/include`); prints `skipped: …` when clang is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpubpf_runtime::attach;
use gpubpf_runtime::object::Object;
use gpubpf_runtime::program::{attach_phase, line_infos, map_infos};
use gpubpf_verifier::{Verifier, VerifierConfig, VerifierError, VerifyInput, VerifyStats};

fn clang() -> Option<&'static str> {
    ["clang", "clang-19", "clang-14"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn compile(clang: &str, src: &Path, out: &Path) -> Result<Vec<u8>, String> {
    let o = Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-I"])
        .arg(root().join("policies/include"))
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    std::fs::read(out).map_err(|e| e.to_string())
}

type Verdict = Result<VerifyStats, Box<VerifierError>>;

/// Verifies every program of an object as the CLI does.
fn verify_object(bytes: &[u8]) -> Vec<(String, Verdict)> {
    let obj = Object::parse(bytes).expect("object parses");
    let maps = map_infos(&obj);
    obj.programs
        .iter()
        .map(|p| {
            // A generic section (`SEC("cuda")`, e.g. fault-inject, attached with --attach)
            // names no API: verify it where its documentation loads it first, cuMemAlloc.
            let name = if p.attach.is_empty() {
                "cuMemAlloc"
            } else {
                p.attach.as_str()
            };
            let point = attach::resolve(name).expect("attach point");
            let ctx = point.program_context(attach_phase(p.phase));
            let lines = line_infos(p);
            // A smaller budget than the default keeps the "too complex" case fast in debug
            // builds; every accepted case needs far less.
            let v = Verifier::new(&VerifierConfig {
                budget: 100_000,
                ..VerifierConfig::default()
            });
            let r = v.verify(&VerifyInput {
                insns: &p.insns,
                maps: &maps,
                ctx: &ctx,
                line_info: Some(&lines),
            });
            (p.name.clone(), r)
        })
        .collect()
}

const PRELUDE: &str = r#"
#include "gpubpf.h"
struct val { __u64 slots[32]; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 64); __type(key, __u32); __type(value, struct val); } vals SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 4); __type(key, __u32); __type(value, __u64); } cnt SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } events SEC(".maps");
struct event { __u64 size; __u32 pid; __u32 kind; };
__u64 total;
const volatile __u64 limit = 1 << 20;
char LICENSE[] SEC("license") = "GPL";
"#;

/// (name, C body after the prelude, `None` = accepted or `Some(fragment)` of the error)
const CASES: &[(&str, &str, Option<&str>)] = &[
    (
        "counter with null check",
        "PROG { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (v) __sync_fetch_and_add(v, 1); return 0; }",
        None,
    ),
    (
        "missing null check",
        "PROG { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&cnt, &k); *v += 1; return 0; }",
        Some("map_value_or_null"),
    ),
    (
        "nested null checks",
        "PROG { __u32 k = 1; __u64 *c = bpf_map_lookup_elem(&cnt, &k); if (!c) return 0;
           struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           v->slots[3] += *c; return 0; }",
        None,
    ),
    (
        "bounded loop over stack array",
        "PROG { __u64 a[16] = {}; __u64 s = ctx->args.bytesize;
           for (int i = 0; i < 16; i++) a[i] = s * i;
           __u64 sum = 0; for (int i = 0; i < 16; i++) sum += a[i];
           return sum > 100 ? 2 : 0; }",
        None,
    ),
    (
        "bounded loop over map value",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           for (int i = 0; i < 32; i++) v->slots[i] += i; return 0; }",
        None,
    ),
    (
        "loop one past the map value",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           for (int i = 0; i <= 32; i++) { v->slots[i] = i; barrier(); } return 0; }",
        Some("invalid access to map value"),
    ),
    (
        "32-bit index checked",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           __u32 i = (__u32)ctx->args.bytesize; if (i < 32) v->slots[i]++; return 0; }",
        None,
    ),
    (
        "index not checked",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           __u32 i = (__u32)ctx->args.bytesize; v->slots[i]++; return 0; }",
        Some("unbounded"),
    ),
    (
        "index checked off by one",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           __u32 i = (__u32)ctx->args.bytesize; if (i <= 32) v->slots[i]++; return 0; }",
        Some("invalid access to map value"),
    ),
    (
        "signed index with both checks",
        "PROG { __u32 k = 0; struct val *v = bpf_map_lookup_elem(&vals, &k); if (!v) return 0;
           int i = (int)ctx->args.bytesize; if (i < 0) return 0; barrier_var(i);
           if (i >= 32) return 0; v->slots[i] = 1; return 0; }",
        None,
    ),
    (
        "variable offset stack access after mask",
        "PROG { char buf[64] = {}; __u32 i = ctx->args.bytesize & 63; buf[i] = 1;
           return buf[(i + 1) & 63] ? 2 : 0; }",
        None,
    ),
    (
        "spills across helper calls",
        "PROG { __u64 a = ctx->args.bytesize, b = a * 3, c = a ^ 77, d = bpf_ktime_get_ns();
           __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&cnt, &k);
           __u64 e = bpf_get_prandom_u32();
           if (v) *v = a + b + c + d + e; return 0; }",
        None,
    ),
    (
        "ring buffer event submitted",
        "PROG { struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0); if (!e) return 0;
           e->size = ctx->args.bytesize; e->pid = ctx->hdr.pid; e->kind = 1;
           bpf_ringbuf_submit(e, 0); return 0; }",
        None,
    ),
    (
        "ring buffer event leaked on one path",
        "PROG { struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0); if (!e) return 0;
           e->size = ctx->args.bytesize; if (e->size > 100) return 0;
           bpf_ringbuf_submit(e, 0); return 0; }",
        Some("unreleased reference"),
    ),
    (
        "ring buffer output from stack",
        "PROG { struct event e = {}; e.size = ctx->args.bytesize; bpf_ringbuf_output(&events, &e, sizeof(e), 0); return 0; }",
        None,
    ),
    (
        "uninitialised struct padding passed to helper",
        "PROG { struct event e; e.size = ctx->args.bytesize; e.pid = 1;
           bpf_ringbuf_output(&events, &e, sizeof(e), 0); return 0; }",
        Some("invalid read from stack"),
    ),
    (
        "global counter and read-only config",
        "PROG { __sync_fetch_and_add(&total, ctx->args.bytesize);
           return total > limit ? CUDA_ERROR_OUT_OF_MEMORY : 0; }",
        None,
    ),
    (
        "write to const volatile global",
        "PROG { *(volatile __u64 *)&limit = 5; return 0; }",
        Some("read-only map"),
    ),
    (
        "pointer stored into map value",
        "PROG { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (!v) return 0;
           *v = (__u64)v; return 0; }",
        Some("leaks addr"),
    ),
    (
        "verdict out of range",
        "PROG { return ctx->args.bytesize; }",
        Some("at program exit r0"),
    ),
    (
        "verdict clamped",
        "PROG { return ctx->args.bytesize > 100 ? CUDA_ERROR_OUT_OF_MEMORY : 0; }",
        None,
    ),
    (
        "write read-only header field",
        "PROG { ctx->hdr.result = 1; return 0; }",
        Some("hdr.result"),
    ),
    (
        "rewrite writable argument",
        "PROG { ctx->args.bytesize = (ctx->args.bytesize + 4095) & ~4095ULL; return 0; }",
        None,
    ),
    (
        "probe_read_user of an argument pointer",
        "PROG { __u64 x = 0; bpf_probe_read_user(&x, sizeof(x), (void *)ctx->args.dptr); return x == 7; }",
        None,
    ),
    (
        "dereference application pointer",
        "PROG { return *(__u64 *)ctx->args.dptr == 7; }",
        Some("invalid mem access 'scalar'"),
    ),
    (
        "printk",
        "PROG { bpf_printk(\"alloc %llu\", ctx->args.bytesize); return 0; }",
        None,
    ),
    (
        "static subprogram",
        "static __noinline __u64 clamp(__u64 x) { return x > 1000 ? 1000 : x; }
         PROG { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (!v) return 0;
           *v += clamp(ctx->args.bytesize); return 0; }",
        None,
    ),
    (
        "bpf_loop callback",
        "struct lctx { __u64 sum; __u64 n; };
         static long step(__u32 i, void *data) { struct lctx *c = data; c->sum += i * c->n; return 0; }
         PROG { struct lctx c = { .sum = 0, .n = ctx->args.bytesize };
           bpf_loop(100, step, &c, 0); return c.sum > 5 ? 2 : 0; }",
        None,
    ),
    (
        "loop bound from ctx",
        "PROG { __u64 n = ctx->args.bytesize; __u32 k = 0;
           for (__u64 i = 0; i < n; i++) { __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (v) *v += i; }
           return 0; }",
        Some("too complex"),
    ),
    (
        "loop bound from ctx clamped",
        "PROG { __u64 n = ctx->args.bytesize; __u32 k = 0; if (n > 16) n = 16;
           for (__u64 i = 0; i < n; i++) { __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (v) *v += i; }
           return 0; }",
        None,
    ),
    (
        "switch on size class",
        "PROG { __u32 k; __u64 s = ctx->args.bytesize;
           switch (s >> 20) { case 0: k = 0; break; case 1: k = 1; break; case 2: case 3: k = 2; break; default: k = 3; }
           __u64 *v = bpf_map_lookup_elem(&cnt, &k); if (v) __sync_fetch_and_add(v, s); return 0; }",
        None,
    ),
];

#[test]
fn c_cases() {
    let Some(clang) = clang() else {
        eprintln!("skipped: clang not found");
        return;
    };
    // One translation unit: case `i` is the program `case_i`.
    let mut src = String::from(PRELUDE);
    for (i, (_, body, _)) in CASES.iter().enumerate() {
        src.push_str(&format!(
            "#undef PROG\n#define PROG SEC(\"cuda/cuMemAlloc\") int case_{i}(struct gpubpf_cuMemAlloc_entry *ctx)\n{body}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("cases.bpf.c");
    std::fs::write(&c, &src).unwrap();
    let bytes = compile(clang, &c, &dir.path().join("cases.o")).unwrap();
    let results = verify_object(&bytes);
    let mut failures = Vec::new();
    for (i, (name, _, want)) in CASES.iter().enumerate() {
        let prog = format!("case_{i}");
        let Some((_, r)) = results.iter().find(|(p, _)| *p == prog) else {
            failures.push(format!("`{name}`: program {prog} missing from the object"));
            continue;
        };
        match (want, r) {
            (None, Ok(_)) => {}
            (Some(f), Err(e)) if e.kind.to_string().contains(f) || e.render().contains(f) => {}
            (None, Err(e)) => failures.push(format!(
                "`{name}` ({prog}): expected accept, got:\n{}",
                e.render()
            )),
            (Some(f), Err(e)) => failures.push(format!(
                "`{name}` ({prog}): expected error containing `{f}`, got:\n{}",
                e.render()
            )),
            (Some(f), Ok(_)) => failures.push(format!(
                "`{name}` ({prog}): expected error containing `{f}`, but it was accepted"
            )),
        }
    }
    eprintln!("{} C cases, {} failed", CASES.len(), failures.len());
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// Every policy in `policies/` (`*.bpf.c` or `*.c` at the top level or one directory down)
/// must verify.
#[test]
fn policies_verify() {
    let Some(clang) = clang() else {
        eprintln!("skipped: clang not found");
        return;
    };
    let mut sources = Vec::new();
    let pol = root().join("policies");
    let mut dirs = vec![pol.clone()];
    while let Some(d) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "include") && d == pol {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "c") {
                sources.push(p);
            }
        }
    }
    if sources.is_empty() {
        eprintln!("skipped: no policies in {}", pol.display());
        return;
    }
    sources.sort();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        let out = dir.path().join(format!("p{i}.o"));
        let bytes = match compile(clang, src, &out) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{}: clang failed:\n{e}", src.display()));
                continue;
            }
        };
        for (prog, r) in verify_object(&bytes) {
            match r {
                Ok(s) => eprintln!(
                    "{} {prog}: accepted, {} insns processed, {:?}",
                    src.display(),
                    s.insns_processed,
                    s.duration
                ),
                Err(e) => failures.push(format!("{} {prog}:\n{}", src.display(), e.render())),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
