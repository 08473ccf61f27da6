//! `gpubpf-conformance-plugin`: runs one bpf_conformance test program on a gpubpf engine,
//! speaking the suite's plugin protocol.
//!
//! ```text
//! gpubpf-conformance-plugin [MEMORY_HEX] [--engine interpreter|jit] [--elf]
//! ```
//!
//! - `MEMORY_HEX` (optional, one argument): the program's memory as hex bytes separated
//!   by spaces (`"aa bb 11"`); omitted (or empty) when the test has none. The program gets
//!   `r1` = address of a copy of it and `r2` = its length.
//! - Options may also arrive as one argument (`"--engine interpreter"`), as older runners
//!   pass them; `--engine=jit` works too.
//! - stdin: the program as hex bytes (whitespace-separated pairs or one long string).
//!   With `--elf`: an ELF object in hex, loaded by `gpubpf_runtime::object`; its first
//!   program runs (objects with maps or global data are rejected: the plugin has no maps).
//! - stdout: `r0` in hexadecimal (`0x…`), exit status 0. Errors go to stderr with exit
//!   status 1 (2 for usage errors).
//!
//! Helper 5 (`unwind` in the suite's uBPF plugin, returning its argument) is registered
//! because `call_unwind_fail.data` and `callx.data` call it.
//!
//! Engines: `jit` (the default) compiles the program with the Cranelift JIT and prints the
//! JIT's `r0`. Conformance programs are not verified, and JIT code accesses memory
//! unchecked, so the plugin first runs the program on the interpreter in checked mode as a
//! memory-safety gate: a program that leaves its memory or stack is reported as the
//! interpreter's error and never reaches native code. `interpreter` prints the
//! interpreter's `r0`.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};
use gpubpf_runtime::object::{Object, ACCEPTED_PROGRAM_SECTIONS};

const USAGE: &str =
    "usage: gpubpf-conformance-plugin [MEMORY_HEX] [--engine interpreter|jit] [--elf]
  program as hex bytes on stdin; r0 printed in hex on stdout";

/// Execution engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Interpreter,
    Jit,
}

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Args {
    memory: Vec<u8>,
    engine: Engine,
    elf: bool,
    help: bool,
}

/// A usage error (exit status 2).
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow!(UsageError(msg.into()))
}

/// Parses `[MEMORY_HEX] [OPTIONS…]` (without the program name).
fn parse_args(argv: &[String]) -> Result<Args> {
    let mut args = Args {
        memory: Vec::new(),
        engine: Engine::Jit,
        elf: false,
        help: false,
    };
    let mut rest = argv;
    if let Some((first, tail)) = argv.split_first() {
        if !first.trim_start().starts_with('-') {
            args.memory = parse_hex(first).context("memory argument")?;
            rest = tail;
        }
    }
    let words: Vec<&str> = rest.iter().flat_map(|a| a.split_whitespace()).collect();
    let mut i = 0;
    while let Some(&word) = words.get(i) {
        i += 1;
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (word, None),
        };
        match name {
            "--engine" => {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        let v = words
                            .get(i)
                            .ok_or_else(|| usage("--engine needs a value: interpreter or jit"))?;
                        i += 1;
                        v
                    }
                };
                args.engine = match value {
                    "interpreter" => Engine::Interpreter,
                    "jit" => Engine::Jit,
                    other => {
                        return Err(usage(format!(
                            "unknown engine `{other}` (expected interpreter or jit)"
                        )))
                    }
                };
            }
            "--elf" if inline.is_none() => args.elf = true,
            "-h" | "--help" if inline.is_none() => args.help = true,
            _ => return Err(usage(format!("unknown option `{word}`\n{USAGE}"))),
        }
    }
    Ok(args)
}

/// Parses hex bytes: whitespace-separated pairs, or longer even-length runs of digits.
fn parse_hex(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for tok in text.split_whitespace() {
        let tok = tok.strip_prefix("0x").unwrap_or(tok);
        if tok.len() % 2 != 0 || !tok.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("invalid hex `{tok}`");
        }
        for pair in tok.as_bytes().chunks(2) {
            let s = std::str::from_utf8(pair).context("hex digits")?;
            out.push(u8::from_str_radix(s, 16).with_context(|| format!("invalid hex `{s}`"))?);
        }
    }
    Ok(out)
}

/// Helper 5 of the suite: returns its argument.
extern "C" fn unwind(r1: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    r1
}

fn helpers() -> HelperTable {
    let mut t = HelperTable::new();
    t.register(5, "unwind", unwind);
    t
}

/// The slots of the first program of an ELF object.
fn elf_program(bytes: &[u8]) -> Result<Vec<gpubpf_isa::Insn>> {
    let object = Object::parse(bytes).context("loading the ELF object")?;
    if let Some(map) = object.maps.first() {
        bail!(
            "the object uses map `{}`: maps and global data are not available to the plugin",
            map.name
        );
    }
    let program = object.programs.into_iter().next().ok_or_else(|| {
        anyhow!("the object has no program (program sections are {ACCEPTED_PROGRAM_SECTIONS})")
    })?;
    Ok(program.insns)
}

