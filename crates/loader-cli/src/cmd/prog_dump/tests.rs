//! Unit tests of `gpubpf prog dump`: grouping, hex runs, map labels, x86 decoding.

use super::*;

fn native(offset: usize, len: usize) -> Native {
    Native {
        offset,
        bytes: "90".repeat(len),
        asm: Some("nop".into()),
    }
}

#[test]
fn native_instructions_group_by_the_pc_of_their_first_byte() {
    // Offsets 0..4 prologue (no pc), 4..10 pc 0, 10..14 pc 2, 14..16 pc 0 again.
    let pc_at = |o: usize| match o {
        0..4 => None,
        4..10 => Some(0),
        10..14 => Some(2),
        14..16 => Some(0),
        _ => None,
    };
    let natives = vec![
        native(0, 1),
        native(1, 3),
        native(4, 2),
        native(6, 4),
        native(10, 4),
        native(14, 2),
    ];
    let groups = group_by_pc(natives.clone(), &pc_at);
    let shape: Vec<(Option<usize>, Vec<usize>)> = groups
        .iter()
        .map(|g| (g.pc, g.natives.iter().map(|n| n.offset).collect()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (None, vec![0, 1]),
            (Some(0), vec![4, 6]),
            (Some(2), vec![10]),
            (Some(0), vec![14]),
        ]
    );
    // Nothing is lost or reordered.
    let flat: Vec<Native> = groups.into_iter().flat_map(|g| g.natives).collect();
    assert_eq!(flat, natives);
}

#[test]
fn hex_chunks_split_at_pc_changes_and_16_bytes() {
    let code: Vec<u8> = (0..40).collect();
    let pc_at = |o: usize| Some(usize::from(o >= 5));
    let chunks = hex_chunks(&code, 2..40, &pc_at);
    let offsets: Vec<usize> = chunks.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, vec![2, 5, 21, 37]);
    assert_eq!(chunks[0].bytes, "020304");
    assert!(chunks.iter().all(|c| c.asm.is_none()));
    let joined: String = chunks.iter().map(|c| c.bytes.as_str()).collect();
    assert_eq!(joined, hex(&code[2..40]));
    assert!(hex_chunks(&code, 3..3, &pc_at).is_empty());
}

#[test]
fn map_labels_name_the_registry_map() {
    use gpubpf_runtime::registry::{MapBinding, RECORD_FORMAT};
    let spec = gpubpf_runtime::maps::MapSpec {
        map_type: gpubpf_runtime::maps::MapType::Array,
        key_size: 4,
        value_size: 16,
        max_entries: 1,
        flags: 0,
    };
    let rec = ObjectRecord {
        format: RECORD_FORMAT,
        name: "q".into(),
        id: 0,
        replaced: None,
        object_file: "object.o".into(),
        object_sha256: String::new(),
        object_size: 0,
        source_path: None,
        loaded_at_unix: 0,
        globals: BTreeMap::new(),
        maps: vec![MapBinding {
            index: 1,
            object_name: ".rodata".into(),
            registry_name: "q.rodata".into(),
            spec,
            created: true,
        }],
        programs: vec![],
        shadow: false,
    };
    let lddw = |src: u8, imm: i32, next: i32| {
        [Insn::new(LDDW, 1, src, 0, imm), Insn::new(0, 0, 0, 0, next)]
    };
    let l = |i: &[Insn]| map_label(&rec, Some(i));
    assert_eq!(
        l(&lddw(BPF_PSEUDO_MAP_IDX_VALUE, 1, 8)).as_deref(),
        Some("map[q.rodata][0]+8")
    );
    assert_eq!(
        l(&lddw(BPF_PSEUDO_MAP_IDX, 1, 0)).as_deref(),
        Some("map[q.rodata]")
    );
    assert_eq!(
        l(&lddw(BPF_PSEUDO_MAP_IDX, 7, 0)).as_deref(),
        Some("map[#7]")
    );
    assert_eq!(l(&lddw(0, 1, 0)), None);
    assert_eq!(l(&[Insn::new(0xb7, 0, 0, 0, 1)]), None);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_disassembly_names_embedded_addresses() {
    // push %rbp; movabs $0x1122334455667788,%rax; ret; one undecodable byte.
    let code = [
        0x55, 0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xc3, 0x06,
    ];
    let symbols = BTreeMap::from([(0x1122_3344_5566_7788, "bpf_ktime_get_ns".to_string())]);
    let n = disassemble(&code, 0..code.len(), &|_| None, &symbols);
    let asm: Vec<&str> = n.iter().filter_map(|n| n.asm.as_deref()).collect();
    assert_eq!(asm.len(), 4, "{asm:?}");
    assert!(asm[0].starts_with("push") && asm[0].contains("%rbp"));
    assert!(asm[1].contains("# bpf_ktime_get_ns"), "{}", asm[1]);
    assert_eq!(asm[2], "ret");
    assert_eq!(asm[3], "(bad)");
    let joined: String = n.iter().map(|n| n.bytes.as_str()).collect();
    assert_eq!(joined, hex(&code));
    assert_eq!(
        n.iter().map(|n| n.offset).collect::<Vec<_>>(),
        vec![0, 1, 11, 12]
    );
}
