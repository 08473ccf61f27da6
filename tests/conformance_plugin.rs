//! The `gpubpf-conformance-plugin` binary, driven as the suite's runner drives it: every
//! conformance test through a real process (memory as argv[1], program hex on stdin, r0 in
//! hex on stdout), plus the protocol's error paths.
//!
//! The binary is built on first use by `common::cli::binary`.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::conformance_data;

const BIN: &str = "gpubpf-conformance-plugin";

/// The plugin binary, built once per test process.
fn plugin() -> PathBuf {
    common::cli::binary(BIN)
}

fn invoke(bin: &PathBuf, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plugin starts");
    // A plugin that rejects its arguments exits without reading stdin: a broken pipe here
    // is expected then, and the exit status tells the rest.
    if let Err(e) = child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(stdin.as_bytes())
    {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing the program: {e}"
        );
    }
    child.wait_with_output().expect("plugin finishes")
}

/// Hex the way the suite's runner writes it: two digits and spaces per byte.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}  ")).collect()
}

#[test]
fn plugin_passes_the_conformance_suite() {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return;
    };
    let bin = plugin();
    let tests = conformance_data::load_dir(&dir.join("tests")).expect("tests parse");
    let mut failures = Vec::new();
    for t in &tests {
        let program = hex(&t.program_bytes().expect("program"));
        let mut args = Vec::new();
        let mem = t.mem.as_deref().map(hex);
        if let Some(m) = &mem {
            args.push(m.as_str());
        }
        // The default engine: the JIT.
        let out = invoke(&bin, &args, &format!("{program}\n"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let got = stdout
            .trim()
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        if !out.status.success() || got != t.result {
            failures.push(format!(
                "{}: status {}, stdout `{}`, stderr `{}`",
                t.name,
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    println!(
        "conformance (plugin, jit): {}/{} passed",
        tests.len() - failures.len(),
        tests.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn plugin_error_paths() {
    let bin = plugin();
    let exit = "95 00 00 00 00 00 00 00\n";
    // Decode error: non-zero exit, message on stderr, nothing on stdout.
    let out = invoke(&bin, &[], "07 00 01 00 01 00 00 00 95 00 00 00 00 00 00 00");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("instruction 0"));
    // The JIT engine (also the default) works.
    let out = invoke(
        &bin,
        &["--engine", "jit"],
        "b7 00 00 00 07 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0x7");
    let out = invoke(&bin, &["--engine", "jit"], exit);
    assert!(out.status.success());
    // Usage error.
    let out = invoke(&bin, &["--bogus"], exit);
    assert_eq!(out.status.code(), Some(2));
    // Memory fault in checked mode: r1 points at 2 bytes, the program reads 8.
    let out = invoke(
        &bin,
        &["aa bb"],
        "79 10 00 00 00 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside every allowed memory region"));
    // Success without memory; options in one argument, as older runners pass them.
    let out = invoke(
        &bin,
        &["", "--engine interpreter"],
        "b7 00 00 00 2a 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0x2a");
}

/// `--elf`: an object compiled by clang runs its first program with the test's memory.
#[test]
fn plugin_runs_an_elf_object() {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("p.c");
    let obj = dir.path().join("p.o");
    std::fs::write(
        &src,
        "__attribute__((section(\"cuda/cuMemAlloc\"), used))\n\
         unsigned long long prog(unsigned char *mem, unsigned long long len)\n\
         { return (len << 8) | mem[1]; }\n",
    )
    .expect("source written");
    let compiled = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status();
    match compiled {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("skipped: `{clang} -target bpf` unavailable ({other:?})");
            return;
        }
    }
    let bytes = std::fs::read(&obj).expect("object read");
    let out = invoke(&plugin(), &["aa bb cc", "--elf"], &hex(&bytes));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0x3bb");
    // Not an object: a clear error.
    let out = invoke(&plugin(), &["--elf"], "7f 45 4c 46");
    assert_eq!(out.status.code(), Some(1));
    assert!(!out.stderr.is_empty());
}
