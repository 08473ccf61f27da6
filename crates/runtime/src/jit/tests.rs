//! Unit tests of the JIT on programs built from `Instruction` values.

use std::sync::Arc;

use gpubpf_isa::{
    encode_program, AluOp, AtomicOp, ByteSwap, CallTarget, Instruction as I, JmpCond, LddwKind,
    Operand, Size, Width,
};

use super::*;
use crate::helper_table::HelperTable;

fn alu(width: Width, op: AluOp, dst: u8, src: Operand) -> I {
    I::Alu {
        width,
        op,
        dst,
        src,
    }
}
fn mov(dst: u8, imm: i32) -> I {
    alu(Width::W64, AluOp::Mov, dst, Operand::Imm(imm))
}
fn lddw(dst: u8, v: u64) -> I {
    I::LoadImm64 {
        dst,
        kind: LddwKind::Imm,
        imm: v as u32 as i32,
        next_imm: (v >> 32) as u32 as i32,
    }
}

fn run_with(prog: &[I], helpers: &HelperTable, mem: &mut [u8]) -> Result<u64, ExecError> {
    let p = compile(&encode_program(prog), helpers).expect("compiles");
    assert_eq!(p.explicit_trap_sites(), 0);
    let mut stack = [0u8; STACK_SIZE];
    // SAFETY: the test programs only touch `mem` (via r1) and their stack.
    unsafe { p.execute_with_args([mem.as_mut_ptr() as u64, mem.len() as u64], &mut stack) }
}

fn run(prog: &[I]) -> u64 {
    run_with(prog, &HelperTable::new(), &mut []).expect("runs")
}

/// `r0 = a; r1 = b; r0 op= r1; exit` in `width`.
fn binop(width: Width, op: AluOp, a: u64, b: u64) -> u64 {
    run(&[
        lddw(0, a),
        lddw(1, b),
        alu(width, op, 0, Operand::Reg(1)),
        I::Exit,
    ])
}

#[test]
fn division_corner_cases_do_not_trap() {
    use AluOp::*;
    use Width::*;
    let min64 = i64::MIN as u64;
    let m1 = u64::MAX;
    assert_eq!(binop(W64, Div, 7, 0), 0);
    assert_eq!(binop(W64, Mod, 7, 0), 7);
    assert_eq!(binop(W64, SDiv, 7, 0), 0);
    assert_eq!(binop(W64, SMod, (-7i64) as u64, 0), (-7i64) as u64);
    assert_eq!(binop(W64, SDiv, min64, m1), min64);
    assert_eq!(binop(W64, SMod, min64, m1), 0);
    assert_eq!(binop(W64, SDiv, (-7i64) as u64, 2), (-3i64) as u64);
    assert_eq!(binop(W64, SMod, (-7i64) as u64, 2), (-1i64) as u64);
    assert_eq!(binop(W64, SMod, 7, (-2i64) as u64), 1);
    assert_eq!(binop(W64, Div, m1, 2), m1 / 2);
    assert_eq!(binop(W32, SDiv, 0x8000_0000, 0xffff_ffff), 0x8000_0000);
    assert_eq!(binop(W32, SMod, 0x8000_0000, 0xffff_ffff), 0);
    assert_eq!(binop(W32, Mod, 0xdead_0000_0000_0007, 0), 7);
    assert_eq!(binop(W32, Div, 0x1_0000_0007, 0), 0);
    assert_eq!(binop(W32, SMod, 0xffff_fff9, 0), 0xffff_fff9);
}

#[test]
fn alu32_zero_extends_and_shifts_mask() {
    use AluOp::*;
    use Width::*;
    assert_eq!(binop(W32, Add, 0xffff_ffff, 1), 0);
    assert_eq!(binop(W32, Mov, 0, u64::MAX), 0xffff_ffff);
    assert_eq!(binop(W32, Lsh, 1, 33), 2);
    assert_eq!(binop(W64, Lsh, 1, 65), 2);
    assert_eq!(binop(W32, Arsh, 0x8000_0000, 4), 0xf800_0000);
    assert_eq!(binop(W64, Arsh, i64::MIN as u64, 63), u64::MAX);
    assert_eq!(binop(W64, Rsh, u64::MAX, 60), 15);
    // ALU64 immediates are sign-extended, also for unsigned division.
    assert_eq!(
        run(&[mov(0, -1), alu(W64, Div, 0, Operand::Imm(-1)), I::Exit,]),
        1
    );
}

