//! End to end: the real `gpubpf` binary's `build` and `inspect` commands.
//!
//! The binary is built once per test run with `cargo build -p gpubpf-loader-cli --bin
//! gpubpf` (a no-op when fresh) and run from the target directory of this test.

mod common;

mod elf_support;

use std::path::PathBuf;
use std::process::{Command, Output};

use elf_support::{clangs, repo_root, scratch};
use serde_json::Value;

use common::cli::gpubpf;

/// Runs `gpubpf ARGS` with the SDK cache in a scratch directory.
fn run(args: &[&str]) -> Output {
    Command::new(gpubpf())
        .args(args)
        .env("GPUBPF_CACHE_DIR", scratch("cli-cache"))
        .output()
        .expect("run gpubpf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Builds `policies/<name>.bpf.c` with `clang`; returns the object path.
fn build_policy(clang: &str, name: &str) -> PathBuf {
    let out = scratch("cli").join(format!("{name}-{clang}.o"));
    let src = repo_root().join(format!("policies/{name}.bpf.c"));
    let o = run(&[
        "build",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--clang",
        clang,
    ]);
    assert_eq!(code(&o), 0, "{clang}: {}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("program(s)"),
        "{}",
        text(&o.stdout)
    );
    out
}

#[test]
fn build_then_inspect_text() {
    for clang in clangs() {
        let obj = build_policy(clang, "quota");
        let o = run(&["inspect", obj.to_str().unwrap()]);
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        let s = text(&o.stdout);
        for want in [
            "license: Dual MIT/GPL",
            "quota_alloc: section cuda/cuMemAlloc, attach cuMemAlloc, phase entry,",
            "subprograms: reserve (pc ",
            "quota_free_done: section cudaret/cuMemFree, attach cuMemFree, phase exit,",
            "proc_usage: hash, key 4 (__u32), value 32 (struct usage), max_entries 4096, flags 0x0, pinned by name",
            "quota_allocs: lru_hash, key 16 (struct quota_key), value 24 (struct quota_alloc)",
            // Spelled as `maps show` spells them: the implicit array key, the section.
            ".rodata: array, key 4 (__u32), value ",
            "limit_bytes: const volatile __u64, .rodata+0, 8 bytes, default 4294967296 (settable)",
            "log_denials: const volatile bool, .rodata+24, 1 bytes, default true (settable)",
            "line info: ",
        ] {
            assert!(s.contains(want), "{clang}: missing `{want}` in:\n{s}");
        }
    }
}

#[test]
fn inspect_json_with_set() {
    let obj = build_policy(clangs()[0], "trace");
    let o = run(&[
        "inspect",
        obj.to_str().unwrap(),
        "--json",
        "--set",
        "min_latency_ns=10us",
    ]);
    assert_eq!(
        code(&o),
        1,
        "time suffixes are not sizes: {}",
        text(&o.stdout)
    );
    let o = run(&[
        "inspect",
        obj.to_str().unwrap(),
        "--json",
        "--set",
        "min_latency_ns=16KiB",
        "--set",
        "emit_events=no",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let progs = v["programs"].as_array().unwrap();
    assert_eq!(progs.len(), 8);
    let exit = progs
        .iter()
        .find(|p| p["name"] == "trace_alloc_exit")
        .unwrap();
    assert_eq!(exit["phase"], "exit");
    assert_eq!(exit["attach"], "cuMemAlloc");
    assert_eq!(exit["subprograms"][0]["name"], "on_exit");
    assert!(exit["line_info"]["records"].as_u64().unwrap() > 10);
    assert_eq!(exit["line_info"]["covered_insns"], exit["insns"]);
    let events = v["maps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "events")
        .unwrap();
    assert_eq!(events["type"], "ringbuf");
    assert_eq!(events["max_entries"], 262144);
    let g = |name: &str| {
        v["globals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(g("min_latency_ns")["default"], "0");
    assert_eq!(g("min_latency_ns")["value"], "16384");
    assert_eq!(g("emit_events")["value"], "false");
    assert_eq!(g("emit_events")["type"], "const volatile bool");
    assert_eq!(v["license"], "Dual MIT/GPL");

    // -p pretty-prints the same document.
    let p = run(&["inspect", obj.to_str().unwrap(), "-p"]);
    assert!(text(&p.stdout).contains("\n  \"programs\": ["));
}

#[test]
fn inspect_bad_object_exits_4() {
    let bad = repo_root().join("tests/data/crafted/reloc_bad_symbol.o");
    let o = run(&["inspect", bad.to_str().unwrap()]);
    assert_eq!(code(&o), 4);
    let e = text(&o.stderr);
    assert!(
        e.contains("section `cuda/cuMemAlloc`, offset 32: relocation refers to symbol 65535"),
        "{e}"
    );
    let o = run(&["inspect", bad.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 4);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("symbol 65535"));
    assert_eq!(v["detail"]["kind"], "object");

    let o = run(&["inspect", "/nonexistent/x.o"]);
    assert_eq!(code(&o), 4);
    assert!(text(&o.stderr).contains("cannot read `/nonexistent/x.o`"));

    let good = repo_root().join("tests/data/crafted/min.o");
    let o = run(&["inspect", good.to_str().unwrap(), "--set", "nope=1"]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stderr).contains("no global named `nope`; settable globals: limit"));
}

#[test]
fn build_reports_clang_diagnostics() {
    let src = scratch("cli").join("broken.bpf.c");
    std::fs::write(
        &src,
        "#include \"gpubpf.h\"\nSEC(\"cuda/cuMemAlloc\") int p(void *ctx) { return undefined_thing; }\n",
    )
    .unwrap();
    let o = run(&["build", src.to_str().unwrap(), "--clang", clangs()[0]]);
    assert_eq!(code(&o), 1);
    let e = text(&o.stderr);
    assert!(e.contains("broken.bpf.c:2:"), "{e}");
    assert!(e.contains("undefined_thing"), "{e}");
    assert!(e.contains("clang failed to compile"), "{e}");

    let o = run(&[
        "build",
        src.to_str().unwrap(),
        "--clang",
        clangs()[0],
        "--json",
    ]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["detail"]["diagnostics"]
        .as_str()
        .unwrap()
        .contains("undefined_thing"));
}

#[test]
fn build_rejects_objects_the_loader_rejects() {
    let src = scratch("cli").join("kprobe.bpf.c");
    std::fs::write(
        &src,
        "#include \"gpubpf.h\"\nSEC(\"kprobe/do_sys_open\") int p(void *ctx) { return 0; }\n",
    )
    .unwrap();
    let o = run(&["build", src.to_str().unwrap(), "--clang", clangs()[0]]);
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains("unknown program section `kprobe/do_sys_open`"),
        "{e}"
    );
    assert!(e.contains("`cudaret/<api>`"), "{e}");
    // The object no command would accept is not left behind (issue #14), and build says so.
    assert!(
        e.contains("kprobe.o` was compiled but the loader rejects it (removed it)"),
        "{e}"
    );
    assert!(!scratch("cli").join("kprobe.o").exists());

    // A libbpf helper gpubpf does not implement: named as such, with where the list is.
    let src = scratch("cli").join("task.bpf.c");
    std::fs::write(
        &src,
        "#include \"gpubpf.h\"\nSEC(\"cuda/cuMemAlloc\") int p(void *ctx)\n\
         { return bpf_get_current_task() != 0; }\n",
    )
    .unwrap();
    let o = run(&["build", src.to_str().unwrap(), "--clang", clangs()[0]]);
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains(
            "hint: `bpf_get_current_task` is a Linux helper, not a gpubpf helper; \
                    `gpubpf helpers` lists"
        ),
        "{e}"
    );
    // Declared by hand, it compiles; the verifier names it and says where the list is.
    std::fs::write(
        &src,
        "#include \"gpubpf.h\"\n\
         static long (*bpf_get_current_task)(void) = (void *) 35;\n\
         SEC(\"cuda/cuMemAlloc\") int p(void *ctx) { return bpf_get_current_task() != 0; }\n\
         char LICENSE[] SEC(\"license\") = \"GPL\";\n",
    )
    .unwrap();
    let o = run(&["build", src.to_str().unwrap(), "--clang", clangs()[0]]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let o = run(&["verify", scratch("cli").join("task.o").to_str().unwrap()]);
    assert_eq!(code(&o), 3, "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains(
            "hint: `bpf_get_current_task` (Linux helper 35) is not a gpubpf helper: \
                    `gpubpf helpers` lists"
        ),
        "{e}"
    );
    // And the list is there.
    let o = run(&["helpers"]);
    assert_eq!(code(&o), 0);
    assert!(text(&o.stdout).contains("bpf_map_lookup_elem"));
    let o = run(&["helpers", "bpf_get_current_task"]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stderr).contains("Linux helper that gpubpf does not implement"));
}

#[test]
fn build_without_clang_fails_clearly() {
    let src = repo_root().join("policies/quota.bpf.c");
    let o = run(&[
        "build",
        src.to_str().unwrap(),
        "--clang",
        "/nonexistent/clang-99",
    ]);
    assert_eq!(code(&o), 1);
    assert!(
        text(&o.stderr).contains("clang not found at `/nonexistent/clang-99`"),
        "{}",
        text(&o.stderr)
    );
    let o = Command::new(gpubpf())
        .args(["build", src.to_str().unwrap()])
        .env("PATH", scratch("empty-path"))
        .env_remove("GPUBPF_CLANG")
        .env("GPUBPF_CACHE_DIR", scratch("cli-cache"))
        .output()
        .unwrap();
    assert_eq!(code(&o), 1);
    let e = text(&o.stderr);
    assert!(e.contains("clang not found on PATH"), "{e}");
    assert!(e.contains("--clang PATH"), "{e}");
}

#[test]
fn build_json_reports_the_object() {
    let out = scratch("cli").join("trace-json.o");
    let src = repo_root().join("policies/trace.bpf.c");
    let o = run(&[
        "build",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--clang",
        clangs()[0],
        "-j",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o.stdout));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["output"], out.to_str().unwrap());
    assert!(v["programs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "trace_alloc"));
    assert!(v["maps"].as_array().unwrap().iter().any(|m| m == "events"));
    // The headers were materialised in the cache directory given by GPUBPF_CACHE_DIR.
    let include = PathBuf::from(v["include"].as_str().unwrap());
    assert!(include.starts_with(scratch("cli-cache")));
    assert!(include.join("gpubpf.h").is_file());
    assert!(include.join("bpf/bpf_helpers.h").is_file());
}

/// Newcomers' mistakes get a message that says what to do.
#[test]
fn newcomer_mistakes_get_clear_messages() {
    let d = tempfile::tempdir().unwrap();
    let src = repo_root().join("policies/quota.bpf.c");
    let o = run(&["inspect", src.to_str().unwrap()]);
    assert_eq!(code(&o), 4);
    assert!(
        text(&o.stderr).contains("is C source: compile it with `gpubpf build"),
        "{}",
        text(&o.stderr)
    );
    let notes = d.path().join("notes.txt");
    std::fs::write(&notes, "hello").unwrap();
    let o = run(&["build", notes.to_str().unwrap()]);
    assert_ne!(code(&o), 0);
    assert!(
        text(&o.stderr).contains("is not a C file"),
        "{}",
        text(&o.stderr)
    );
    let good = repo_root().join("tests/data/crafted/min.o");
    let o = run(&["inspect", good.to_str().unwrap(), "--set", "limit"]);
    assert_ne!(code(&o), 0);
    assert!(
        text(&o.stderr).contains("`limit`: expected NAME=VALUE"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn verify_log_shows_source_lines_as_the_kernel_does() {
    let obj = build_policy(clangs()[0], "quota");
    let o = run(&[
        "verify",
        obj.to_str().unwrap(),
        "--prog",
        "quota_free_done",
        "--log",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let log = text(&o.stderr);
    let lines: Vec<&str> = log.lines().collect();
    // The program's first C line, then the state and the instruction at pc 0.
    assert!(
        lines[0].starts_with("; if (ctx->hdr.result != CUDA_SUCCESS) @ quota.bpf.c:"),
        "{log}"
    );
    assert!(lines[1].starts_with("0: R1=ctx"), "{log}");
    assert!(lines[2].trim_start().starts_with("0: (61) r2 = "), "{log}");
    // The lines of the subprogram it calls (release: every family's free is credited there).
    assert!(
        log.contains(
            "; static __noinline int release(__u32 pid, __u32 kind, __u64 handle) @ quota.bpf.c:"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "; struct quota_alloc *a = bpf_map_lookup_elem(&quota_allocs, &key); @ quota.bpf.c:"
        ),
        "{log}"
    );
    // In JSON the log is part of each program's report.
    let o = run(&[
        "-j",
        "verify",
        obj.to_str().unwrap(),
        "--prog",
        "quota_free_done",
        "--log",
    ]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    let jlog = j["programs"][0]["log"].as_str().expect("log");
    assert!(
        jlog.starts_with("; if (ctx->hdr.result != CUDA_SUCCESS) @ quota.bpf.c:"),
        "{jlog}"
    );
}
