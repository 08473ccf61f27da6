//! W^X: after compiling a batch of programs (plain, helper calls, loops, subprograms), no
//! mapping of the process is writable and executable at once, every program's code lies in
//! a read + execute mapping, and the programs still run. Fails if the JIT ever maps code
//! RWX, or leaves finalised code writable.

use gpubpf_isa::assemble;
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::jit::{CompiledProgram, JitCompiler};

extern "C" fn five(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    5
}

/// `(start, end, perms)` of every mapping of this process.
fn mappings() -> Vec<(usize, usize, String)> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (lo, hi) = it.next()?.split_once('-')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
                it.next()?.to_string(),
            ))
        })
        .collect()
}

const PROGRAMS: &[(&str, u64)] = &[
    ("mov %r0, 7\nexit", 7),
    ("call 5\nadd %r0, 1\nexit", 6),
    (
        "mov %r0, 0\nmov %r1, 10\nloop:\nadd %r0, 2\nsub %r1, 1\njne %r1, 0, loop\nexit",
        20,
    ),
    (
        "mov %r1, 3\ncall local f\nadd %r0, 1\nexit\nf:\nmov %r0, %r1\nmul %r0, 4\nexit",
        13,
    ),
];

#[test]
fn no_mapping_is_ever_writable_and_executable() {
    let mut helpers = HelperTable::new();
    helpers.register(5, "five", five);
    let mut compiler = JitCompiler::new().expect("host ISA");
    let mut compiled: Vec<(CompiledProgram, u64)> = Vec::new();
    for round in 0..8 {
        for (src, want) in PROGRAMS {
            let slots = assemble(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let p = if round % 2 == 0 {
                compiler.compile(&slots, &helpers)
            } else {
                gpubpf_runtime::jit::compile(&slots, &helpers)
            };
            compiled.push((p.unwrap_or_else(|e| panic!("{src}: {e}")), *want));
        }
    }
    let maps = mappings();
    let rwx: Vec<_> = maps
        .iter()
        .filter(|(_, _, p)| p.contains('w') && p.contains('x'))
        .collect();
    assert!(rwx.is_empty(), "writable and executable mappings: {rwx:x?}");
    for (p, _) in &compiled {
        let at = p.code_address();
        let (_, _, perms) = maps
            .iter()
            .find(|(lo, hi, _)| *lo <= at && at < *hi)
            .expect("code address is mapped");
        assert_eq!(perms, "r-xp", "code of a compiled program at {at:#x}");
    }
    let mut stack = Box::new([0u8; STACK_SIZE]);
    for (p, want) in &compiled {
        // SAFETY: the programs read no memory but their own stack frame.
        let r0 = unsafe { p.execute(std::ptr::null_mut(), &mut stack) }.unwrap();
        assert_eq!(r0, *want);
    }
}
