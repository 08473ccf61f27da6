//! ISA round trips over the bpf_conformance programs, and decode-error tests.
//!
//! - every conformance program: asm → bytes → decode → disassemble (assembler syntax) →
//!   asm gives identical bytes, and the bpftool-style listing has one line per instruction;
//! - a `-- raw` section, when a test has both, equals the assembled `-- asm`;
//! - every reserved-field violation is a decode error naming the instruction index.

mod common;

use common::conformance_data::{self, ConformanceTest};
use gpubpf_isa::{
    assemble, decode_program, disasm, slots_from_bytes, slots_to_bytes, DecodeError, Insn,
};

fn suite() -> Option<Vec<ConformanceTest>> {
    let Some(dir) = conformance_data::conformance_dir() else {
        eprintln!("skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)");
        return None;
    };
    Some(conformance_data::load_dir(&dir.join("tests")).expect("conformance tests parse"))
}

#[test]
fn every_conformance_program_round_trips_through_the_disassembler() {
    let Some(tests) = suite() else { return };
    let mut checked = 0;
    for t in &tests {
        let slots = t.program().unwrap_or_else(|e| panic!("{e:#}"));
        let bytes = slots_to_bytes(&slots);
        let reparsed = slots_from_bytes(&bytes).expect("whole slots");
        let decoded = decode_program(&reparsed).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        let text = disasm::disassemble_asm(&reparsed).expect("decodes");
        let again = assemble(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", t.name));
        assert_eq!(slots_to_bytes(&again), bytes, "{}:\n{text}", t.name);
        let listing = disasm::disassemble(&reparsed).expect("decodes");
        assert_eq!(listing.lines().count(), decoded.len(), "{}", t.name);
        if let (Some(raw), Some(_)) = (&t.raw, &t.asm) {
            assert_eq!(
                raw, &bytes,
                "{}: `-- raw` differs from assembled `-- asm`",
                t.name
            );
        }
        checked += 1;
    }
    println!("isa round trip: {checked}/{} programs", tests.len());
    assert_eq!(checked, tests.len());
}

/// A two-slot program: `insn` followed by `exit`.
fn with_exit(bytes: [u8; 8]) -> Vec<Insn> {
    vec![
        Insn::from_bytes(bytes),
        Insn::from_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]),
    ]
}

/// Prefix of `n` valid instructions so that the faulty one has index `n`.
fn at_index(n: usize, bad: [u8; 8]) -> Vec<Insn> {
    let mut p: Vec<Insn> = (0..n)
        .map(|_| Insn::from_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]))
        .collect();
    p.extend(with_exit(bad));
    p
}

fn pc_of(e: &DecodeError) -> Option<usize> {
    match *e {
        DecodeError::TrailingBytes { .. } => None,
        DecodeError::UnknownOpcode { pc, .. }
        | DecodeError::InvalidRegister { pc, .. }
        | DecodeError::NonZeroField { pc, .. }
        | DecodeError::InvalidField { pc, .. }
        | DecodeError::TruncatedLddw { pc }
        | DecodeError::BadLddwSecondSlot { pc }
        | DecodeError::LegacyPacketAccess { pc } => Some(pc),
    }
}