#[test]
fn movsx_endian_and_neg() {
    let r = |ins: I| run(&[lddw(0, 0x1122_3344_5566_8788), ins, I::Exit]);
    let sx = |width, bits| I::MovSx {
        width,
        dst: 0,
        src: 0,
        bits,
    };
    assert_eq!(r(sx(Width::W64, 8)), 0xffff_ffff_ffff_ff88);
    assert_eq!(r(sx(Width::W32, 8)), 0xffff_ff88);
    assert_eq!(r(sx(Width::W64, 16)), 0xffff_ffff_ffff_8788);
    assert_eq!(r(sx(Width::W64, 32)), 0x5566_8788);
    let e = |kind, bits| I::Endian { kind, bits, dst: 0 };
    assert_eq!(r(e(ByteSwap::ToLe, 16)), 0x8788);
    assert_eq!(r(e(ByteSwap::ToLe, 32)), 0x5566_8788);
    assert_eq!(r(e(ByteSwap::ToBe, 16)), 0x8887);
    assert_eq!(r(e(ByteSwap::ToBe, 32)), 0x8887_6655);
    assert_eq!(r(e(ByteSwap::Swap, 64)), 0x8887_6655_4433_2211);
    assert_eq!(
        r(I::Neg {
            width: Width::W32,
            dst: 0
        }),
        (0x5566_8788u32.wrapping_neg()) as u64
    );
}

#[test]
fn loads_stores_and_atomics() {
    let mut mem = [0u8; 16];
    mem[0] = 0x80;
    let prog = [
        I::Load {
            size: Size::B,
            sign_extend: true,
            dst: 2,
            src: 1,
            off: 0,
        },
        I::Store {
            size: Size::DW,
            dst: 1,
            off: 8,
            src: Operand::Reg(2),
        },
        mov(3, 5),
        I::Atomic {
            size: Size::W,
            op: AtomicOp::Add,
            fetch: true,
            dst: 1,
            src: 3,
            off: 8,
        },
        mov(0, 0x7b),
        I::Atomic {
            size: Size::DW,
            op: AtomicOp::CmpXchg,
            fetch: true,
            dst: 1,
            src: 3,
            off: 8,
        },
        alu(Width::W64, AluOp::Add, 0, Operand::Reg(3)),
        I::Exit,
    ];
    let r0 = run_with(&prog, &HelperTable::new(), &mut mem).unwrap();
    // r3 = old low word (0xffffff80); memory = 0xffffffff_ffffff85; cmpxchg fails.
    assert_eq!(
        u64::from_le_bytes(mem[8..].try_into().unwrap()),
        0xffff_ffff_ffff_ff85
    );
    assert_eq!(r0, 0xffff_ffff_ffff_ff85u64.wrapping_add(0xffff_ff80));
}

