//! The JIT inlines `bpf_map_lookup_elem` on the maps of a prepared program it was told
//! about (as Linux's `map_gen_lookup`): on arrays a bounds check of the `u32` key and an
//! address computation; on hash maps with 4- or 8-byte keys the first probe of the map's
//! lock-free lookup (the rest of a chain through the helper). Inlined and called lookups must give the same pointer for every key (in range
//! or not, present, deleted or never inserted, in chains of several entries) and update the
//! same values; LRU maps (a hit stamps the entry) and other key sizes keep the helper call.

use std::sync::Arc;

use gpubpf_isa::{assemble, Insn};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::jit::{self, CompiledProgram, InlineMap};
use gpubpf_runtime::maps::{Map, MapMeta, MapSpec, MapType};

/// Looks up the key in ctx word 0 (its low `key_size` bytes: 4 or 8) and, when found, adds
/// ctx word 1 to the value; returns the value's address minus `base` (so that runs on one
/// map compare; 0 for an absolute address), or `u64::MAX` for NULL.
fn program(map: u64, key_size: u32, base: u64) -> Vec<Insn> {
    let (ld, st) = if key_size == 8 {
        ("ldxdw", "stxdw")
    } else {
        ("ldxw", "stxw")
    };
    assemble(&format!(
        "
        mov %r6, %r1
        {ld} %r2, [%r6+0]
        {st} [%r10-8], %r2
        lddw %r1, {map:#x}
        mov %r2, %r10
        add %r2, -8
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

fn bytes_in_code(p: &CompiledProgram, bytes: &[u8]) -> bool {
    p.code().windows(bytes.len()).any(|w| w == bytes)
}

fn helper_address_in_code(p: &CompiledProgram, helpers: &HelperTable) -> bool {
    let f = helpers.get(1).expect("bpf_map_lookup_elem") as usize as u64;
    bytes_in_code(p, &f.to_le_bytes())
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
    let arrays = [InlineMap::Array(map.inline_array().expect("an array map"))];
    assert_eq!(map.inline_map(), Some(arrays[0]));
    let base = map.array_value_ptr(0).expect("value 0") as u64;
    let insns = program(map.handle(), 4, base);
    let helpers = standard_helpers();
    let called = jit::compile(&insns, &helpers).expect("compiles");
    let inlined = jit::compile_with_maps(&insns, &helpers, &arrays).expect("compiles");
    assert!(helper_address_in_code(&called, &helpers));
    assert!(
        !helper_address_in_code(&inlined, &helpers),
        "the lookup was not inlined"
    );
    for key in [0, 1, 2, 3, 4, 5, 6, 0x8000_0000, u32::MAX] {
        let want = run(&called, u64::from(key), 1);
        assert_eq!(run(&inlined, u64::from(key), 2), want, "key {key}");
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
    let p = jit::compile_with_maps(&program(other.handle(), 4, base), &helpers, &arrays)
        .expect("compiles");
    assert!(helper_address_in_code(&p, &helpers));
    assert_eq!(run(&p, 2, 7), 32);
    assert_eq!(run(&p, 9, 7), u64::MAX);
}

fn run(p: &CompiledProgram, key: u64, add: u64) -> u64 {
    let mut ctx = [key, add];
    let mut stack = [0u8; STACK_SIZE];
    // SAFETY: the program reads two ctx words, touches its stack and the value the lookup
    // found (mapped while its map lives).
    unsafe { p.execute(ctx.as_mut_ptr().cast(), &mut stack) }.expect("runs")
}

fn hash_map(
    dir: &std::path::Path,
    name: &str,
    map_type: MapType,
    key_size: u32,
    max_entries: u32,
) -> Arc<Map> {
    let spec = MapSpec {
        map_type,
        key_size,
        value_size: 8,
        max_entries,
        flags: 0,
    };
    Arc::new(Map::create(&dir.join(name), &spec, &MapMeta::default()).expect("create"))
}

fn key_bytes(key: u64, key_size: u32) -> Vec<u8> {
    key.to_ne_bytes()[..key_size as usize].to_vec()
}

#[test]
fn inlined_hash_lookups_match_the_helper_for_every_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let helpers = standard_helpers();
    for key_size in [4u32, 8] {
        let map = hash_map(
            dir.path(),
            &format!("h{key_size}"),
            MapType::Hash,
            key_size,
            64,
        );
        let inline = map.inline_map().expect("a 4- or 8-byte-key hash map");
        assert!(matches!(inline, InlineMap::Hash(_)));
        // 60 keys in 64 buckets: chains of two and three entries; then 20 deleted, so that
        // walks pass deleted and reused entries.
        let key = |i: u64| i.wrapping_mul(0x9e37_79b9) ^ (i << 33);
        for i in 0..60 {
            map.update(&key_bytes(key(i), key_size), &i.to_ne_bytes(), 0)
                .expect("insert");
        }
        for i in (0..60).step_by(3) {
            map.delete(&key_bytes(key(i), key_size)).expect("delete");
        }
        let insns = program(map.handle(), key_size, 0);
        let called = jit::compile(&insns, &helpers).expect("compiles");
        let inlined = jit::compile_with_maps(&insns, &helpers, &[inline]).expect("compiles");
        // The hash is computed in the code (the map's seed is an immediate of it); the
        // helper is still called from the cold path (keys further down a chain).
        let InlineMap::Hash(h) = inline else {
            unreachable!()
        };
        assert!(!bytes_in_code(&called, &h.seed.to_le_bytes()));
        assert!(
            bytes_in_code(&inlined, &h.seed.to_le_bytes()),
            "size {key_size}: the lookup was not inlined"
        );
        let mut found = 0;
        for i in 0..80u64 {
            // A 4-byte key only reads the low half of the ctx word: the high half must not
            // matter.
            let k = if key_size == 4 {
                key(i) & 0xffff_ffff | 0xdead_0000_0000_0000
            } else {
                key(i)
            };
            let want = run(&called, k, 1);
            assert_eq!(run(&inlined, k, 2), want, "size {key_size}, key {i}");
            let present = i < 60 && i % 3 != 0;
            assert_eq!(want != u64::MAX, present, "size {key_size}, key {i}");
            if present {
                found += 1;
                let v = map
                    .lookup(&key_bytes(key(i), key_size))
                    .expect("lookup")
                    .expect("present");
                assert_eq!(v, (i + 3).to_ne_bytes(), "size {key_size}, key {i}");
            }
        }
        assert_eq!(found, 40);
    }
}

#[test]
fn lru_maps_and_other_key_sizes_keep_the_helper_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let helpers = standard_helpers();
    let lru = hash_map(dir.path(), "lru", MapType::LruHash, 4, 64);
    let wide = hash_map(dir.path(), "wide", MapType::Hash, 16, 64);
    let narrow = hash_map(dir.path(), "narrow", MapType::Hash, 2, 64);
    for m in [&lru, &wide, &narrow] {
        assert!(m.inline_map().is_none());
        assert!(m.inline_array().is_none());
    }
    // Told about another hash map, the compiler still calls the helper for this one.
    let told = hash_map(dir.path(), "told", MapType::Hash, 4, 64);
    let maps = [told.inline_map().expect("inlinable")];
    lru.update(&7u32.to_ne_bytes(), &5u64.to_ne_bytes(), 0)
        .expect("insert");
    let p =
        jit::compile_with_maps(&program(lru.handle(), 4, 0), &helpers, &maps).expect("compiles");
    assert!(helper_address_in_code(&p, &helpers));
    assert_ne!(run(&p, 7, 1), u64::MAX);
    assert_eq!(run(&p, 8, 1), u64::MAX);
}

/// Inlined lookups of keys that stay in the map, while another thread inserts and deletes
/// other keys of the same buckets (entries are reused at once, so a probe may meet another
/// chain's entry and leave the walk to the helper, which restarts on another chain's end):
/// a found value is always the key's own, and misses of present keys stay rare.
#[test]
fn inlined_hash_lookups_stay_right_under_concurrent_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let helpers = standard_helpers();
    let map = hash_map(dir.path(), "c", MapType::Hash, 4, 16);
    let stable: Vec<u32> = (0..8).collect();
    for &k in &stable {
        map.update(&k.to_ne_bytes(), &u64::from(k).to_ne_bytes(), 0)
            .expect("insert");
    }
    let inline = map.inline_map().expect("inlinable");
    let reader = jit::compile_with_maps(&program(map.handle(), 4, 0), &helpers, &[inline])
        .expect("compiles");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (map, stop) = (Arc::clone(&map), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = 100 + (n % 8) as u32;
                map.update(&k.to_ne_bytes(), &u64::from(k).to_ne_bytes(), 0)
                    .expect("insert");
                map.delete(&k.to_ne_bytes()).expect("delete");
                n += 1;
            }
            n
        })
    };
    let mut misses = 0u32;
    let rounds = 200_000u32;
    for r in 0..rounds {
        let k = stable[(r % 8) as usize];
        let addr = run(&reader, u64::from(k), 0);
        if addr == u64::MAX {
            misses += 1;
            continue;
        }
        // SAFETY: the address of a value of this map, which stays mapped.
        let v = unsafe { std::ptr::read_volatile(addr as *const u64) };
        assert_eq!(v, u64::from(k), "key {k} found another key's value");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let churn = writer.join().expect("writer");
    assert!(churn > 0);
    assert!(
        misses < rounds / 100,
        "{misses} of {rounds} lookups of present keys missed"
    );
}