/// Runs the program (hex text) with `args`; returns `r0`.
fn run(args: &Args, program_hex: &str) -> Result<u64> {
    let bytes = parse_hex(program_hex).context("program on stdin")?;
    if bytes.is_empty() {
        bail!("no program on stdin");
    }
    let insns = if args.elf {
        elf_program(&bytes)?
    } else {
        gpubpf_isa::slots_from_bytes(&bytes)?
    };
    // The interpreter in checked mode: the result for `--engine interpreter`, the
    // memory-safety gate for `--engine jit`.
    let vm = Interpreter::new(Program::from_insns(&insns)?, helpers());
    let mut mem = args.memory.clone();
    let len = mem.len() as u64;
    let mut stack = vec![0u8; STACK_SIZE];
    let r0 = {
        let mut memory = Memory::new();
        let addr = if mem.is_empty() {
            0
        } else {
            memory.add_mut("mem", &mut mem)
        };
        vm.execute(&[addr, len], &mut stack, &memory)?
    };
    if args.engine == Engine::Interpreter {
        return Ok(r0);
    }
    let compiled = gpubpf_runtime::jit::compile(&insns, &helpers()).context("JIT compile")?;
    let mut mem = args.memory.clone();
    let addr = if mem.is_empty() {
        0
    } else {
        mem.as_mut_ptr() as u64
    };
    let mut stack = Box::new([0u8; STACK_SIZE]);
    // SAFETY: the same program just ran on the interpreter in checked mode with the same
    // memory contents and stayed inside its memory and stack; the JIT implements the same
    // semantics, so it performs the same accesses on this copy.
    let r0 = unsafe { compiled.execute_with_args([addr, len], &mut stack) }?;
    Ok(r0)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = parse_args(&argv).and_then(|args| {
        if args.help {
            println!("{USAGE}");
            return Ok(None);
        }
        let mut program = String::new();
        std::io::stdin()
            .read_to_string(&mut program)
            .context("reading the program from stdin")?;
        run(&args, &program).map(Some)
    });
    match result {
        Ok(Some(r0)) => {
            println!("{r0:#x}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpubpf-conformance-plugin: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn memory_is_optional_and_first() {
        let a = parse_args(&argv(&["aa  bb 11", "--engine", "interpreter"])).expect("parses");
        assert_eq!(a.memory, vec![0xaa, 0xbb, 0x11]);
        assert_eq!(a.engine, Engine::Interpreter);
        let a = parse_args(&argv(&["--engine=jit", "--elf"])).expect("parses");
        assert!(a.memory.is_empty());
        assert_eq!(a.engine, Engine::Jit);
        assert!(a.elf);
        let a = parse_args(&argv(&["", "--engine interpreter"])).expect("parses");
        assert_eq!(a.engine, Engine::Interpreter);
        assert_eq!(parse_args(&[]).expect("parses").memory, Vec::<u8>::new());
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for bad in [
            &["--frobnicate"][..],
            &["--engine"],
            &["--engine", "llvm"],
            &["11", "22"],
        ] {
            let e = parse_args(&argv(bad)).expect_err("rejected");
            assert!(e.downcast_ref::<UsageError>().is_some(), "{bad:?}: {e}");
        }
        assert!(parse_args(&argv(&["zz"])).is_err());
    }

    #[test]
    fn runs_programs_and_reports_errors() {
        let args = parse_args(&argv(&["11 22 33 44"])).expect("parses");
        // ldxw r0, [r1]; exit
        let r0 = run(&args, "61 10 00 00 00 00 00 00 95 00 00 00 00 00 00 00").expect("runs");
        assert_eq!(r0, 0x4433_2211);
        // One long string of digits works too; r2 is the memory length.
        let r0 = run(&args, "bf200000000000009500000000000000\n").expect("runs");
        assert_eq!(r0, 4);
        let e = run(&args, "07 00 01 00 01 00 00 00 95 00 00 00 00 00 00 00").expect_err("bad");
        assert!(e.to_string().contains("instruction 0"), "{e}");
        let interp =
            parse_args(&argv(&["11 22 33 44", "--engine", "interpreter"])).expect("parses");
        assert_eq!(args.engine, Engine::Jit, "the JIT is the default");
        let ldxw = "61 10 00 00 00 00 00 00 95 00 00 00 00 00 00 00";
        assert_eq!(run(&interp, ldxw).expect("runs"), 0x4433_2211);
        let elf = parse_args(&argv(&["--elf"])).expect("parses");
        assert!(run(&elf, "7f 45 4c 46").is_err());
        assert!(run(&args, "").is_err());
        assert!(run(&args, "95 00").is_err());
    }
}