#[test]
fn immediate_stores_write_the_low_bytes_of_the_sign_extended_immediate() {
    // `st` is lowered to `mov [mem], imm` of the store's width: check every width with a
    // negative immediate (sign extension shows in the upper bytes of `stdw` only) and a
    // positive one whose low byte has its top bit set.
    for (size, imm, expect) in [
        (Size::B, -2i32, vec![0xfe]),
        (Size::B, 0x1ff, vec![0xff]),
        (Size::H, -2, vec![0xfe, 0xff]),
        (Size::H, 0x18081, vec![0x81, 0x80]),
        (Size::W, -2, vec![0xfe, 0xff, 0xff, 0xff]),
        (Size::W, 0x7fff_ff80, vec![0x80, 0xff, 0xff, 0x7f]),
        (
            Size::DW,
            -2,
            vec![0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ),
        (
            Size::DW,
            0x7fff_ff80,
            vec![0x80, 0xff, 0xff, 0x7f, 0, 0, 0, 0],
        ),
    ] {
        let mut mem = [0xaau8; 12];
        let prog = [
            I::Store {
                size,
                dst: 1,
                off: 2,
                src: Operand::Imm(imm),
            },
            mov(0, 0),
            I::Exit,
        ];
        run_with(&prog, &HelperTable::new(), &mut mem).unwrap();
        let mut want = [0xaau8; 12];
        want[2..2 + expect.len()].copy_from_slice(&expect);
        assert_eq!(mem, want, "{size:?} {imm:#x}");
    }
}

extern "C" fn add5(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    a + b + c + d + e
}

#[test]
fn helper_and_local_calls_use_frames() {
    let mut h = HelperTable::new();
    h.register(7, "add5", add5);
    let prog = [
        mov(1, 1),
        mov(2, 2),
        mov(3, 3),
        mov(4, 4),
        mov(5, 5),
        I::Call(CallTarget::Helper(7)),
        mov(6, 100),
        alu(Width::W64, AluOp::Mov, 1, Operand::Reg(0)),
        I::Call(CallTarget::Local(3)),
        alu(Width::W64, AluOp::Add, 0, Operand::Reg(6)),
        I::Exit,
        // unreachable
        I::Exit,
        // f(r1): stores r10 on its own frame and returns r1 * 2 + (r10 diff check)
        mov(6, 0),
        I::Store {
            size: Size::DW,
            dst: 10,
            off: -8,
            src: Operand::Reg(1),
        },
        I::Load {
            size: Size::DW,
            sign_extend: false,
            dst: 0,
            src: 10,
            off: -8,
        },
        alu(Width::W64, AluOp::Lsh, 0, Operand::Imm(1)),
        I::Exit,
    ];
    let p = compile(&encode_program(&prog), &h).unwrap();
    assert_eq!(p.function_count(), 2);
    let mut stack = [0u8; STACK_SIZE];
    // SAFETY: the program only touches its stack.
    let r0 = unsafe { p.execute(std::ptr::null_mut(), &mut stack) }.unwrap();
    assert_eq!(r0, 130);
    // Frame 1 wrote at r10 - 8 = stack_base + STACK_SIZE - 512 - 8.
    let off = STACK_SIZE - 512 - 8;
    assert_eq!(
        u64::from_le_bytes(stack[off..off + 8].try_into().unwrap()),
        15
    );
}

#[test]
fn helpers_receive_only_their_declared_arguments() {
    // add5 sums all five arguments; declared with 2 it must see r3..r5 as 0, undeclared
    // (`register`) it sees all of them, and `standard_helpers` declares the verifier's counts.
    let prog = [
        mov(1, 1),
        mov(2, 2),
        mov(3, 30),
        mov(4, 400),
        mov(5, 5000),
        I::Call(CallTarget::Helper(7)),
        I::Exit,
    ];
    let mut all = HelperTable::new();
    all.register(7, "add5", add5);
    assert_eq!(run_with(&prog, &all, &mut []).unwrap(), 5433);
    for (declared, want) in [(0, 0), (2, 3), (3, 33), (5, 5433), (9, 5433)] {
        let mut h = HelperTable::new();
        h.register_with_args(7, "add5", add5, declared);
        assert_eq!(
            run_with(&prog, &h, &mut []).unwrap(),
            want,
            "{declared} args"
        );
    }
    let std = crate::helpers::standard_helpers();
    assert_eq!(std.arg_count(1), Some(2), "map_lookup_elem");
    assert_eq!(
        std.arg_count(6),
        Some(5),
        "trace_printk reads its variadic arguments"
    );
    assert_eq!(std.arg_count(14), Some(0), "get_current_pid_tgid");
}

#[test]
fn unbounded_recursion_is_an_error_not_a_crash() {
    // Function 1 (slot 2) calls itself.
    let prog = [
        I::Call(CallTarget::Local(1)),
        I::Exit,
        I::Call(CallTarget::Local(-1)),
        I::Exit,
    ];
    assert_eq!(
        run_with(&prog, &HelperTable::new(), &mut []),
        Err(ExecError::CallDepthExceeded { pc: 2 })
    );
}

#[test]
fn a_call_into_function_0_is_refused_not_compiled() {
    // Function 0 has the entry signature (r1, r2, fp, run); the verifier rejects such
    // recursion, and the JIT refuses it rather than call with the wrong signature.
    let called = [I::Call(CallTarget::Local(-1)), I::Exit];
    assert!(matches!(
        compile(&encode_program(&called), &HelperTable::new()),
        Err(JitError::EntryCalled)
    ));
    let taken = [
        I::LoadImm64 {
            dst: 1,
            kind: LddwKind::Func,
            imm: -1,
            next_imm: 0,
        },
        mov(0, 0),
        I::Exit,
    ];
    assert!(matches!(
        compile(&encode_program(&taken), &HelperTable::new()),
        Err(JitError::EntryCalled)
    ));
}

#[test]
fn bpf_loop_calls_the_callback() {
    // r0 = bpf_loop(10, cb, &counter on stack, 0); cb adds index to *ctx, stops at 5.
    let prog = [
        I::Store {
            size: Size::DW,
            dst: 10,
            off: -8,
            src: Operand::Imm(0),
        },
        mov(1, 10),
        I::LoadImm64 {
            dst: 2,
            kind: LddwKind::Func,
            imm: 9,
            next_imm: 0,
        },
        alu(Width::W64, AluOp::Mov, 3, Operand::Reg(10)),
        alu(Width::W64, AluOp::Add, 3, Operand::Imm(-8)),
        mov(4, 0),
        I::Call(CallTarget::Helper(181)),
        I::Load {
            size: Size::DW,
            sign_extend: false,
            dst: 1,
            src: 10,
            off: -8,
        },
        alu(Width::W64, AluOp::Lsh, 0, Operand::Imm(32)),
        alu(Width::W64, AluOp::Or, 0, Operand::Reg(1)),
        I::Exit,
        // cb(index, ctx)
        I::Load {
            size: Size::DW,
            sign_extend: false,
            dst: 3,
            src: 2,
            off: 0,
        },
        alu(Width::W64, AluOp::Add, 3, Operand::Reg(1)),
        I::Store {
            size: Size::DW,
            dst: 2,
            off: 0,
            src: Operand::Reg(3),
        },
        mov(0, 0),
        I::Jump {
            width: Width::W64,
            cond: JmpCond::Ne,
            dst: 1,
            src: Operand::Imm(5),
            off: 1,
        },
        mov(0, 1),
        I::Exit,
    ];
    // index 0..=5 summed = 15; 6 iterations.
    assert_eq!(run(&prog), (6 << 32) | 15);
}

#[test]
fn callx_only_reaches_program_functions() {
    let prog = |target: I| vec![target, I::Callx { reg: 2 }, I::Exit, mov(0, 42), I::Exit];
    let good = prog(I::LoadImm64 {
        dst: 2,
        kind: LddwKind::Func,
        imm: 3,
        next_imm: 0,
    });
    assert_eq!(run(&good), 42);
    // A helper id in the register (bpf_conformance's `callx`).
    let mut h = HelperTable::new();
    h.register(7, "add5", add5);
    let by_id = [
        mov(1, 40),
        mov(2, 7),
        mov(3, 2),
        mov(4, 0),
        mov(5, 0),
        I::Callx { reg: 2 },
        I::Exit,
    ];
    assert_eq!(run_with(&by_id, &h, &mut []), Ok(49));
    let bad = prog(lddw(2, 0x1234));
    assert_eq!(
        run_with(&bad, &HelperTable::new(), &mut []),
        Err(ExecError::InvalidCallxTarget { pc: 2 })
    );
}

#[test]
fn compile_errors_are_values() {
    let h = HelperTable::new();
    let e = |p: &[I]| compile(&encode_program(p), &h).unwrap_err();
    assert!(matches!(
        e(&[I::Call(CallTarget::Helper(9)), I::Exit]),
        JitError::UnknownHelper { pc: 0, id: 9 }
    ));
    assert!(matches!(
        e(&[mov(10, 1), I::Exit]),
        JitError::FramePointerWrite { pc: 0 }
    ));
    assert!(matches!(
        e(&[
            I::LoadImm64 {
                dst: 1,
                kind: LddwKind::MapIdx,
                imm: 0,
                next_imm: 0
            },
            I::Exit
        ]),
        JitError::UnsupportedLddw { pc: 0, .. }
    ));
    assert!(matches!(
        e(&[I::Call(CallTarget::Kfunc(3)), I::Exit]),
        JitError::Kfunc { .. }
    ));
}

#[test]
fn compiled_program_is_shareable_and_code_is_not_writable() {
    let p = Arc::new(compile(&encode_program(&[mov(0, 3), I::Exit]), &HelperTable::new()).unwrap());
    let perms = code_memory::protection_of(p.code_address()).unwrap();
    assert_eq!(perms, "r-xp");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let mut stack = [0u8; STACK_SIZE];
                // SAFETY: the program touches no memory.
                unsafe { p.execute(std::ptr::null_mut(), &mut stack) }.unwrap()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 3);
    }
    assert!(p
        .pc_for_address(p.code_address() + p.code_size() + 4096)
        .is_none());
}

