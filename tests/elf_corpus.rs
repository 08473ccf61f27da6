//! The loader never panics: crafted corrupt objects (tests/data/crafted, made by craft.py)
//! give the expected errors naming section and offset, and deterministic mutations (bit
//! flips, field overwrites, truncations) of real policy objects give `Ok` or `Err`, never a
//! panic — also in everything a caller does with a loaded object afterwards.

mod elf_support;
#[path = "common/rng.rs"]
mod rng;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use elf_support::{built_policies, clangs, compile, repo_root};
use gpubpf_runtime::object::{render_value, Object, ObjectError};
use rng::Rng;

fn crafted(name: &str) -> Vec<u8> {
    let p = repo_root().join("tests/data/crafted").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn crafted_objects_give_precise_errors() {
    // The pristine source of every crafted file loads.
    let obj = Object::parse(&crafted("min.o")).unwrap();
    assert_eq!(obj.programs[0].subprograms[0].name, "twice");

    let table: &[(&str, &str)] = &[
        ("truncated_section_table.o", "not a usable ELF file"),
        (
            "reloc_offset_out_of_bounds.o",
            "section `cuda/cuMemAlloc`, offset 65536: relocation lies outside the section",
        ),
        (
            "reloc_bad_symbol.o",
            "section `cuda/cuMemAlloc`, offset 32: relocation refers to symbol 65535",
        ),
        (
            "reloc_unsupported_type.o",
            "section `cuda/cuMemAlloc`, offset 32: unsupported relocation type 2 (R_BPF_64_ABS64)",
        ),
        (
            "reloc_bad_target_section.o",
            "relocation section `.relcuda/cuMemAlloc`: applies to section 200",
        ),
        ("symbol_bad_section.o", "symbol 18 (`counts`) points at section 100"),
        (
            "maps_without_btf.o",
            "section `.maps` defines maps but the object has no `.BTF` section",
        ),
        (
            "unknown_program_section.o",
            "unknown program section `kprb/cuMemAlloc`: accepted forms are `cuda/<api>`",
        ),
        (
            "overlapping_functions.o",
            "section `cuda/cuMemAlloc`: function `twice` at offset 0 (size 24) overlaps the next function",
        ),
        (
            "lddw_missing_second_slot.o",
            "section `.text`, offset 16: `lddw` is missing its second slot",
        ),
        ("btf_bad_magic.o", "section `.BTF`: bad magic 0x0000"),
        (
            "btf_ext_bad_string.o",
            "section `.BTF.ext`: offset 84: string offset 16777215 is outside",
        ),
        (
            "section_data_out_of_bounds.o",
            "section `.rodata`: offset 16777215 and size 8 lie outside the file",
        ),
        (
            "lddw_unrelocated_pseudo.o",
            "`lddw` with pseudo source 5 (MapIdx) has no relocation",
        ),
        (
            "call_outside_function.o",
            "section `cuda/cuMemAlloc`, offset 128: call to instruction 101 of `.text`, which starts no function",
        ),
    ];
    for (file, want) in table {
        let err = Object::parse(&crafted(file)).expect_err(file);
        let msg = err.to_string();
        assert!(msg.contains(want), "{file}: got `{msg}`, want `{want}`");
    }
    let n_files = std::fs::read_dir(repo_root().join("tests/data/crafted"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "o")
        })
        .count();
    assert_eq!(
        n_files,
        table.len() + 1,
        "every crafted file is in the table"
    );
}

#[test]
fn not_elf_and_wrong_machine() {
    assert!(matches!(Object::parse(b""), Err(ObjectError::Elf { .. })));
    assert!(matches!(
        Object::parse(b"\x7fELF garbage"),
        Err(ObjectError::Elf { .. })
    ));
    let mut d = crafted("min.o");
    d[0x12] = 62; // e_machine = x86-64
    assert!(matches!(
        Object::parse(&d),
        Err(ObjectError::NotBpf { machine: 62 })
    ));
    let mut d = crafted("min.o");
    d[0x10] = 2; // e_type = ET_EXEC
    assert!(matches!(
        Object::parse(&d),
        Err(ObjectError::NotRelocatable { e_type: 2 })
    ));
    let mut d = crafted("min.o");
    d[5] = 2; // big-endian
    assert!(Object::parse(&d)
        .unwrap_err()
        .to_string()
        .contains("little-endian"));
}

/// Byte ranges worth mutating: the ELF header, the section header table and the contents
/// of every section that is not DWARF (read straight from the ELF64 header).
fn interesting_ranges(d: &[u8]) -> Vec<(usize, usize)> {
    let rd = |o: usize, n: usize| -> u64 {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&d[o..o + n]);
        u64::from_le_bytes(b)
    };
    let shoff = rd(0x28, 8) as usize;
    let shnum = rd(0x3c, 2) as usize;
    let strndx = rd(0x3e, 2) as usize;
    let mut out = vec![(0, 64), (shoff, shoff + 64 * shnum)];
    let str_off = rd(shoff + 64 * strndx + 0x18, 8) as usize;
    for i in 1..shnum {
        let h = shoff + 64 * i;
        let name_off = str_off + rd(h, 4) as usize;
        let name_end = d[name_off..].iter().position(|&b| b == 0).unwrap() + name_off;
        let name = String::from_utf8_lossy(&d[name_off..name_end]);
        let (off, size) = (rd(h + 0x18, 8) as usize, rd(h + 0x20, 8) as usize);
        if name.contains("debug") || rd(h + 4, 4) == 8 {
            continue; // DWARF, NOBITS
        }
        if off + size <= d.len() && size > 0 {
            out.push((off, off + size));
        }
    }
    out
}