#[test]
fn reserved_field_violations_name_the_instruction_index() {
    // (description, bytes): each violates one reserved field (RFC 9669 §4/§5).
    let cases: &[(&str, [u8; 8])] = &[
        ("add64 imm with offset", [0x07, 0x00, 1, 0, 1, 0, 0, 0]),
        ("add64 imm with src", [0x07, 0x10, 0, 0, 1, 0, 0, 0]),
        ("add64 reg with imm", [0x0f, 0x00, 0, 0, 1, 0, 0, 0]),
        ("add32 reg with offset", [0x0c, 0x00, 1, 0, 0, 0, 0, 0]),
        ("mov64 imm with offset", [0xb7, 0x00, 1, 0, 1, 0, 0, 0]),
        ("mov64 reg with imm", [0xbf, 0x00, 0, 0, 1, 0, 0, 0]),
        ("movsx with bad width", [0xbf, 0x10, 7, 0, 0, 0, 0, 0]),
        ("movsx32 with 32 bits", [0xbc, 0x10, 32, 0, 0, 0, 0, 0]),
        ("div with offset 2", [0x37, 0x00, 2, 0, 1, 0, 0, 0]),
        ("neg with imm", [0x87, 0x00, 0, 0, 1, 0, 0, 0]),
        ("neg with src", [0x84, 0x10, 0, 0, 0, 0, 0, 0]),
        ("neg reg form", [0x8f, 0x00, 0, 0, 0, 0, 0, 0]),
        ("be16 with offset", [0xdc, 0x00, 1, 0, 16, 0, 0, 0]),
        ("le with width 8", [0xd4, 0x00, 0, 0, 8, 0, 0, 0]),
        ("bswap with src", [0xd7, 0x10, 0, 0, 16, 0, 0, 0]),
        ("alu64 end to-be", [0xdf, 0x00, 0, 0, 16, 0, 0, 0]),
        ("ja with imm", [0x05, 0x00, 0, 0, 1, 0, 0, 0]),
        ("ja with dst", [0x05, 0x01, 0, 0, 0, 0, 0, 0]),
        ("ja32 with offset", [0x06, 0x00, 1, 0, 0, 0, 0, 0]),
        ("jeq imm with src", [0x15, 0x10, 0, 0, 0, 0, 0, 0]),
        ("jeq reg with imm", [0x1d, 0x00, 0, 0, 1, 0, 0, 0]),
        ("call with dst", [0x85, 0x01, 0, 0, 0, 0, 0, 0]),
        ("call with offset", [0x85, 0x00, 1, 0, 0, 0, 0, 0]),
        ("call with src 3", [0x85, 0x30, 0, 0, 0, 0, 0, 0]),
        ("callx with imm", [0x8d, 0x02, 0, 0, 1, 0, 0, 0]),
        ("exit with dst", [0x95, 0x01, 0, 0, 0, 0, 0, 0]),
        ("exit with imm", [0x95, 0x00, 0, 0, 1, 0, 0, 0]),
        ("exit32", [0x96, 0x00, 0, 0, 0, 0, 0, 0]),
        ("ldxdw with imm", [0x79, 0xa0, 0xf8, 0xff, 1, 0, 0, 0]),
        ("ldxsdw", [0x99, 0x10, 0, 0, 0, 0, 0, 0]),
        ("stw with src", [0x62, 0x1a, 0xfc, 0xff, 0, 0, 0, 0]),
        ("stxdw with imm", [0x7b, 0x0a, 0xf8, 0xff, 1, 0, 0, 0]),
        (
            "atomic with bad op",
            [0xdb, 0x1a, 0xf8, 0xff, 0x02, 0, 0, 0],
        ),
        ("atomic byte size", [0xd3, 0x1a, 0xf8, 0xff, 0x00, 0, 0, 0]),
        ("register r11", [0xb7, 0x0b, 0, 0, 0, 0, 0, 0]),
        ("src register r12", [0xbf, 0xc0, 0, 0, 0, 0, 0, 0]),
        ("legacy ld abs", [0x20, 0x00, 0, 0, 0, 0, 0, 0]),
        ("unknown class ld", [0x08, 0x00, 0, 0, 0, 0, 0, 0]),
        ("lddw with offset", [0x18, 0x00, 1, 0, 0, 0, 0, 0]),
        ("lddw bad pseudo src", [0x18, 0x70, 0, 0, 0, 0, 0, 0]),
    ];
    for (n, (what, bytes)) in cases.iter().enumerate() {
        let index = n % 5;
        let p = at_index(index, *bytes);
        let e = decode_program(&p).expect_err(what);
        assert_eq!(pc_of(&e), Some(index), "{what}: {e}");
        assert!(
            e.to_string().starts_with(&format!("instruction {index}:")),
            "{what}: {e}"
        );
    }
}

#[test]
fn lddw_second_slot_must_be_clean_and_present() {
    let lddw = Insn::from_bytes([0x18, 0x00, 0, 0, 1, 0, 0, 0]);
    let p = vec![Insn::from_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]), lddw];
    assert_eq!(
        decode_program(&p),
        Err(DecodeError::TruncatedLddw { pc: 1 })
    );
    let bad_second = vec![lddw, Insn::from_bytes([0x00, 0x01, 0, 0, 0, 0, 0, 0])];
    assert_eq!(
        decode_program(&bad_second),
        Err(DecodeError::BadLddwSecondSlot { pc: 0 })
    );
    // Only constants and map-value forms may use the second slot's immediate.
    let map_fd = vec![
        Insn::from_bytes([0x18, 0x10, 0, 0, 1, 0, 0, 0]),
        Insn::from_bytes([0, 0, 0, 0, 5, 0, 0, 0]),
    ];
    assert!(matches!(
        decode_program(&map_fd),
        Err(DecodeError::NonZeroField { pc: 0, .. })
    ));
    assert!(matches!(
        slots_from_bytes(&[0x95, 0, 0]),
        Err(DecodeError::TrailingBytes { len: 3 })
    ));
}

/// Every decodable encoding over a grid of field values (all 256 opcodes × registers ×
/// offsets × immediates) survives decode → disassemble (assembler syntax) → assemble
/// unchanged, and has a bpftool-style line.
#[test]
fn every_decodable_encoding_round_trips_through_text() {
    let regs = [0x00u8, 0x1a, 0xa1, 0x23, 0xb0, 0x0b];
    let offs: [i16; 8] = [0, 1, -1, 8, 16, 32, i16::MIN, i16::MAX];
    let imms: [i32; 12] = [
        0,
        1,
        -1,
        16,
        32,
        64,
        0x40,
        0xe1,
        0xf1,
        0xa1,
        i32::MIN,
        i32::MAX,
    ];
    let mut decodable = 0usize;
    for opc in 0..=255u8 {
        for &r in &regs {
            for &off in &offs {
                for (&imm, tail) in imms.iter().flat_map(|i| [(i, 0), (i, -7)]) {
                    let first = Insn::new(opc, r & 0x0f, r >> 4, off, imm);
                    let p = [first, Insn::new(0, 0, 0, 0, tail)];
                    let Ok(ins) = gpubpf_isa::Instruction::decode(&p, 0) else {
                        continue;
                    };
                    if ins.slots() == 1 && tail != 0 {
                        continue; // already seen with the other tail
                    }
                    decodable += 1;
                    let slots = &p[..ins.slots()];
                    let text = disasm::format_asm(&ins);
                    let again = assemble(&text).unwrap_or_else(|e| panic!("`{text}`: {e}"));
                    assert_eq!(again, slots, "`{text}` from {first:?}");
                    assert!(!disasm::format_instruction(&ins).is_empty());
                }
            }
        }
    }
    assert!(decodable > 4_000, "only {decodable} decodable encodings");
}
