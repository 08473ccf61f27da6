//! The policies in `policies/` and the libbpf-style program pass the verifier, with the maps
//! and line info the loader produced and the ctx of the attach point their section names.

mod elf_support;

use elf_support::{built_policies, clangs, compile, load_checked, repo_root};
use gpubpf_runtime::attach;
use gpubpf_runtime::object::Object;
use gpubpf_runtime::program::{line_infos, map_infos};
use gpubpf_verifier::{ctx::ProgramContext, VerifyInput};

fn verify_all(
    label: &str,
    obj: &Object,
    skip: &[&str],
    ctx_of: impl Fn(&str, attach::Phase) -> ProgramContext,
) {
    let maps = map_infos(obj);
    for p in obj
        .programs
        .iter()
        .filter(|p| !skip.contains(&p.name.as_str()))
    {
        let lines = line_infos(p);
        let ctx = ctx_of(&p.attach, p.phase);
        let input = VerifyInput {
            insns: &p.insns,
            maps: &maps,
            ctx: &ctx,
            line_info: Some(&lines),
        };
        if let Err(e) = gpubpf_verifier::verify(&input) {
            panic!("{label}: program `{}` rejected:\n{e}", p.name);
        }
    }
}

fn catalog_ctx(api: &str, phase: attach::Phase) -> ProgramContext {
    attach::resolve(api).unwrap().program_context(phase)
}

#[test]
fn policies_pass_the_verifier() {
    for clang in clangs() {
        for name in ["quota", "meminfo", "trace"] {
            let path = built_policies(clang).join(format!("{name}.o"));
            let obj = load_checked(&std::fs::read(path).unwrap());
            verify_all(&format!("{clang} {name}"), &obj, &[], catalog_ctx);
        }
    }
}

/// Every program, including `handle_exit`, whose `bpf_loop` callback accumulates into the
/// caller's stack (the verifier widens such scalars so the callback rounds converge).
#[test]
fn libbpf_style_program_passes_the_verifier() {
    let src = repo_root().join("tests/data/libbpf/exec_tracker.bpf.c");
    for clang in clangs() {
        let obj = load_checked(&compile(clang, &src, &[]));
        assert!(obj.program("handle_exit").is_some());
        verify_all(&format!("{clang} exec_tracker"), &obj, &[], catalog_ctx);
    }
}
