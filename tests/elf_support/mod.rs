//! Shared helpers of the `elf_*` and `sdk_*` integration tests: finding clang, compiling
//! policies and test programs, and checking the invariants every loaded program must meet.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use gpubpf_isa::{decode_program, CallTarget, Instruction, LddwKind};
use gpubpf_runtime::object::{Object, Program};
use gpubpf_runtime::sdk;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn available(clang: &str) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The clangs to test with: `clang` and `clang-19`, those installed. Prints a skip note for
/// a missing one; panics when neither exists (the suite's script installs both).
pub fn clangs() -> Vec<&'static str> {
    static FOUND: OnceLock<Vec<&'static str>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let found: Vec<_> = ["clang", "clang-19"]
                .into_iter()
                .filter(|c| {
                    let ok = available(c);
                    if !ok {
                        eprintln!("skipped: `{c}` not found on PATH");
                    }
                    ok
                })
                .collect();
            assert!(
                !found.is_empty(),
                "neither clang nor clang-19 is installed (scripts/test.sh installs them)"
            );
            found
        })
        .clone()
}

/// A scratch directory under the target dir for this test binary.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles every policy with `policies/build.sh` (once per clang) and returns the output
/// directory.
pub fn built_policies(clang: &str) -> PathBuf {
    static DONE: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = done.iter().find(|(c, _)| c == clang) {
        return d.clone();
    }
    let out = scratch(&format!("policies-{clang}-{}", std::process::id()));
    let r = Command::new("bash")
        .arg(repo_root().join("policies/build.sh"))
        .env("CLANG", clang)
        .env("OUT", &out)
        .output()
        .expect("run policies/build.sh");
    assert!(
        r.status.success(),
        "policies/build.sh with {clang} failed:\n{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    done.push((clang.to_string(), out.clone()));
    out
}

/// `$EXTRA_CFLAGS`, split on whitespace (the same knob `policies/build.sh` honours).
pub fn extra_cflags() -> Vec<String> {
    std::env::var("EXTRA_CFLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Compiles `src` with the SDK flags and include directory; returns the object bytes.
pub fn compile(clang: &str, src: &Path, extra: &[&str]) -> Vec<u8> {
    let out = scratch("objs").join(format!(
        "{}-{clang}-{}.o",
        src.file_stem().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let r = Command::new(clang)
        .args(sdk::CLANG_FLAGS)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(repo_root().join("policies/include"))
        .args(extra)
        .args(extra_cflags())
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run clang");
    assert!(
        r.status.success(),
        "{clang} failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    std::fs::read(&out).unwrap()
}

/// Compiles C source text (written to a scratch file named `name`).
pub fn compile_text(clang: &str, name: &str, text: &str) -> Vec<u8> {
    let src = scratch("srcs").join(name);
    std::fs::write(&src, text).unwrap();
    compile(clang, &src, &[])
}

/// Checks what every engine relies on: all slots decode strictly, map references are
/// `MapIdx`/`MapIdxValue` within the map list (values within the value size), and every
/// local call or function address lands on the entry or a subprogram start.
pub fn check_program(obj: &Object, p: &Program) {
    let decoded = decode_program(&p.insns)
        .unwrap_or_else(|e| panic!("{}: program does not decode: {e}", p.name));
    let mut starts = vec![0usize];
    starts.extend(p.subprograms.iter().map(|s| s.pc));
    let mut end = p.entry_len;
    for s in &p.subprograms {
        assert_eq!(
            s.pc, end,
            "{}: subprogram {} not contiguous",
            p.name, s.name
        );
        end += s.len;
    }
    assert_eq!(
        end,
        p.insns.len(),
        "{}: functions do not cover the program",
        p.name
    );
    for (pc, insn) in decoded {
        match insn {
            Instruction::LoadImm64 {
                kind,
                imm,
                next_imm,
                ..
            } => match kind {
                LddwKind::Imm => {}
                LddwKind::MapIdx => {
                    let m = obj.maps.get(imm as usize).expect("map index in range");
                    assert!(!m.is_global(), "{}@{pc}: MapIdx on global map", p.name);
                }
                LddwKind::MapIdxValue => {
                    let m = obj.maps.get(imm as usize).expect("map index in range");
                    assert!(
                        m.is_global(),
                        "{}@{pc}: MapIdxValue on non-global map",
                        p.name
                    );
                    assert!((next_imm as u32) < m.value_size, "{}@{pc}: offset", p.name);
                }
                LddwKind::Func => {
                    let t = (pc as i64 + 1 + imm as i64) as usize;
                    assert!(starts.contains(&t), "{}@{pc}: func addr {t}", p.name);
                }
                other => panic!("{}@{pc}: unexpected lddw kind {other:?}", p.name),
            },
            Instruction::Call(CallTarget::Local(off)) => {
                let t = (pc as i64 + 1 + off as i64) as usize;
                assert!(starts.contains(&t), "{}@{pc}: call target {t}", p.name);
            }
            Instruction::Call(CallTarget::Kfunc(_)) => panic!("{}@{pc}: kfunc", p.name),
            _ => {}
        }
    }
    for l in &p.line_info {
        assert!(l.pc < p.insns.len(), "{}: line info pc {}", p.name, l.pc);
        assert!(
            l.line > 0 && !l.file.is_empty(),
            "{}: line record {l:?}",
            p.name
        );
    }
}

/// Parses and checks every program.
pub fn load_checked(bytes: &[u8]) -> Object {
    let obj = Object::parse(bytes).unwrap_or_else(|e| panic!("load failed: {e}"));
    for p in &obj.programs {
        check_program(&obj, p);
    }
    obj
}