#[test]
fn pc_map_stays_inside_each_function() {
    // f0: pc 0..3 calls f1 (pc 3..5).
    let prog = [
        mov(1, 7),
        I::Call(CallTarget::Local(1)),
        I::Exit,
        alu(Width::W64, AluOp::Mov, 0, Operand::Reg(1)),
        I::Exit,
    ];
    let p = compile(&encode_program(&prog), &HelperTable::new()).unwrap();
    let funcs: Vec<_> = p.function_ranges().collect();
    assert_eq!(funcs.len(), 2);
    // The main function, every run's entry point, first.
    assert_eq!(funcs[0].start, 0);
    assert!(funcs[0].end <= funcs[1].start && funcs[1].end == p.code_size());
    assert!(funcs.iter().all(|r| !r.is_empty()));
    let base = p.code_address();
    for (f, pcs) in funcs.iter().zip([0..3, 3..5]) {
        let mapped: Vec<usize> = f
            .clone()
            .filter_map(|o| p.pc_for_address(base + o))
            .collect();
        assert!(!mapped.is_empty());
        // Every address of a function maps to one of its own instructions: the prologue of
        // f1 does not belong to the last instruction of f0.
        assert!(
            mapped.iter().all(|pc| pcs.contains(pc)),
            "{mapped:?} vs {pcs:?}"
        );
    }
    // The instruction at the start of each function is mapped.
    assert!((0..3).any(|pc| funcs[0]
        .clone()
        .any(|o| p.pc_for_address(base + o) == Some(pc))));
    // Alignment padding between functions belongs to none.
    assert!((funcs[0].end..funcs[1].start).all(|o| p.pc_for_address(base + o).is_none()));
}

