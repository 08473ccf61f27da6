use super::*;
use crate::insn::{AluOp, AtomicOp, Operand, Size, Width};

fn one(src: &str) -> Instruction {
    let p = assemble_instructions(src).expect("assembles");
    assert_eq!(p.len(), 1, "{src}");
    p[0]
}

fn err(src: &str) -> AsmError {
    assemble(src).expect_err(src)
}

#[test]
fn table_of_forms() {
    let cases: &[(&str, &[u8])] = &[
        ("mov %r0, 1", &[0xb7, 0x00, 0, 0, 1, 0, 0, 0]),
        ("mov32 %r1, %r2", &[0xbc, 0x21, 0, 0, 0, 0, 0, 0]),
        ("add32 %r0, -1", &[0x04, 0x00, 0, 0, 0xff, 0xff, 0xff, 0xff]),
        ("sdiv %r0, 3", &[0x37, 0x00, 1, 0, 3, 0, 0, 0]),
        ("smod32 %r0, %r1", &[0x9c, 0x10, 1, 0, 0, 0, 0, 0]),
        ("neg %r3", &[0x87, 0x03, 0, 0, 0, 0, 0, 0]),
        ("movsx1632 %r0, %r1", &[0xbc, 0x10, 16, 0, 0, 0, 0, 0]),
        ("movsx3264 %r0, %r1", &[0xbf, 0x10, 32, 0, 0, 0, 0, 0]),
        ("ldxdw %r0, [%r1+2]", &[0x79, 0x10, 2, 0, 0, 0, 0, 0]),
        ("ldxsb %r0, [%r1]", &[0x91, 0x10, 0, 0, 0, 0, 0, 0]),
        ("stxdw [%r10-8], %r0", &[0x7b, 0x0a, 0xf8, 0xff, 0, 0, 0, 0]),
        (
            "stb [%r1+0x10], 0x11",
            &[0x72, 0x01, 0x10, 0, 0x11, 0, 0, 0],
        ),
        ("be16 %r0", &[0xdc, 0x00, 0, 0, 16, 0, 0, 0]),
        ("le64 %r0", &[0xd4, 0x00, 0, 0, 64, 0, 0, 0]),
        ("bswap32 %r0", &[0xd7, 0x00, 0, 0, 32, 0, 0, 0]),
        ("swap16 %r0", &[0xd7, 0x00, 0, 0, 16, 0, 0, 0]),
        (
            "jeq %r1, 0x80000000, +1",
            &[0x15, 0x01, 1, 0, 0, 0, 0, 0x80],
        ),
        ("jne32 %r1, %r2, -2", &[0x5e, 0x21, 0xfe, 0xff, 0, 0, 0, 0]),
        ("ja +3", &[0x05, 0, 3, 0, 0, 0, 0, 0]),
        ("ja32 -1", &[0x06, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
        ("call 5", &[0x85, 0, 0, 0, 5, 0, 0, 0]),
        ("call local +2", &[0x85, 0x10, 0, 0, 2, 0, 0, 0]),
        ("call %r2", &[0x8d, 0x02, 0, 0, 0, 0, 0, 0]),
        (
            "lock add [%r10-8], %r1",
            &[0xdb, 0x1a, 0xf8, 0xff, 0, 0, 0, 0],
        ),
        (
            "lock fetch add32 [%r10-4], %r1",
            &[0xc3, 0x1a, 0xfc, 0xff, 1, 0, 0, 0],
        ),
        (
            "lock xchg [%r10-8], %r1",
            &[0xdb, 0x1a, 0xf8, 0xff, 0xe1, 0, 0, 0],
        ),
        (
            "lock cmpxchg32 [%r10-8], %r1",
            &[0xc3, 0x1a, 0xf8, 0xff, 0xf1, 0, 0, 0],
        ),
        ("exit", &[0x95, 0, 0, 0, 0, 0, 0, 0]),
    ];
    for (src, bytes) in cases {
        let got = crate::insn::slots_to_bytes(&assemble(src).expect(src));
        assert_eq!(&got[..], *bytes, "{src}");
    }
}

#[test]
fn lddw_splits_the_immediate() {
    let p = assemble("lddw %r0, 0x1122334455667788").expect("assembles");
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].imm, 0x55667788);
    assert_eq!(p[1].imm, 0x11223344);
    let p = assemble("lddw %r0, -1").expect("assembles");
    assert_eq!((p[0].imm, p[1].imm), (-1, -1));
}

