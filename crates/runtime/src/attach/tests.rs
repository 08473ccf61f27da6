//! Unit tests of the catalog's consistency and of the ctx ranges handed to the verifier.

use std::collections::HashSet;

use gpubpf_verifier::ctx::ReturnRule;

use super::abi::{ARGS_OFFSET, HEADER_SIZE, MAX_VERDICT, SLOT_SIZE};
use super::enrich::ENRICHMENTS;
use super::*;

fn field<'a>(p: &'a AttachPoint, name: &str) -> &'a CtxFieldInfo {
    p.field(name)
        .unwrap_or_else(|| panic!("{}: no field {name}", p.name))
}

#[test]
fn catalog_is_large_and_consistent() {
    let points = all();
    assert!(points.len() >= 400, "{} points", points.len());
    assert_eq!(
        points.iter().map(|p| p.variants.len()).sum::<usize>(),
        generated::VARIANT_COUNT
    );
    let mut ids = HashSet::new();
    let mut symbols = HashSet::new();
    for p in points {
        assert!(ids.insert(p.id), "duplicate id {}", p.id);
        assert!(!p.variants.is_empty(), "{}", p.name);
        for v in p.variants {
            assert!(symbols.insert(v.symbol), "symbol {} twice", v.symbol);
        }
        assert_eq!(p.current_variant().per_thread, PerThread::No, "{}", p.name);
        assert_eq!(by_id(p.id).map(|q| q.name), Some(p.name));
    }
    for name in [
        "cuMemAlloc",
        "cuMemAllocAsync",
        "cuMemCreate",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuGraphLaunch",
        "cuMemGetInfo",
    ] {
        assert_eq!(resolve(name).unwrap().name, name);
    }
}

#[test]
fn fields_are_sorted_non_overlapping_and_cover_the_ctx() {
    for p in all() {
        let mut end = 0;
        for f in p.fields() {
            assert_eq!(
                f.offset, end,
                "{}: gap or overlap before {}",
                p.name, f.name
            );
            end = f.offset + f.size;
        }
        assert_eq!(end, p.ctx_size, "{}", p.name);
        let layout = p.ctx_layout(Phase::Entry);
        assert_eq!(layout.size, p.ctx_size);
        assert_eq!(layout.fields.len(), p.fields().len());
        // Nothing but hdr.result is writable on exit unless enriched; nothing is writable on
        // entry unless enriched.
        if p.enrichment.is_none() {
            assert!(p.fields().iter().all(|f| !f.entry.write), "{}", p.name);
            assert!(
                p.fields()
                    .iter()
                    .all(|f| !f.exit.write || f.name == "hdr.result"),
                "{}",
                p.name
            );
        }
        // Out-values are never accessible on entry.
        for f in p.fields().iter().filter(|f| f.section == Section::Out) {
            assert_eq!((f.entry.read, f.entry.write), (false, false), "{}", f.name);
            assert!(f.exit.read);
        }
    }
}

#[test]
fn enrichment_names_exist() {
    for e in ENRICHMENTS {
        let p = resolve(e.name).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(p.name, e.name, "enrichment must use base names");
        for a in e.writable_args {
            assert!(
                p.params().iter().any(|q| q.name == *a),
                "{}: no argument {a}",
                e.name
            );
        }
        for o in e.writable_outs {
            assert!(
                p.params()
                    .iter()
                    .any(|q| q.name == *o && q.class == ParamClass::OutPointer),
                "{}: no out-pointer {o}",
                e.name
            );
        }
    }
    let names: HashSet<_> = ENRICHMENTS.iter().map(|e| e.name).collect();
    assert_eq!(names.len(), ENRICHMENTS.len(), "duplicate enrichment");
}

