//! A program written for libbpf (standard includes, BTF-defined maps, standard helpers)
//! compiles against the SDK and loads unchanged except for its section names.

mod elf_support;

use elf_support::{clangs, compile, load_checked, repo_root};
use gpubpf_isa::{decode_program, CallTarget, Instruction};
use gpubpf_runtime::object::{MapKind, Phase};
use gpubpf_verifier::helpers::helper_by_name;

#[test]
fn libbpf_style_program_loads() {
    let src = repo_root().join("tests/data/libbpf/exec_tracker.bpf.c");
    for clang in clangs() {
        let mut obj = load_checked(&compile(clang, &src, &[]));
        assert_eq!(obj.license.as_deref(), Some("Dual BSD/GPL"));
        let progs: Vec<_> = obj
            .programs
            .iter()
            .map(|p| (p.name.as_str(), p.attach.as_str(), p.phase))
            .collect();
        assert_eq!(
            progs,
            [
                ("handle_exec", "cuCtxCreate", Phase::Entry),
                ("handle_exit", "cuCtxDestroy", Phase::Exit)
            ],
            "{clang}"
        );
        // Maps come in symbol order within `.maps` (compiler-dependent), globals last.
        let mut kinds: Vec<_> = obj.maps.iter().map(|m| (m.name.as_str(), m.kind)).collect();
        assert_eq!(kinds.last(), Some(&(".rodata", MapKind::Array)));
        kinds.sort_by_key(|k| k.0);
        assert_eq!(
            kinds,
            [
                (".rodata", MapKind::Array),
                ("exec_start", MapKind::Hash),
                ("hists", MapKind::Array),
                ("rb", MapKind::RingBuf),
            ],
            "{clang}"
        );
        let hists = &obj.maps[obj.map_index("hists").unwrap()];
        assert_eq!((hists.key_size, hists.value_size), (4, 26 * 4));
        assert_eq!(hists.value_type.as_ref().unwrap().name, "struct hist");

        // The callback of bpf_loop is a static function reached through `lddw func`.
        let exit = obj.program("handle_exit").unwrap();
        assert!(
            exit.subprograms.iter().any(|s| s.name == "count_slot"),
            "{clang}"
        );
        // Every helper call uses the Linux id of a helper gpubpf knows.
        for p in &obj.programs {
            for (_, insn) in decode_program(&p.insns).unwrap() {
                if let Instruction::Call(CallTarget::Helper(id)) = insn {
                    assert!(
                        gpubpf_verifier::helpers::helper_by_id(id).is_some(),
                        "{clang}: unknown helper id {id}"
                    );
                }
            }
        }
        let ringbuf_output = helper_by_name("bpf_ringbuf_output").unwrap().id;
        let calls: Vec<i32> = decode_program(&exit.insns)
            .unwrap()
            .into_iter()
            .filter_map(|(_, i)| match i {
                Instruction::Call(CallTarget::Helper(id)) => Some(id),
                _ => None,
            })
            .collect();
        assert!(calls.contains(&ringbuf_output), "{clang}: {calls:?}");

        obj.apply_sets(&["min_duration_ns=5ms", "verbose=true"])
            .unwrap_err();
        obj.apply_sets(&["min_duration_ns=5000000", "verbose=true"])
            .unwrap();
        let g = obj.global("verbose").unwrap();
        assert_eq!(obj.global_value(g).unwrap(), [1]);
    }
}
