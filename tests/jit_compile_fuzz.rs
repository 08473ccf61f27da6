//! Compiling arbitrary decodable programs never panics: every input yields a compiled
//! program or an error value (fixed seed, bounded case count). The generator covers every
//! instruction form, backward jumps, self-loops, local calls, `lddw func`, `callx`,
//! `bpf_loop`, unknown helpers, kfuncs and writes to r10, so both outcomes are exercised.
//! Programs are not executed here (they may loop forever or touch arbitrary memory); the
//! differential tests run the terminating, in-bounds ones.

use gpubpf_isa::{
    encode_program, AluOp, AtomicOp, ByteSwap, CallTarget, Instruction as I, JmpCond, LddwKind,
    Operand, Size, Width,
};
use gpubpf_runtime::helper_table::HelperTable;
use gpubpf_runtime::jit::JitCompiler;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Any register (r10 included, so reading the frame pointer is covered).
fn reg() -> impl Strategy<Value = u8> {
    0u8..=10
}

/// A written register: r10 only rarely (a compile error).
fn dst() -> impl Strategy<Value = u8> {
    prop_oneof![20 => 0u8..10, 1 => Just(10u8)]
}

fn operand() -> impl Strategy<Value = Operand> {
    prop_oneof![
        reg().prop_map(Operand::Reg),
        any::<i32>().prop_map(Operand::Imm)
    ]
}

fn width() -> impl Strategy<Value = Width> {
    prop_oneof![Just(Width::W32), Just(Width::W64)]
}

fn size() -> impl Strategy<Value = Size> {
    prop::sample::select(Size::ALL.to_vec())
}

/// Any instruction, with small relative offsets so that many jumps and calls are valid.
fn insn() -> impl Strategy<Value = I> {
    let alu = prop::sample::select(AluOp::ALL.to_vec());
    let cond = prop::sample::select(JmpCond::ALL.to_vec());
    let atomic = prop::sample::select(AtomicOp::ALL.to_vec());
    let kind = prop_oneof![
        4 => Just(LddwKind::Imm),
        4 => Just(LddwKind::Func),
        1 => Just(LddwKind::MapIdx),
    ];
    prop_oneof![
        6 => (width(), alu, dst(), operand()).prop_map(|(width, op, dst, src)| I::Alu { width, op, dst, src }),
        1 => (width(), dst()).prop_map(|(width, dst)| I::Neg { width, dst }),
        1 => (dst(), reg(), prop::sample::select(vec![8u8, 16, 32]))
            .prop_map(|(dst, src, bits)| I::MovSx { width: Width::W64, dst, src, bits }),
        1 => (prop::sample::select(vec![ByteSwap::ToLe, ByteSwap::ToBe, ByteSwap::Swap]),
              prop::sample::select(vec![16u8, 32, 64]), dst())
            .prop_map(|(kind, bits, dst)| I::Endian { kind, bits, dst }),
        1 => (dst(), kind, -6i32..6, any::<i32>())
            .prop_map(|(dst, kind, imm, next_imm)| I::LoadImm64 { dst, kind, imm, next_imm }),
        2 => (size(), any::<bool>(), dst(), reg(), -64i16..0)
            .prop_map(|(size, s, dst, src, off)| I::Load { size, sign_extend: s && size != Size::DW, dst, src, off }),
        2 => (size(), reg(), -64i16..0, operand()).prop_map(|(size, dst, off, src)| I::Store { size, dst, off, src }),
        1 => (prop::sample::select(vec![Size::W, Size::DW]), atomic, any::<bool>(), reg(), dst(), -64i16..0)
            .prop_map(|(size, op, fetch, dst, src, off)| I::Atomic { size, op, fetch, dst, src, off }),
        2 => (-6i32..6, any::<bool>()).prop_map(|(off, long)| I::Ja { off, long }),
        3 => (width(), cond, reg(), operand(), -6i16..6)
            .prop_map(|(width, cond, dst, src, off)| I::Jump { width, cond, dst, src, off }),
        2 => prop_oneof![
            6 => (-6i32..6).prop_map(|o| I::Call(CallTarget::Local(o))),
            6 => prop::sample::select(vec![5i32, 181]).prop_map(|id| I::Call(CallTarget::Helper(id))),
            1 => Just(I::Call(CallTarget::Helper(1))),
            1 => Just(I::Call(CallTarget::Kfunc(1))),
        ],
        1 => reg().prop_map(|reg| I::Callx { reg }),
        2 => Just(I::Exit),
    ]
}

extern "C" fn five(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    5
}

#[test]
fn compiling_arbitrary_programs_never_panics() {
    let config = Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[3u8; 32]));
    let mut helpers = HelperTable::new();
    helpers.register(5, "five", five);
    let compiler = std::cell::RefCell::new(JitCompiler::new().expect("host ISA"));
    let outcomes = std::cell::Cell::new((0u32, 0u32));
    runner
        .run(&prop::collection::vec(insn(), 1..40), |mut prog| {
            prog.push(I::Exit);
            let slots = encode_program(&prog);
            let r = compiler.borrow_mut().compile(&slots, &helpers);
            if let Err(e) = &r {
                // Panics are caught and reported as this variant; it must never happen.
                assert!(
                    !matches!(e, gpubpf_runtime::jit::JitError::Internal { .. }),
                    "internal error for {prog:?}: {e}"
                );
            }
            let (ok, err) = outcomes.get();
            outcomes.set(if r.is_ok() {
                (ok + 1, err)
            } else {
                (ok, err + 1)
            });
            Ok(())
        })
        .unwrap();
    let (ok, err) = outcomes.get();
    eprintln!("compiled {ok}, rejected {err}");
    assert!(
        ok > 40 && err > 40,
        "both outcomes must be exercised ({ok} ok, {err} rejected)"
    );
}