#[test]
fn labels_resolve_forward_and_backward_counting_lddw_slots() {
    let p = assemble("top:\nlddw %r0, 1\njeq %r0, 1, done\nja top\ndone: exit").expect("ok");
    // slots: 0-1 lddw, 2 jeq, 3 ja, 4 exit
    assert_eq!(p[2].off, 1);
    assert_eq!(p[3].off, -4);
}

#[test]
fn exit_is_an_implicit_label_for_the_first_exit() {
    let p = assemble("jne %r0, %r1, exit\nmov %r0, 0\nexit\nexit").expect("ok");
    assert_eq!(p[0].off, 1);
}

#[test]
fn call_local_label() {
    let p = assemble("call local f\nexit\nf:\nmov %r0, 1\nexit").expect("ok");
    assert_eq!(p[0].imm, 1);
    assert_eq!(p[0].src, 1);
}

#[test]
fn comments_and_blank_lines() {
    let p = assemble("# hello\n\nmov %r0, 1 # trailing\n  exit  ").expect("ok");
    assert_eq!(p.len(), 2);
}

#[test]
fn decoded_forms() {
    assert_eq!(
        one("lock fetch xor [%r10-8], %r3"),
        Instruction::Atomic {
            size: Size::DW,
            op: AtomicOp::Xor,
            fetch: true,
            dst: 10,
            src: 3,
            off: -8
        }
    );
    assert_eq!(
        one("or32 %r1, 0xffffffff"),
        Instruction::Alu {
            width: Width::W32,
            op: AluOp::Or,
            dst: 1,
            src: Operand::Imm(-1)
        }
    );
}

#[test]
fn errors_carry_line_and_column() {
    let e = err("mov %r0, 1\n  or %r0, %r50");
    assert_eq!((e.line, e.column), (2, 11));
    assert!(matches!(e.kind, AsmErrorKind::InvalidRegister { .. }));
    let e = err("ldxq %r0, %r1");
    assert_eq!((e.line, e.column), (1, 1));
    assert!(matches!(e.kind, AsmErrorKind::UnknownMnemonic { .. }));
    assert!(e
        .to_string()
        .starts_with("line 1, column 1: unknown mnemonic"));
}

#[test]
fn rejections() {
    let kinds = [
        ("mov32 %r0, 2147483648", "range"),
        ("mov32 %r0, 0x100000000", "range"),
        ("ja NOT_A_LABEL\nexit", "label"),
        ("lock or [%r10-8]", "count"),
        ("lock", "count"),
        ("ldxb %r0, %r1", "mem"),
        ("ldxb %r0, [%r1+0x10000]", "offset"),
        ("lddw %r0", "count"),
        ("jeq %r0, 1, +40000", "offset"),
        ("lock nand [%r10-8], %r1", "op"),
        ("a:\na:\nexit", "dup"),
        ("mov %r0", "count"),
        ("mov %r0, 12abc", "number"),
        ("call bogus 1", "op"),
        ("ldxsdw %r0, [%r1]", "mnemonic"),
    ];
    for (src, what) in kinds {
        let e = err(src);
        let ok = match what {
            "range" => matches!(e.kind, AsmErrorKind::ImmediateOutOfRange { .. }),
            "label" => matches!(e.kind, AsmErrorKind::UndefinedLabel { .. }),
            "count" => matches!(e.kind, AsmErrorKind::OperandCount { .. }),
            "mem" => matches!(e.kind, AsmErrorKind::InvalidMemoryOperand { .. }),
            "offset" => matches!(e.kind, AsmErrorKind::OffsetOutOfRange { .. }),
            "op" => matches!(e.kind, AsmErrorKind::InvalidOperation { .. }),
            "dup" => matches!(e.kind, AsmErrorKind::DuplicateLabel { .. }),
            "number" => matches!(e.kind, AsmErrorKind::InvalidNumber { .. }),
            _ => matches!(e.kind, AsmErrorKind::UnknownMnemonic { .. }),
        };
        assert!(ok, "{src}: {e}");
    }
}

#[test]
fn label_out_of_range_for_short_jump() {
    let mut src = String::from("ja far\n");
    for _ in 0..40000 {
        src.push_str("mov %r0, 0\n");
    }
    src.push_str("far: exit\n");
    let e = err(&src);
    assert!(matches!(e.kind, AsmErrorKind::TargetOutOfRange { .. }));
    let long = src.replacen("ja far", "ja32 far", 1);
    assert!(assemble(&long).is_ok());
}