/// Everything a caller may do with a loaded object: must not panic either.
fn exercise(obj: &mut Object) {
    let btf = obj.btf.clone();
    for p in &obj.programs {
        let _ = p.line_coverage();
        let _ = p.line_at(p.insns.len().saturating_sub(1));
        let _ = gpubpf_isa::decode_program(&p.insns);
    }
    for m in &obj.maps {
        if let Some(b) = &btf {
            for t in m.key_type.iter().chain(m.value_type.iter()) {
                let _ = b.type_name(t.id);
                let _ = b.size_of(t.id);
            }
        }
    }
    let globals = obj.globals.clone();
    for g in &globals {
        let _ = g.default_display(btf.as_ref());
        let _ = render_value(&g.default, g.btf_type, btf.as_ref());
        let _ = obj.set_global(&g.name, "1");
        let _ = obj.set_global(&g.name, "0xffffffffffffffff");
    }
}

/// Parses `data` (and exercises the result) under `catch_unwind`; `Some(ok)` unless it
/// panicked.
fn survives(data: &[u8]) -> Option<bool> {
    catch_unwind(AssertUnwindSafe(|| match Object::parse(data) {
        Ok(mut obj) => {
            exercise(&mut obj);
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }))
    .ok()
}

fn mutate(seed: &[u8], rng: &mut Rng, ranges: &[(usize, usize)]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let (lo, hi) = if rng.index(4) == 0 {
        (0, d.len())
    } else {
        ranges[rng.index(ranges.len())]
    };
    let pick = |rng: &mut Rng| lo + rng.index(hi - lo);
    match rng.index(6) {
        0 | 1 => {
            for _ in 0..1 + rng.index(4) {
                let i = pick(rng);
                d[i] ^= 1 << rng.index(8);
            }
        }
        2 => {
            // Overwrite an aligned 32-bit field with a boundary value.
            let vals = [
                0u32,
                1,
                7,
                8,
                0x7fff_ffff,
                0x8000_0000,
                0xffff_ffff,
                0xffff,
                24,
                4096,
            ];
            let i = (pick(rng) & !3).min(d.len().saturating_sub(4));
            let v = vals[rng.index(vals.len())];
            d[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
        3 => {
            let i = pick(rng);
            d[i] = rng.next() as u8;
        }
        4 => d.truncate(pick(rng)),
        _ => {
            // Copy one range's bytes over another place (confuses offsets and tables).
            let (a, b) = ranges[rng.index(ranges.len())];
            let len = (b - a).min(64);
            let dst = pick(rng).min(d.len() - len);
            let src: Vec<u8> = d[a..a + len].to_vec();
            d[dst..dst + len].copy_from_slice(&src);
        }
    }
    d
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("min.o".to_string(), crafted("min.o"))];
    let clang = clangs()[0];
    let dir = built_policies(clang);
    for name in ["quota", "trace"] {
        let p: PathBuf = dir.join(format!("{name}.o"));
        out.push((format!("{name}.o"), std::fs::read(&p).unwrap()));
    }
    let src = repo_root().join("tests/data/libbpf/exec_tracker.bpf.c");
    out.push(("exec_tracker.o".into(), compile(clang, &src, &[])));
    out
}

/// Mutations per seed object (4 seeds), bounded so the test stays in seconds;
/// `GPUBPF_CORPUS_MUTATIONS` raises it for a longer local run.
fn mutations() -> usize {
    std::env::var("GPUBPF_CORPUS_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

#[test]
fn mutated_objects_never_panic() {
    let mut rng = Rng(0x6770_7562_7066_0001);
    let mut panics = Vec::new();
    let n = mutations();
    for (name, seed) in seeds() {
        let ranges = interesting_ranges(&seed);
        let (mut ok, mut err) = (0usize, 0usize);
        // Every truncation at a section boundary, then random mutations.
        let mut cuts: Vec<usize> = ranges
            .iter()
            .flat_map(|&(a, b)| [a, b, a + 1, b - 1])
            .collect();
        cuts.retain(|&c| c < seed.len());
        for c in cuts {
            match survives(&seed[..c]) {
                Some(true) => ok += 1,
                Some(false) => err += 1,
                None => panics.push(format!("{name} truncated to {c}")),
            }
        }
        for i in 0..n {
            let m = mutate(&seed, &mut rng, &ranges);
            match survives(&m) {
                Some(true) => ok += 1,
                Some(false) => err += 1,
                None => {
                    let path = elf_support::scratch("corpus-panics").join(format!("{name}-{i}.o"));
                    std::fs::write(&path, &m).unwrap();
                    panics.push(format!("{name} mutation {i} (saved to {})", path.display()));
                }
            }
        }
        eprintln!("{name}: {ok} loaded, {err} rejected");
        // The mutations reach the loader's checks rather than all being no-ops or all
        // failing at the ELF header.
        assert!(err > n / 20, "{name}: only {err} rejections");
        assert!(ok > n / 20, "{name}: only {ok} loads");
    }
    assert!(
        panics.is_empty(),
        "the loader panicked on:\n{}",
        panics.join("\n")
    );
}
