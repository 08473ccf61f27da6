//! `policies/include/gpubpf_ctx.h` is generated from the attach-point catalog: this test
//! fails when the checked-in file is stale (`GPUBPF_BLESS=1` rewrites it), and compiles it
//! for BPF with every clang found (`clang`, `clang-19`), standalone and the way `gpubpf.h`
//! includes it.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpubpf_runtime::attach::header;

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(header::HEADER_PATH)
}

#[test]
fn checked_in_header_matches_catalog() {
    let want = header::generate();
    let path = header_path();
    if std::env::var_os("GPUBPF_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        eprintln!("blessed {}", path.display());
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "{} is stale (first difference at line {}); regenerate with \
             `GPUBPF_BLESS=1 cargo test --test catalog_header` and review the diff",
            path.display(),
            line + 1
        );
    }
}

const POLICY: &str = r#"
#ifndef SEC
#define SEC(name) __attribute__((section(name), used))
#endif
#define LIMIT (1ULL << 30)

SEC("cuda/cuMemAlloc")
int quota(struct gpubpf_cuMemAlloc_entry *ctx)
{
	if (ctx->args.bytesize > LIMIT)
		return GPUBPF_CUDA_ERROR_OUT_OF_MEMORY;
	ctx->args.bytesize = (ctx->args.bytesize + 4095) & ~4095ULL;
	return 0;
}

SEC("cudaret/cuMemGetInfo")
int fake_info(struct gpubpf_cuMemGetInfo_exit *ctx)
{
	if (ctx->hdr.flags & GPUBPF_CTX_F_OUT_VALID)
		ctx->out.total = LIMIT;
	return 0;
}

SEC("cuda/cuLaunchKernelEx")
int launches(struct gpubpf_cuLaunchKernelEx_entry *ctx)
{
	if (ctx->hdr.flags & GPUBPF_CTX_F_CAPTURING)
		return 0;
	return ctx->launch.grid_x * ctx->launch.block_x > (1ULL << 40) ?
		GPUBPF_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES : 0;
}

SEC("cuda/cuCtxSynchronize")
int raw(void *ctx)
{
	return GPUBPF_CTX_HDR(ctx)->api_id == GPUBPF_API_ID(cuCtxSynchronize) &&
	       GPUBPF_CTX_ARG(ctx, 0) == 0 ? 0 : 0;
}
"#;

/// What `gpubpf.h` does before including the generated header.
const LIKE_GPUBPF_H: &str = "#define __GPUBPF_H__\n\
typedef signed char __s8;\ntypedef unsigned char __u8;\ntypedef short __s16;\n\
typedef unsigned short __u16;\ntypedef int __s32;\ntypedef unsigned int __u32;\n\
typedef long long __s64;\ntypedef unsigned long long __u64;\n";

#[test]
fn header_compiles_for_bpf() {
    let dir = tempfile::tempdir().unwrap();
    let include = header_path();
    let include_dir = include.parent().unwrap();
    let mut compiled = 0;
    for clang in ["clang", "clang-19"] {
        if Command::new(clang).arg("--version").output().is_err() {
            eprintln!("skipped: `{clang}` not found");
            continue;
        }
        let mut variants = vec![("standalone", ""), ("like-gpubpf-h", LIKE_GPUBPF_H)];
        if include_dir.join("gpubpf.h").exists() {
            variants.push(("via-gpubpf-h", "#include \"gpubpf.h\"\n"));
        }
        for (name, prefix) in variants {
            let src = dir.path().join(format!("{name}.c"));
            std::fs::write(&src, format!("{prefix}#include \"gpubpf_ctx.h\"\n{POLICY}")).unwrap();
            let out = Command::new(clang)
                .args([
                    "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror", "-c",
                ])
                .arg("-I")
                .arg(include_dir)
                .arg(&src)
                .arg("-o")
                .arg(dir.path().join(format!("{name}-{clang}.o")))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{clang} ({name}) failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            compiled += 1;
        }
    }
    if compiled == 0 {
        eprintln!("skipped: no clang found, gpubpf_ctx.h not compiled");
    }
}
