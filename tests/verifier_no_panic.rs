//! No input makes the verifier panic: proptest over raw instruction streams (fixed seed,
//! bounded case count), both fully random slots and slots biased towards valid encodings.

use gpubpf_isa::{slots_from_bytes, Insn};
use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

fn ctx() -> ProgramContext {
    ProgramContext {
        description: "fuzz".into(),
        ctx: CtxLayout {
            size: 32,
            fields: vec![
                CtxField {
                    name: "a".into(),
                    offset: 0,
                    size: 8,
                    readable: true,
                    writable: false,
                },
                CtxField {
                    name: "b".into(),
                    offset: 8,
                    size: 8,
                    readable: true,
                    writable: true,
                },
            ],
        },
        ret: ReturnRule::Range { min: 0, max: 100 },
    }
}

fn maps() -> Vec<MapInfo> {
    vec![
        MapInfo::new("h", MapKind::Hash, 4, 8, 16),
        MapInfo::new("a", MapKind::Array, 4, 16, 1),
        MapInfo::new("rb", MapKind::Ringbuf, 0, 0, 4096),
    ]
}

/// Opcodes that decode (plus a few that do not), to reach deep into the verifier.
const OPCODES: &[u8] = &[
    0x07, 0x0f, 0x17, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f,
    0x87, 0x97, 0x9f, 0xa7, 0xaf, 0xb7, 0xbf, 0xc7, 0xcf, 0xd4, 0xdc, 0x04, 0x0c, 0x14, 0x1c, 0x24,
    0x34, 0x44, 0x54, 0x64, 0x74, 0x84, 0x94, 0xa4, 0xb4, 0xbc, 0xc4, 0x18, 0x61, 0x69, 0x71, 0x79,
    0x81, 0x89, 0x91, 0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3, 0xdb, 0x05, 0x06, 0x15,
    0x1d, 0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d, 0x55, 0x5d, 0x65, 0x6d, 0x75, 0x7d, 0xa5, 0xad, 0xb5,
    0xbd, 0xc5, 0xcd, 0xd5, 0xdd, 0x16, 0x1e, 0xa6, 0x85, 0x8d, 0x95, 0x00, 0xff,
];

fn biased_insn() -> impl Strategy<Value = Insn> {
    (
        prop::sample::select(OPCODES),
        0u8..11,
        prop_oneof![Just(0u8), 0u8..11, 0u8..16],
        prop_oneof![Just(0i16), -8i16..8, -520i16..520, any::<i16>()],
        prop_oneof![
            Just(0i32),
            -16i32..64,
            prop::sample::select(&[1, 2, 3, 5, 6, 7, 14, 16, 112, 130, 131, 132, 133, 181][..]),
            any::<i32>()
        ],
    )
        .prop_map(|(opc, dst, src, off, imm)| Insn::new(opc, dst, src, off, imm))
}

fn check(insns: &[Insn]) {
    let ctx = ctx();
    let maps = maps();
    let v = Verifier::new(&VerifierConfig {
        budget: 4_000,
        ..VerifierConfig::default()
    });
    let input = VerifyInput {
        insns,
        maps: &maps,
        ctx: &ctx,
        line_info: None,
    };
    if let Err(e) = v.verify(&input) {
        // Rendering must not panic either.
        let _ = e.render();
        let _ = e.diagnostic();
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    )
}

#[test]
fn random_bytes_never_panic() {
    runner(2000)
        .run(&prop::collection::vec(any::<u8>(), 0..400), |bytes| {
            let len = bytes.len() / 8 * 8;
            let insns = slots_from_bytes(&bytes[..len]).unwrap();
            check(&insns);
            Ok(())
        })
        .unwrap();
}

#[test]
fn biased_instruction_streams_never_panic() {
    runner(1500)
        .run(&prop::collection::vec(biased_insn(), 1..60), |mut insns| {
            // End with `exit` most of the time so that exploration gets going.
            insns.push(Insn::new(0x95, 0, 0, 0, 0));
            check(&insns);
            Ok(())
        })
        .unwrap();
}