#[test]
fn alias_targets_exist() {
    let mut names = HashSet::new();
    for a in all_aliases() {
        assert!(names.insert(a.name), "duplicate alias {}", a.name);
        assert!(a.name.starts_with("cuda"), "{}", a.name);
        assert_eq!(resolve(a.target).unwrap().name, a.target, "{}", a.name);
        for also in a.also {
            assert_eq!(resolve(also).unwrap().name, *also, "{}", a.name);
        }
        assert!(resolve(a.name).unwrap().primary_aliases().any(|x| x == a));
    }
    for required in [
        "cudaMalloc",
        "cudaFree",
        "cudaMallocAsync",
        "cudaFreeAsync",
        "cudaMallocManaged",
        "cudaMallocPitch",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cudaMemset",
        "cudaMemsetAsync",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaGraphLaunch",
        "cudaMemGetInfo",
        "cudaStreamCreate",
        "cudaStreamCreateWithFlags",
        "cudaStreamCreateWithPriority",
    ] {
        assert!(names.contains(required), "missing alias {required}");
    }
}

#[test]
fn cu_mem_alloc_ranges() {
    let p = resolve("cuMemAlloc").unwrap();
    assert_eq!(
        p.params().iter().map(|q| q.name).collect::<Vec<_>>(),
        ["dptr", "bytesize"]
    );
    let dptr = field(p, "args.dptr");
    let size = field(p, "args.bytesize");
    let out = field(p, "out.dptr");
    assert_eq!((dptr.offset, size.offset, out.offset), (32, 40, 48));
    assert_eq!(p.ctx_size, 56);
    assert_eq!(p.params()[0].class, ParamClass::OutPointer);
    assert_eq!(p.params()[1].class, ParamClass::Scalar);

    let entry = p.program_context(Phase::Entry);
    assert_eq!(entry.description, "cuda/cuMemAlloc (entry)");
    assert_eq!(
        entry.ret,
        ReturnRule::Range {
            min: 0,
            max: MAX_VERDICT
        }
    );
    let f = |n: &str| entry.ctx.fields.iter().find(|f| f.name == n).unwrap();
    assert!(f("args.bytesize").readable && f("args.bytesize").writable);
    assert!(f("args.dptr").readable && !f("args.dptr").writable);
    assert!(!f("out.dptr").readable && !f("out.dptr").writable);
    assert!(f("hdr.result").readable && !f("hdr.result").writable);
    assert!(!f("hdr.api_id").writable);
    assert_eq!(entry.ctx.field_at(40).unwrap().name, "args.bytesize");
    assert_eq!(entry.ctx.field_at(56), None);

    let exit = p.program_context(Phase::Exit);
    assert_eq!(exit.description, "cudaret/cuMemAlloc (exit)");
    assert_eq!(exit.ret, ReturnRule::Range { min: 0, max: 0 });
    let f = |n: &str| exit.ctx.fields.iter().find(|f| f.name == n).unwrap();
    assert!(f("out.dptr").readable && !f("out.dptr").writable);
    assert!(f("args.bytesize").readable && !f("args.bytesize").writable);
    assert!(f("hdr.result").readable && f("hdr.result").writable);
}

#[test]
fn mem_get_info_out_values_are_writable_on_exit() {
    let p = resolve("cudaMemGetInfo").unwrap();
    assert_eq!(p.name, "cuMemGetInfo");
    for name in ["out.free", "out.total"] {
        let f = field(p, name);
        assert!(!f.entry.read && !f.entry.write);
        assert!(f.exit.read && f.exit.write);
        assert_eq!(f.cuda_type, Some("size_t"));
    }
    let p = resolve("cuDeviceTotalMem_v2").unwrap();
    assert!(field(p, "out.bytes").exit.write);
}

#[test]
fn launch_block_is_uniform() {
    for name in [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
    ] {
        let p = resolve(name).unwrap();
        let nargs = u32::try_from(p.params().len()).unwrap();
        let grid = field(p, "launch.grid_x");
        assert_eq!(grid.offset, ARGS_OFFSET + SLOT_SIZE * nargs, "{name}");
        let stream = field(p, "launch.stream");
        assert_eq!(stream.offset, grid.offset + 7 * SLOT_SIZE);
        assert!(grid.entry.read && !grid.entry.write && grid.exit.read);
        assert!(p.launch_source().is_some());
    }
    assert_eq!(
        resolve("cuLaunchKernelEx").unwrap().launch_source(),
        Some(LaunchSource::Config)
    );
    assert_eq!(resolve("cuLaunchKernel").unwrap().stream_param(), Some(8));
    assert_eq!(resolve("cuGraphLaunch").unwrap().stream_param(), Some(1));
}