/// The inlined hash lookup answers a key at the head of its chain and a key absent from an
/// empty bucket without the helper, and calls it for a key further down a chain.
#[test]
fn inlined_hash_lookups_call_the_helper_only_beyond_the_first_probe() {
    use crate::helpers::map_ops::LOOKUP_CALLS;
    use crate::maps::{Map, MapMeta, MapSpec, MapType};
    let dir = tempfile::tempdir().unwrap();
    let spec = MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 64,
        flags: 0,
    };
    let map = Map::create(&dir.path().join("h"), &spec, &MapMeta::default()).unwrap();
    let Some(InlineMap::Hash(inline)) = map.inline_map() else {
        panic!("a 4-byte-key hash map is inlined");
    };
    let bucket = |k: u32| {
        crate::maps::key_hash::hash_key(inline.seed, &k.to_ne_bytes()) & (inline.nbuckets - 1)
    };
    // Two keys of one bucket (the second inserted is the chain's head), and a key of an
    // empty bucket.
    let first = 1u32;
    let second = (2u32..).find(|&k| bucket(k) == bucket(first)).unwrap();
    let absent = (2u32..)
        .find(|&k| bucket(k) != bucket(first) && k != second)
        .unwrap();
    map.update(&first.to_ne_bytes(), &[1; 8], 0).unwrap();
    map.update(&second.to_ne_bytes(), &[2; 8], 0).unwrap();
    // r0 = lookup(map, &ctx[0]) != 0
    let prog = [
        I::Load {
            size: gpubpf_isa::Size::W,
            dst: 2,
            src: 1,
            off: 0,
            sign_extend: false,
        },
        I::Store {
            size: gpubpf_isa::Size::W,
            dst: 10,
            off: -4,
            src: gpubpf_isa::Operand::Reg(2),
        },
        lddw(1, map.handle()),
        alu(Width::W64, AluOp::Mov, 2, Operand::Reg(10)),
        alu(Width::W64, AluOp::Add, 2, Operand::Imm(-4)),
        I::Call(CallTarget::Helper(1)),
        I::Exit,
    ];
    let helpers = crate::helpers::standard_helpers();
    let p =
        compile_with_maps(&encode_program(&prog), &helpers, &[InlineMap::Hash(inline)]).unwrap();
    let calls_for = |k: u32| {
        let before = LOOKUP_CALLS.with(std::cell::Cell::get);
        let mut ctx = u64::from(k).to_ne_bytes();
        let mut stack = [0u8; STACK_SIZE];
        // SAFETY: the program reads 4 bytes of ctx and its stack; the map stays mapped.
        let r0 = unsafe { p.execute(ctx.as_mut_ptr(), &mut stack) }.unwrap();
        (r0 != 0, LOOKUP_CALLS.with(std::cell::Cell::get) - before)
    };
    assert_eq!(calls_for(second), (true, 0), "the chain's head");
    assert_eq!(calls_for(absent), (false, 0), "an empty bucket");
    assert_eq!(calls_for(first), (true, 1), "the second entry of the chain");
}
