//! Fuzz target: raw instruction streams (with a small map list and ctx chosen by the first
//! byte) must never make the verifier panic, and an error must always render.
#![no_main]

use gpubpf_isa::slots_from_bytes;
use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let len = rest.len() / 8 * 8;
    let Ok(insns) = slots_from_bytes(&rest[..len]) else {
        return;
    };
    let maps = [
        MapInfo::new("h", MapKind::Hash, 4, 8, 16),
        MapInfo::new("a", MapKind::Array, 4, 16, 1),
        MapInfo::new("rb", MapKind::Ringbuf, 0, 0, 4096),
    ];
    let ctx = ProgramContext {
        description: "fuzz".into(),
        ctx: CtxLayout {
            size: 32,
            fields: vec![CtxField {
                name: "a".into(),
                offset: 0,
                size: 8,
                readable: true,
                writable: sel & 1 == 1,
            }],
        },
        ret: if sel & 2 == 0 {
            ReturnRule::Any
        } else {
            ReturnRule::Range { min: 0, max: 100 }
        },
    };
    let v = Verifier::new(&VerifierConfig {
        budget: 50_000,
        ..VerifierConfig::default()
    });
    let input = VerifyInput {
        insns: &insns,
        maps: &maps[..usize::from(sel >> 6).min(3)],
        ctx: &ctx,
        line_info: None,
    };
    if let Err(e) = v.verify(&input) {
        let _ = e.render();
    }
});
