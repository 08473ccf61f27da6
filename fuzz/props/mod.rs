//! The fuzzed properties, one function per cargo-fuzz target: each takes the raw input and
//! panics only on a bug. Shared by the libFuzzer targets (`fuzz/fuzz_targets/*.rs`, nightly)
//! and by their stable twin `tests/fuzz_replay.rs`, which replays `fuzz/corpus/TARGET/` and
//! a seeded, bounded batch of mutations of it in CI.
#![allow(dead_code)]

use gpubpf_isa::{assemble, decode_program, disassemble, disassemble_asm, slots_from_bytes};
use gpubpf_runtime::attach;
use gpubpf_runtime::maps::{Map, MapMeta, MapSpec, MapType};
use gpubpf_runtime::object::btf::Btf;
use gpubpf_runtime::object::btf_ext::BtfExt;
use gpubpf_runtime::object::{render_value, Object};
use gpubpf_runtime::program::{line_infos, map_infos};
use gpubpf_runtime::registry::procstats::{self, ProcStats};
use gpubpf_runtime::registry::Registry;
use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};

/// A fuzzed property: panics only on a bug.
pub type Property = fn(&[u8]);

/// Every target, by corpus directory name.
pub const TARGETS: &[(&str, Property)] = &[
    ("object_parse", object_parse),
    ("btf", btf),
    ("asm", asm),
    ("decode", decode),
    ("verifier_insns", verifier_insns),
    ("verifier_object", verifier_object),
    ("registry_files", registry_files),
];

/// `Object::parse` and everything a caller does with a loaded object.
pub fn object_parse(data: &[u8]) {
    let Ok(mut obj) = Object::parse(data) else {
        return;
    };
    let btf = obj.btf.clone();
    for p in &obj.programs {
        let _ = p.line_coverage();
        let _ = p.line_at(p.insns.len().saturating_sub(1));
    }
    for m in &obj.maps {
        if let Some(b) = &btf {
            for t in m.key_type.iter().chain(m.value_type.iter()) {
                let _ = b.type_name(t.id);
                let _ = b.size_of(t.id);
            }
        }
    }
    for g in obj.globals.clone() {
        let _ = g.default_display(btf.as_ref());
        let _ = render_value(&g.default, g.btf_type, btf.as_ref());
        let _ = obj.set_global(&g.name, "1");
        let _ = obj.set_global(&g.name, "8GiB");
    }
}

/// Raw `.BTF` bytes (and, after the first `\0\xff\0\xff` marker, `.BTF.ext` bytes read
/// against them): parsing and every query on each type.
pub fn btf(data: &[u8]) {
    let marker = b"\0\xff\0\xff";
    let (main, ext) = match data.windows(4).position(|w| w == marker) {
        Some(i) => (&data[..i], Some(&data[i + 4..])),
        None => (data, None),
    };
    let Ok(b) = Btf::parse(main) else {
        return;
    };
    let n = u32::try_from(b.len()).unwrap_or(u32::MAX);
    for id in 0..=n.saturating_add(1).min(4096) {
        let _ = b.type_name(id);
        let _ = b.size_of(id);
        let _ = b.skip_mods(id);
        let _ = b.is_const_volatile(id);
        let _ = b.type_by_id(id);
    }
    if let Some(ext) = ext {
        let _ = BtfExt::parse(ext, &b);
    }
}

/// The assembler on any text; what it accepts disassembles and reassembles to the same
/// instructions.
pub fn asm(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(insns) = assemble(text) else {
        return;
    };
    if let Ok(back) = disassemble_asm(&insns) {
        let again = assemble(&back)
            .unwrap_or_else(|e| panic!("disassembly does not reassemble: {e}\n{back}"));
        assert_eq!(again, insns, "round trip changed the program:\n{back}");
    }
}

/// The decoder and disassembler on raw instruction bytes.
pub fn decode(data: &[u8]) {
    let len = data.len() / 8 * 8;
    let Ok(insns) = slots_from_bytes(&data[..len]) else {
        return;
    };
    let _ = decode_program(&insns);
    let _ = disassemble(&insns);
    let _ = disassemble_asm(&insns);
}

