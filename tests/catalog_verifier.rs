//! The catalog's `ProgramContext`s in the real verifier: policies written against the typed
//! structs of `gpubpf_ctx.h` are compiled with clang, parsed by the object loader and verified
//! against `attach::parse_section(section)` → `program_context(phase)`. The quota policy must
//! verify; writes to read-only fields, out-value access on entry and reads past the ctx must
//! be rejected with an error naming the field. Skipped (with a message) when no clang exists.

use std::path::Path;
use std::process::Command;

use gpubpf_runtime::attach;
use gpubpf_runtime::object::Object;
use gpubpf_runtime::program::{line_infos, map_infos};
use gpubpf_verifier::{VerifierError, VerifyInput};

fn clang() -> Option<&'static str> {
    ["clang", "clang-19"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
}

fn compile(clang: &str, dir: &Path, name: &str, src: &str) -> Object {
    let c = dir.join(format!("{name}.bpf.c"));
    let o = dir.join(format!("{name}.o"));
    std::fs::write(&c, src).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/include");
    let out = Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-c", "-I"])
        .arg(&include)
        .arg(&c)
        .arg("-o")
        .arg(&o)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Object::parse(&std::fs::read(&o).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Verifies every program of `obj` against the catalog's context for its section.
fn verify(obj: &Object) -> Vec<(String, Result<(), Box<VerifierError>>)> {
    let maps = map_infos(obj);
    obj.programs
        .iter()
        .map(|p| {
            let pc = attach::program_context_for_section(&p.section)
                .unwrap_or_else(|e| panic!("{}: {e}", p.section));
            let lines = line_infos(p);
            let r = gpubpf_verifier::verify(&VerifyInput {
                insns: &p.insns,
                maps: &maps,
                ctx: &pc,
                line_info: Some(&lines),
            });
            (p.name.clone(), r.map(|_| ()))
        })
        .collect()
}

const QUOTA: &str = r#"
#include "gpubpf.h"

#define LIMIT (8ULL << 30)

__u64 allocated;

SEC("cuda/cudaMalloc")
int quota(struct gpubpf_cuMemAlloc_entry *ctx)
{
	__u64 size = ctx->args.bytesize;

	if (ctx->hdr.flags & GPUBPF_CTX_F_CAPTURING)
		return 0;
	if (allocated + size > LIMIT)
		return GPUBPF_CUDA_ERROR_OUT_OF_MEMORY;
	ctx->args.bytesize = (size + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
	__sync_fetch_and_add(&allocated, size);
	return 0;
}

SEC("cudaret/cuMemAlloc_v2")
int account(struct gpubpf_cuMemAlloc_exit *ctx)
{
	if (ctx->hdr.result != GPUBPF_CUDA_SUCCESS)
		__sync_fetch_and_add(&allocated, -ctx->args.bytesize);
	return 0;
}

SEC("cudaret/cuMemGetInfo")
int report(struct gpubpf_cuMemGetInfo_exit *ctx)
{
	if ((ctx->hdr.flags & GPUBPF_CTX_F_OUT_VALID) && ctx->out.total > LIMIT) {
		ctx->out.total = LIMIT;
		ctx->out.free = LIMIT > allocated ? LIMIT - allocated : 0;
	}
	return 0;
}

SEC("cuda/cuLaunchKernelEx")
int launches(struct gpubpf_cuLaunchKernelEx_entry *ctx)
{
	return ctx->launch.grid_x > 1000000 ? GPUBPF_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES : 0;
}

char LICENSE[] SEC("license") = "GPL";
"#;

#[test]
fn quota_policy_verifies_against_the_typed_ctx() {
    let Some(clang) = clang() else {
        eprintln!("skipped: no clang");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let obj = compile(clang, dir.path(), "quota", QUOTA);
    assert_eq!(obj.programs.len(), 4);
    for (name, r) in verify(&obj) {
        if let Err(e) = r {
            panic!("{name} rejected: {e}");
        }
    }
}

/// The verifier reports every ctx field a program reads (the shim fills `hdr.device`, a
/// driver call, only for chains where some program reads it).
#[test]
fn the_ctx_fields_a_program_reads_are_reported() {
    let Some(clang) = clang() else {
        eprintln!("skipped: no clang");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "{QUOTA}\nSEC(\"cuda/cuMemAlloc\")\nint by_device(struct gpubpf_cuMemAlloc_entry *ctx)\n{{\n\
         \treturn ctx->hdr.device == 3 ? GPUBPF_CUDA_ERROR_OUT_OF_MEMORY : 0;\n}}\n"
    );
    let obj = compile(clang, dir.path(), "reads", &src);
    let maps = map_infos(&obj);
    let alloc = attach::resolve("cuMemAlloc").unwrap();
    let off = |name: &str| alloc.field(name).unwrap().offset;
    let read = |prog: &str| {
        let p = obj.programs.iter().find(|p| p.name == prog).unwrap();
        let pc = attach::program_context_for_section(&p.section).unwrap();
        gpubpf_verifier::verify(&VerifyInput {
            insns: &p.insns,
            maps: &maps,
            ctx: &pc,
            line_info: None,
        })
        .unwrap_or_else(|e| panic!("{prog}: {e}"))
        .ctx_fields_read
    };
    let quota = read("quota");
    assert!(quota.contains(&off("args.bytesize")), "{quota:?}");
    assert!(quota.contains(&off("hdr.flags")), "{quota:?}");
    assert!(!quota.contains(&off("hdr.device")), "{quota:?}");
    assert_eq!(read("by_device"), [off("hdr.device")]);
}

#[test]
fn bad_ctx_accesses_are_rejected_naming_the_field() {
    let Some(clang) = clang() else {
        eprintln!("skipped: no clang");
        return;
    };
    let cases = [
        (
            "cuda/cuMemAlloc",
            "ctx->args.dptr = 0; return 0;",
            "args.dptr",
        ),
        (
            "cuda/cuMemAlloc",
            "((struct gpubpf_cuMemAlloc_exit *)ctx)->out.dptr = 1; return 0;",
            "out.dptr",
        ),
        (
            "cuda/cuMemAlloc",
            "return ((struct gpubpf_cuMemAlloc_exit *)ctx)->out.dptr ? 2 : 0;",
            "out.dptr",
        ),
        (
            "cuda/cuMemAlloc",
            "ctx->hdr.result = 2; return 0;",
            "hdr.result",
        ),
        (
            "cuda/cuMemAlloc",
            "ctx->hdr.api_id = 1; return 0;",
            "hdr.api_id",
        ),
        (
            "cudaret/cuMemAlloc",
            "((struct gpubpf_cuMemAlloc_exit *)ctx)->out.dptr = 1; return 0;",
            "out.dptr",
        ),
        (
            "cudaret/cuMemAlloc",
            "ctx->args.bytesize = 1; return 0;",
            "args.bytesize",
        ),
        (
            "cuda/cuMemAlloc",
            "return *(volatile __u64 *)((char *)ctx + 56) ? 1 : 0;",
            "outside the ctx",
        ),
        ("cuda/cuMemAlloc", "return 1000;", ""),
        ("cudaret/cuMemAlloc", "return 2;", ""),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (section, body, needle)) in cases.iter().enumerate() {
        let src = format!(
            "#include \"gpubpf.h\"\nSEC(\"{section}\")\n\
             int bad(struct gpubpf_cuMemAlloc_entry *ctx) {{ {body} }}\n\
             char LICENSE[] SEC(\"license\") = \"GPL\";\n"
        );
        let obj = compile(clang, dir.path(), &format!("bad{i}"), &src);
        let (_, r) = verify(&obj).pop().unwrap();
        let err = r
            .err()
            .unwrap_or_else(|| panic!("{section}: `{body}` was accepted"));
        let msg = err.to_string();
        eprintln!("{section}: `{body}`: {msg}");
        assert!(msg.contains(needle), "{section}: `{body}`: {msg}");
    }
}
