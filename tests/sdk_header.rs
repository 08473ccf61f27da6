//! The SDK header `policies/include/gpubpf.h`: self-contained (no kernel or libc headers),
//! warning-free, every helper declared with its id, and each of its facilities producing
//! what the loader expects.

mod elf_support;

use elf_support::{clangs, compile_text};
use gpubpf_isa::{decode_program, CallTarget, Instruction, LddwKind};
use gpubpf_runtime::object::{DataKind, MapKind, MapOrigin, Object, Phase};
use gpubpf_verifier::helpers::HELPERS;

fn helper_calls(obj: &Object) -> Vec<i32> {
    let mut ids: Vec<i32> = obj
        .programs
        .iter()
        .flat_map(|p| decode_program(&p.insns).unwrap())
        .filter_map(|(_, i)| match i {
            Instruction::Call(CallTarget::Helper(id)) => Some(id),
            _ => None,
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

#[test]
fn every_helper_is_declared_with_its_id() {
    let mut body = String::new();
    for h in HELPERS {
        let args = vec!["0"; h.args.len()].join(", ");
        body.push_str(&format!("\t{}({args});\n", h.name));
    }
    let src = format!(
        "#include \"gpubpf.h\"\nSEC(\"cuda/cuMemAlloc\") int all(void *ctx)\n{{\n{body}\treturn 0;\n}}\n"
    );
    let want: Vec<i32> = HELPERS.iter().map(|h| h.id).collect();
    for clang in clangs() {
        let obj = Object::parse(&compile_text(clang, "all_helpers.bpf.c", &src)).unwrap();
        assert_eq!(helper_calls(&obj), want, "{clang}");
    }
}

#[test]
fn header_facilities() {
    let src = r#"
#include "gpubpf.h"

struct bpf_map_def SEC("maps") legacy = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 8,
	.map_flags = BPF_F_MMAPABLE,
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct { __u32 a; __u32 b; });
} lru SEC(".maps");

__u64 counter SEC(".data.counters") = 3;
const volatile __s32 offset = -5;
const volatile enum { MODE_OFF, MODE_ON = 7 } mode = MODE_ON;

static __always_inline __u32 pick(__u32 v)
{
	barrier_var(v);
	return likely(v < 8) ? v : 0;
}

GPUBPF_ENTRY(cuMemAlloc, typed)
{
	__u32 k = pick(ctx->hdr.pid);
	__u64 *v = bpf_map_lookup_elem(&legacy, &k);

	if (v)
		__sync_fetch_and_add(v, ctx->args.bytesize + offset + mode);
	counter++;
	bpf_printk("typed %u", k);
	return 0;
}

GPUBPF_EXIT(cuMemAlloc, typed_exit)
{
	__u64 key = ctx->out.dptr;

	bpf_map_delete_elem(&lru, &key);
	return CUDA_SUCCESS;
}

char LICENSE[] SEC("license") = "GPL";
"#;
    for clang in clangs() {
        let mut obj = Object::parse(&compile_text(clang, "facilities.bpf.c", src)).unwrap();
        let typed = obj.program("typed").unwrap();
        assert_eq!(
            (typed.section.as_str(), typed.phase),
            ("cuda/cuMemAlloc", Phase::Entry)
        );
        let exit = obj.program("typed_exit").unwrap();
        assert_eq!(
            (exit.section.as_str(), exit.phase),
            ("cudaret/cuMemAlloc", Phase::Exit)
        );

        let legacy = &obj.maps[obj.map_index("legacy").unwrap()];
        assert_eq!(legacy.origin, MapOrigin::Legacy);
        assert_eq!(
            (
                legacy.kind,
                legacy.key_size,
                legacy.value_size,
                legacy.max_entries,
                legacy.flags
            ),
            (MapKind::Array, 4, 8, 8, 1 << 10)
        );
        let lru = &obj.maps[obj.map_index("lru").unwrap()];
        assert_eq!(
            (lru.kind, lru.key_size, lru.value_size, lru.flags),
            (MapKind::LruHash, 8, 8, 1)
        );
        let data = &obj.maps[obj.map_index(".data.counters").unwrap()];
        assert_eq!(data.origin, MapOrigin::Global(DataKind::Data));
        assert_eq!(data.initial.as_deref(), Some(&3u64.to_le_bytes()[..]));

        // bpf_printk: helper 6 with its format string in read-only global data.
        assert!(helper_calls(&obj).contains(&6), "{clang}");
        let fmt = obj
            .globals
            .iter()
            .find(|g| g.name.contains("____fmt"))
            .unwrap();
        assert!(
            fmt.section.starts_with(".rodata"),
            "{clang}: {}",
            fmt.section
        );
        let typed = obj.program("typed").unwrap();
        let rodata_refs = decode_program(&typed.insns)
            .unwrap()
            .into_iter()
            .filter(|(_, i)| {
                matches!(
                    i,
                    Instruction::LoadImm64 {
                        kind: LddwKind::MapIdxValue,
                        ..
                    }
                )
            })
            .count();
        assert!(rodata_refs >= 3, "{clang}: offset, mode, fmt, counter");

        // Signed and enum globals parse against their BTF types.
        obj.set_global("offset", "-2147483648").unwrap();
        assert!(obj.set_global("offset", "2147483648").is_err());
        obj.set_global("mode", "MODE_OFF").unwrap();
        let m = obj.global("mode").unwrap().clone();
        assert_eq!(obj.global_value(&m).unwrap(), [0, 0, 0, 0]);
        assert_eq!(m.default_display(obj.btf.as_ref()), "MODE_ON");
        assert!(obj.global("counter").unwrap().settable);
    }
}

#[test]
fn libbpf_include_forms_resolve_to_the_sdk() {
    let src = "#include <linux/types.h>\n#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n\
               SEC(\"cuda/cuInit\") int p(void *ctx) { return bpf_get_prandom_u32() & 1; }\n\
               char LICENSE[] SEC(\"license\") = \"GPL\";\n";
    for clang in clangs() {
        let obj = Object::parse(&compile_text(clang, "compat.bpf.c", src)).unwrap();
        assert_eq!(helper_calls(&obj), [7], "{clang}");
        assert_eq!(obj.programs[0].attach, "cuInit");
    }
}

#[test]
fn unknown_attach_point_is_rejected_with_a_suggestion() {
    let src = "#include \"gpubpf.h\"\nSEC(\"cuda/cudaMaloc\") int p(void *ctx) { return 0; }\n";
    let bytes = compile_text(clangs()[0], "typo.bpf.c", src);
    let e = Object::parse(&bytes).unwrap_err().to_string();
    assert!(e.contains("section `cuda/cudaMaloc`"), "{e}");
    assert!(e.contains("did you mean `cudaMalloc`"), "{e}");
    // A runtime alias resolves to the driver function.
    let src = "#include \"gpubpf.h\"\nSEC(\"cudaret/cudaMalloc\") int p(void *ctx) { return 0; }\n";
    let obj = Object::parse(&compile_text(clangs()[0], "alias.bpf.c", src)).unwrap();
    assert_eq!(obj.programs[0].attach, "cuMemAlloc");
    assert_eq!(obj.programs[0].section, "cudaret/cudaMalloc");
}
