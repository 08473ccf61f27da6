//! Policies written against the typed ctx structs of `gpubpf_ctx.h`, through the CLI:
//! `gpubpf build` must compile them; `gpubpf verify` must accept the quota policy and reject
//! writes to read-only fields, out-value writes on entry and reads past the ctx, naming the
//! field. Runs `target/debug/gpubpf` (build it with `cargo build -p gpubpf-loader-cli`); the
//! verify half prints `skipped: …` while the binary has no `verify` command yet.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gpubpf() -> Option<PathBuf> {
    Some(common::cli::gpubpf())
}

const QUOTA: &str = r#"
#include "gpubpf.h"

#define LIMIT (8ULL << 30)

__u64 allocated;

SEC("cuda/cudaMalloc")
int quota(struct gpubpf_cuMemAlloc_entry *ctx)
{
	__u64 size = ctx->args.bytesize;

	if (allocated + size > LIMIT)
		return GPUBPF_CUDA_ERROR_OUT_OF_MEMORY;
	/* round up to 2 MiB pages: bytesize is writable on entry */
	ctx->args.bytesize = (size + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
	__sync_fetch_and_add(&allocated, size);
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

char LICENSE[] SEC("license") = "GPL";
"#;

/// (name, body of an entry program on cuMemAlloc, field the rejection must name)
const BAD: &[(&str, &str, &str)] = &[
    (
        "write-read-only-arg",
        "ctx->args.dptr = 0; return 0;",
        "args.dptr",
    ),
    (
        "write-out-on-entry",
        "((struct gpubpf_cuMemAlloc_exit *)ctx)->out.dptr = 1; return 0;",
        "out.dptr",
    ),
    (
        "write-header",
        "ctx->hdr.result = 2; return 0;",
        "hdr.result",
    ),
];

fn build(bin: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.bpf.c"));
    std::fs::write(&c, src).unwrap();
    let obj = dir.join(format!("{name}.o"));
    let out = Command::new(bin)
        .args(["build", "-o"])
        .arg(&obj)
        .arg(&c)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gpubpf build {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    obj
}

fn verify(bin: &Path, obj: &Path) -> Option<Output> {
    let out = Command::new(bin).arg("verify").arg(obj).output().unwrap();
    if String::from_utf8_lossy(&out.stderr).contains("not available in this build") {
        eprintln!("skipped: this gpubpf has no `verify` yet");
        return None;
    }
    Some(out)
}

#[test]
fn typed_policies_build_and_verify() {
    let Some(bin) = gpubpf() else { return };
    if !common::cli::have_clang() {
        eprintln!("skipped: no clang");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let quota = build(&bin, dir.path(), "quota", QUOTA);
    let bad: Vec<(PathBuf, &str)> = BAD
        .iter()
        .map(|(name, body, field)| {
            let src = format!(
                "#include \"gpubpf.h\"\nSEC(\"cuda/cuMemAlloc\")\n\
                 int bad(struct gpubpf_cuMemAlloc_entry *ctx) {{ {body} }}\n\
                 char LICENSE[] SEC(\"license\") = \"GPL\";\n"
            );
            (build(&bin, dir.path(), name, &src), *field)
        })
        .collect();
    let past = build(
        &bin,
        dir.path(),
        "read-past-ctx",
        "#include \"gpubpf.h\"\nSEC(\"cuda/cuMemAlloc\")\n\
         int bad(struct gpubpf_cuMemAlloc_entry *ctx) { return *(__u64 *)((char *)ctx + 56) ? 1 : 0; }\n\
         char LICENSE[] SEC(\"license\") = \"GPL\";\n",
    );

    let Some(out) = verify(&bin, &quota) else {
        return;
    };
    assert!(
        out.status.success(),
        "quota rejected: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (obj, field) in bad {
        let out = verify(&bin, &obj).unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(3), "{}: {text}", obj.display());
        assert!(
            text.contains(field),
            "{}: message must name {field}: {text}",
            obj.display()
        );
    }
    let out = verify(&bin, &past).unwrap();
    assert_eq!(out.status.code(), Some(3), "read past the ctx accepted");
}