/// Raw instruction streams with a small map list and a ctx chosen by the first byte: the
/// verifier returns, and its errors render.
pub fn verifier_insns(data: &[u8]) {
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
}

/// A (mutated) policy object: every program it holds goes through the verifier with the
/// maps and line info the loader produced and the ctx of the attach point its section
/// names, as `gpubpf load` does.
pub fn verifier_object(data: &[u8]) {
    let Ok(obj) = Object::parse(data) else {
        return;
    };
    let maps = map_infos(&obj);
    let v = Verifier::new(&VerifierConfig {
        budget: 50_000,
        ..VerifierConfig::default()
    });
    for p in &obj.programs {
        let Ok(point) = attach::resolve(&p.attach) else {
            continue;
        };
        let ctx = point.program_context(p.phase);
        let lines = line_infos(p);
        let input = VerifyInput {
            insns: &p.insns,
            maps: &maps,
            ctx: &ctx,
            line_info: Some(&lines),
        };
        if let Err(e) = v.verify(&input) {
            let _ = e.render();
        }
    }
}

/// Registry files as another process of the user (or a crash) may leave them: a valid file
/// of the kind the first byte picks (control block, stats file, hash/array/LRU/ring-buffer
/// map), patched by the rest of the input (5 bytes a patch: offset LE u32, modulo the file
/// size, then the byte), is opened and read the way `gpubpf ps`, `gpubpf map dump` and the
/// shim read it. Header fields are patched more often than data (offsets below 4096 first).
pub fn registry_files(data: &[u8]) {
    let Some((&sel, patches)) = data.split_first() else {
        return;
    };
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let home = dir.path().join("reg");
    let Ok(reg) = Registry::open(&home) else {
        return;
    };
    let kinds = [
        MapType::Hash,
        MapType::Array,
        MapType::LruHash,
        MapType::RingBuf,
    ];
    let path = match sel % 6 {
        0 => home.join("control"),
        1 => {
            let Ok(s) = ProcStats::create(&home, 1, 42, 7, sel & 0x80 != 0) else {
                return;
            };
            s.update(|t| {
                t.point(303, false);
                t.program("quota", "quota_alloc", 303, false, false);
                t.failure("broken", "program `x` was rejected");
            });
            procstats::stats_path(&home, 1)
        }
        k => {
            let map_type = kinds[usize::from(k - 2)];
            let ring = map_type == MapType::RingBuf;
            let spec = MapSpec {
                map_type,
                key_size: if ring { 0 } else { 4 },
                value_size: if ring { 0 } else { 8 },
                max_entries: if ring { 4096 } else { 8 },
                flags: 0,
            };
            let p = home.join("maps/m");
            let Ok(m) = Map::create(&p, &spec, &MapMeta::default()) else {
                return;
            };
            if ring {
                let _ = m.ringbuf_output(b"hello");
            } else {
                for k in 0u32..3 {
                    let _ = m.update(&k.to_le_bytes(), &u64::from(k).to_le_bytes(), 0);
                }
            }
            p
        }
    };
    drop(reg);
    let Ok(mut bytes) = std::fs::read(&path) else {
        return;
    };
    for (i, p) in patches.chunks_exact(5).enumerate() {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        let limit = if i % 2 == 0 {
            bytes.len().min(4096)
        } else {
            bytes.len()
        };
        if limit > 0 {
            bytes[off % limit] = p[4];
        }
    }
    if std::fs::write(&path, &bytes).is_err() {
        return;
    }
    match sel % 6 {
        0 => {
            if let Ok(r) = Registry::open(&home) {
                let _ = r.generation();
                let _ = r.control().processes();
            }
        }
        1 => {
            if let Ok(s) = ProcStats::open(&path) {
                let v = s.read();
                let _ = format!("{v:?}");
            }
        }
        _ => {
            if let Ok(m) = Map::open(&path) {
                let _ = m.len();
                let _ = m.ringbuf_stats();
            }
        }
    }
}
