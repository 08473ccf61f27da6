//! The JIT inlines `bpf_map_lookup_elem` on array maps of a prepared program (as Linux's
//! `array_map_gen_lookup`): a bounds check of the `u32` key and an address computation, no
//! helper call. Inlined and called lookups must give the same pointer for every key, in
//! range or not, and update the same values; only array maps the compiler was told about
//! are inlined.

use std::sync::Arc;

use gpubpf_isa::{assemble, Insn};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::jit::{self, CompiledProgram};
use gpubpf_runtime::maps::{Map, MapMeta, MapSpec, MapType};

/// Looks up the key in ctx word 0 and, when found, adds ctx word 1 to the value; returns
/// the value's address minus the address of value 0 (so that runs on one map compare), or
/// `u64::MAX` for NULL.
fn program(map: u64, base: u64) -> Vec<Insn> {
    assemble(&format!(
        "
        mov %r6, %r1
        ldxw %r2, [%r6+0]
        stxw [%r10-4], %r2
        lddw %r1, {map:#x}
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, null
        ldxdw %r3, [%r6+8]
        ldxdw %r4, [%r0+0]
        add %r4, %r3
        stxdw [%r0+0], %r4
        lddw %r1, {base:#x}
        sub %r0, %r1
        exit
    null:
        mov %r0, -1
        exit
        "
    ))
    .expect("assembles")
}

fn run(p: &CompiledProgram, key: u32, add: u64) -> u64 {
    let mut ctx = [u64::from(key), add];
    let mut stack = [0u8; STACK_SIZE];
    // SAFETY: the program reads two ctx words and touches its stack and the map's values
    // within bounds (the lookup's own bounds check), which `map` keeps mapped.
    unsafe { p.execute(ctx.as_mut_ptr().cast(), &mut stack) }.expect("runs")
}

fn helper_address_in_code(p: &CompiledProgram, helpers: &HelperTable) -> bool {
    let f = helpers.get(1).expect("bpf_map_lookup_elem") as usize as u64;
    // SAFETY: the code is mapped readable (and executable) for `code_size` bytes while `p`
    // lives.
    let code = unsafe { std::slice::from_raw_parts(p.code_address() as *const u8, p.code_size()) };
    code.windows(8).any(|w| w == f.to_le_bytes())
}

#[test]
fn inlined_array_lookups_match_the_helper_for_every_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = MapSpec {
        map_type: MapType::Array,
        key_size: 4,
        value_size: 12, // stride 16: the inlined address computation must use the stride
        max_entries: 5,
        flags: 0,
    };
    let map = Arc::new(Map::create(&dir.path().join("a"), &spec, &MapMeta::default()).unwrap());
    let arrays = [map.inline_array().expect("an array map")];
    let base = map.array_value_ptr(0).expect("value 0") as u64;
    let insns = program(map.handle(), base);
    let helpers = standard_helpers();
    let called = jit::compile(&insns, &helpers).expect("compiles");
    let inlined = jit::compile_with_arrays(&insns, &helpers, &arrays).expect("compiles");
    assert!(helper_address_in_code(&called, &helpers));
    assert!(
        !helper_address_in_code(&inlined, &helpers),
        "the lookup was not inlined"
    );
    for key in [0, 1, 2, 3, 4, 5, 6, 0x8000_0000, u32::MAX] {
        let want = run(&called, key, 1);
        assert_eq!(run(&inlined, key, 2), want, "key {key}");
        let expected = if key < 5 {
            u64::from(key) * 16
        } else {
            u64::MAX
        };
        assert_eq!(want, expected, "key {key}");
    }
    for key in 0..5u32 {
        let v = map.lookup(&key.to_ne_bytes()).unwrap().expect("in range");
        assert_eq!(
            u64::from_ne_bytes(v[..8].try_into().unwrap()),
            3,
            "key {key}"
        );
    }
    // Another map's handle is not inlined (only maps the compiler was told about).
    let other = Arc::new(Map::create(&dir.path().join("b"), &spec, &MapMeta::default()).unwrap());
    let base = other.array_value_ptr(0).expect("value 0") as u64;
    let p = jit::compile_with_arrays(&program(other.handle(), base), &helpers, &arrays)
        .expect("compiles");
    assert!(helper_address_in_code(&p, &helpers));
    assert_eq!(run(&p, 2, 7), 32);
    assert_eq!(run(&p, 9, 7), u64::MAX);
}

#[test]
fn hash_maps_are_never_inlined() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
    };
    let map = Map::create(&dir.path().join("h"), &spec, &MapMeta::default()).unwrap();
    assert!(map.inline_array().is_none());
}