#[test]
fn untyped_functions_get_raw_slots() {
    let p = resolve("cuFuncSetCacheConfig").unwrap();
    assert!(p.enrichment.is_none());
    assert_eq!(p.fields().len(), 8 + p.params().len());
    assert_eq!(p.ctx_size, HEADER_SIZE + SLOT_SIZE * 2);
    let p = resolve("cuCtxResetPersistingL2Cache").unwrap();
    assert!(p.params().is_empty());
    assert_eq!(p.ctx_size, HEADER_SIZE);
}

#[test]
fn legacy_variants_map_slots_by_name() {
    let p = resolve("cuCtxCreate").unwrap();
    let (i, v) = p.variant_by_symbol("cuCtxCreate_v2").unwrap();
    assert_eq!(v.params.len(), 3);
    assert!(!p.variant_has_current_abi(i));
    let slots = p.variant_slots(i).unwrap();
    let cur = p.params();
    assert_eq!(cur[slots[0].unwrap()].name, "pctx");
    assert_eq!(cur[slots[1].unwrap()].name, "flags");
    assert_eq!(cur[slots[2].unwrap()].name, "dev");
    let (i, _) = p.variant_by_symbol("cuCtxCreate_v4").unwrap();
    assert!(p.variant_has_current_abi(i));
}

#[test]
fn proc_address_requests_pick_the_right_symbol() {
    let cases = [
        ("cuMemAlloc", 3020, false, "cuMemAlloc_v2"),
        ("cuMemAlloc", 2000, false, "cuMemAlloc"),
        ("cuLaunchKernel", 4000, false, "cuLaunchKernel"),
        ("cuLaunchKernel", 7000, true, "cuLaunchKernel_ptsz"),
        ("cuCtxGetDevice", 13000, false, "cuCtxGetDevice_v2"),
        ("cuGetProcAddress", 12000, false, "cuGetProcAddress_v2"),
        ("cuMemcpyHtoD", 12000, true, "cuMemcpyHtoD_v2_ptds"),
    ];
    for (name, version, pt, want) in cases {
        let got = resolve(name)
            .unwrap()
            .variant_for_request(version, pt)
            .map(|v| v.symbol);
        assert_eq!(got, Some(want), "{name}@{version} pt={pt}");
    }
    assert_eq!(
        resolve("cuMemAllocAsync")
            .unwrap()
            .variant_for_request(10000, false),
        None
    );
}

#[test]
fn program_context_for_sections() {
    let pc = program_context_for_section("cudaret/cudaMalloc").unwrap();
    assert_eq!(pc.description, "cudaret/cuMemAlloc (exit)");
    assert_eq!(pc.ctx.size, 56);
    assert!(matches!(
        program_context_for_section("xdp/foo"),
        Err(AttachError::BadSection { .. })
    ));
    assert_eq!(Phase::Exit.to_string(), "exit");
    assert_eq!(Phase::Entry.ctx_value(), abi::PHASE_ENTRY);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Arbitrary names and sections never panic; what resolves is a known name.
        #[test]
        fn resolution_is_total(name in "[ -~]{0,40}") {
            match resolve(&name) {
                Ok(p) => prop_assert!(
                    p.name == name
                        || p.variants.iter().any(|v| v.symbol == name)
                        || p.aliases().iter().any(|a| a.name == name)
                ),
                Err(AttachError::UnknownName { suggestion, .. }) => {
                    if let Some(s) = suggestion {
                        prop_assert!(resolve(&s).is_ok());
                    }
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
            let _ = parse_section(&format!("cuda/{name}"));
            let _ = parse_section(&name);
        }

        /// Near-misses of real names get a suggestion.
        #[test]
        fn typos_get_suggestions(index in 0usize..516, cut in 0usize..64) {
            let points = all();
            let p = &points[index % points.len()];
            let mut typo: Vec<char> = p.name.chars().collect();
            let at = cut % typo.len();
            typo.remove(at);
            let typo: String = typo.into_iter().collect();
            match resolve(&typo) {
                Ok(_) => {} // removing a character can yield another real name
                Err(AttachError::UnknownName { suggestion, .. }) => {
                    prop_assert!(suggestion.is_some(), "no suggestion for {typo}");
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
}
