//! Unit tests of the map types through [`Map`].

use super::*;

fn spec(t: MapType, k: u32, v: u32, n: u32) -> MapSpec {
    MapSpec {
        map_type: t,
        key_size: k,
        value_size: v,
        max_entries: n,
        flags: 0,
    }
}

fn meta(name: &str) -> MapMeta {
    MapMeta {
        name: name.into(),
        ..MapMeta::default()
    }
}

fn make(dir: &tempfile::TempDir, name: &str, s: MapSpec) -> Map {
    Map::create(&dir.path().join(name), &s, &meta(name)).unwrap()
}

#[test]
fn array_semantics() {
    let d = tempfile::tempdir().unwrap();
    let m = make(&d, "a", spec(MapType::Array, 4, 12, 4));
    let k = 2u32.to_ne_bytes();
    assert_eq!(m.lookup(&k).unwrap(), Some(vec![0; 12]));
    m.update(&k, &[7; 12], BPF_ANY).unwrap();
    m.update(&k, &[8; 12], BPF_EXIST).unwrap();
    assert!(matches!(
        m.update(&k, &[9; 12], BPF_NOEXIST),
        Err(MapError::KeyExists)
    ));
    assert!(matches!(
        m.update(&9u32.to_ne_bytes(), &[9; 12], BPF_ANY),
        Err(MapError::Full)
    ));
    assert!(matches!(
        m.delete(&k),
        Err(MapError::InvalidArgument { .. })
    ));
    assert!(matches!(
        m.update(&k, &[1; 4], BPF_ANY),
        Err(MapError::WrongSize { .. })
    ));
    assert_eq!(m.lookup(&9u32.to_ne_bytes()).unwrap(), None);
    // A second opening sees the same memory.
    let m2 = Map::open(&d.path().join("a")).unwrap();
    assert_eq!(m2.lookup(&k).unwrap(), Some(vec![8; 12]));
    m2.clear().unwrap();
    assert_eq!(m.lookup(&k).unwrap(), Some(vec![0; 12]));
    assert_eq!(m.entries().unwrap().len(), 4);
}

#[test]
fn hash_semantics_and_errnos() {
    let d = tempfile::tempdir().unwrap();
    let m = make(&d, "h", spec(MapType::Hash, 6, 8, 3));
    let k = |i: u8| [i, 0, 0, 0, 0, i];
    assert!(matches!(
        m.update(&k(1), &[1; 8], BPF_EXIST),
        Err(MapError::KeyNotFound)
    ));
    m.update(&k(1), &[1; 8], BPF_NOEXIST).unwrap();
    let e = m.update(&k(1), &[2; 8], BPF_NOEXIST).unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST);
    m.update(&k(1), &[3; 8], BPF_EXIST).unwrap();
    assert_eq!(m.lookup(&k(1)).unwrap(), Some(vec![3; 8]));
    m.update(&k(2), &[2; 8], BPF_ANY).unwrap();
    m.update(&k(3), &[3; 8], BPF_ANY).unwrap();
    let e = m.update(&k(4), &[4; 8], BPF_ANY).unwrap_err();
    assert_eq!(e.errno(), libc::E2BIG);
    assert_eq!(m.len(), 3);
    m.delete(&k(2)).unwrap();
    assert_eq!(m.delete(&k(2)).unwrap_err().errno(), libc::ENOENT);
    m.update(&k(4), &[4; 8], BPF_ANY).unwrap();
    assert_eq!(m.lookup(&k(2)).unwrap(), None);
    assert_eq!(
        m.update(&k(5), &[0; 8], 7).unwrap_err().errno(),
        libc::EINVAL
    );
    let mut keys: Vec<_> = m.entries().unwrap().into_iter().map(|e| e.key[0]).collect();
    keys.sort();
    assert_eq!(keys, vec![1, 3, 4]);
    m.clear().unwrap();
    assert_eq!(m.len(), 0);
    assert!(m.entries().unwrap().is_empty());
    for i in 0..3 {
        m.update(&k(10 + i), &[i; 8], BPF_NOEXIST).unwrap();
    }
}

#[test]
fn hash_many_keys_and_raw_pointers() {
    let d = tempfile::tempdir().unwrap();
    let m = make(&d, "h8", spec(MapType::Hash, 8, 8, 1000));
    for i in 0u64..1000 {
        m.update(&i.to_ne_bytes(), &(i * 3).to_ne_bytes(), BPF_ANY)
            .unwrap();
    }
    for i in 0u64..1000 {
        // SAFETY: an 8-byte key.
        let p = unsafe { m.lookup_ptr(i.to_ne_bytes().as_ptr()) };
        assert!(!p.is_null());
        // SAFETY: values are 8 bytes, 8-aligned.
        assert_eq!(unsafe { p.cast::<u64>().read() }, i * 3);
    }
    for i in (0u64..1000).step_by(2) {
        m.delete(&i.to_ne_bytes()).unwrap();
    }
    for i in 0u64..1000 {
        assert_eq!(m.lookup(&i.to_ne_bytes()).unwrap().is_some(), i % 2 == 1);
    }
    assert_eq!(m.len(), 500);
}

#[test]
fn lru_evicts_least_recently_used() {
    let d = tempfile::tempdir().unwrap();
    let m = make(&d, "l", spec(MapType::LruHash, 4, 4, 4));
    for i in 0u32..4 {
        m.update(&i.to_ne_bytes(), &i.to_ne_bytes(), BPF_ANY)
            .unwrap();
    }
    // Touch 0, so 1 is the oldest.
    assert!(m.lookup(&0u32.to_ne_bytes()).unwrap().is_some());
    m.update(&9u32.to_ne_bytes(), &[9; 4], BPF_ANY).unwrap();
    assert_eq!(m.lookup(&1u32.to_ne_bytes()).unwrap(), None);
    for k in [0u32, 2, 3, 9] {
        assert!(m.lookup(&k.to_ne_bytes()).unwrap().is_some(), "{k}");
    }
    assert_eq!(m.len(), 4);
}

#[test]
fn ringbuf_wraps_drops_and_skips_discarded() {
    let d = tempfile::tempdir().unwrap();
    let size = mapping::page_size() as u32;
    let m = make(&d, "r", spec(MapType::RingBuf, 0, 0, size));
    let mut got = Vec::new();
    // Many laps with odd-sized records, so records cross the end of the data area.
    for round in 0..50u32 {
        let rec: Vec<u8> = (0..(100 + round % 7) as u8).collect();
        for _ in 0..30 {
            m.ringbuf_output(&rec).unwrap();
        }
        let p = m.ringbuf_reserve(5).unwrap();
        // SAFETY: reserved above, committed once.
        unsafe { Map::ringbuf_commit(p, true) };
        m.ringbuf_consume(|r| got.push(r.to_vec())).unwrap();
    }
    assert_eq!(got.len(), 50 * 30);
    assert_eq!(got[31], (0..101u8).collect::<Vec<_>>());
    // Fill up: no blocking, drops are counted.
    let mut drops = 0;
    for _ in 0..1000 {
        if let Err(e) = m.ringbuf_output(&[1; 64]) {
            assert_eq!(e.errno(), libc::EAGAIN);
            drops += 1;
        }
    }
    let st = m.ringbuf_stats().unwrap();
    assert!(drops > 0);
    assert_eq!(st.dropped, drops);
    assert!(st.pending <= u64::from(size));
    // A reserved, unsubmitted record of a live producer blocks consumption after it.
    m.clear().unwrap();
    let p = m.ringbuf_reserve(8).unwrap();
    m.ringbuf_output(&[5; 8]).unwrap();
    assert_eq!(m.ringbuf_consume(|_| {}).unwrap(), 0);
    // SAFETY: reserved above, committed once.
    unsafe { Map::ringbuf_commit(p, false) };
    assert_eq!(m.ringbuf_consume(|_| {}).unwrap(), 2);
    assert!(m.ringbuf_output(&vec![0; size as usize]).is_err());
}

#[test]
fn create_refuses_existing_and_open_detects_corruption() {
    let d = tempfile::tempdir().unwrap();
    let s = spec(MapType::Hash, 4, 4, 8);
    let p = d.path().join("c");
    let m = Map::create(&p, &s, &meta("c")).unwrap();
    assert!(matches!(
        Map::create(&p, &s, &meta("c")),
        Err(MapError::AlreadyExists { .. })
    ));
    drop(m);
    let orig = std::fs::read(&p).unwrap();
    let corrupt_at = |off: usize, byte: u8| {
        let mut b = orig.clone();
        b[off] = byte;
        std::fs::write(&p, &b).unwrap();
        Map::open(&p)
    };
    assert!(matches!(
        corrupt_at(0, b'x'),
        Err(MapError::BadMagic { .. })
    ));
    assert!(matches!(corrupt_at(8, 9), Err(MapError::BadVersion { .. })));
    assert!(matches!(corrupt_at(20, 99), Err(MapError::Corrupt { .. })));
    assert!(matches!(
        corrupt_at(layout::META_OFFSET, b'#'),
        Err(MapError::Corrupt { .. })
    ));
    std::fs::write(&p, &orig[..orig.len() - 4096]).unwrap();
    assert!(matches!(Map::open(&p), Err(MapError::Corrupt { .. })));
    std::fs::write(&p, &orig[..10]).unwrap();
    assert!(matches!(Map::open(&p), Err(MapError::Corrupt { .. })));
    std::fs::write(&p, &orig).unwrap();
    Map::open(&p).unwrap();
}

mod model {
    //! Random operation sequences against `std::collections::HashMap` with Linux's rules.
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as StdMap;

    #[derive(Debug, Clone)]
    enum Op {
        Update(u16, u64, u64),
        Delete(u16),
        Lookup(u16),
        Clear,
    }

    /// Key sizes the maps handle on paths of their own (4, 8, 16) and on the general one.
    fn key_size() -> impl Strategy<Value = u32> {
        prop_oneof![Just(2u32), Just(4), Just(8), Just(12), Just(16)]
    }

    /// Model key `k` as a key of `size` bytes: `k` in the last two bytes after a fixed
    /// filler, so that keys differ only in their last word (a comparison or hash that
    /// skipped it would merge them).
    fn key(size: u32, k: u16) -> Vec<u8> {
        let mut b = vec![0xa5; size as usize];
        b[size as usize - 2..].copy_from_slice(&k.to_ne_bytes());
        b
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..48, any::<u64>(), 0u64..4).prop_map(|(k, v, f)| Op::Update(k, v, f)),
            3 => (0u16..48).prop_map(Op::Delete),
            3 => (0u16..48).prop_map(Op::Lookup),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn hash_matches_model(ks in key_size(), ops in proptest::collection::vec(op(), 1..200)) {
            let d = tempfile::tempdir().unwrap();
            let m = make(&d, "m", spec(MapType::Hash, ks, 8, 32));
            let mut model: StdMap<u16, u64> = StdMap::new();
            for op in ops {
                match op {
                    Op::Update(k, v, f) => {
                        let exists = model.contains_key(&k);
                        let want = if f > BPF_EXIST {
                            Err(libc::EINVAL)
                        } else if f == BPF_NOEXIST && exists {
                            Err(libc::EEXIST)
                        } else if f == BPF_EXIST && !exists {
                            Err(libc::ENOENT)
                        } else if !exists && model.len() == 32 {
                            Err(libc::E2BIG)
                        } else {
                            Ok(())
                        };
                        let got = m.update(&key(ks, k), &v.to_ne_bytes(), f).map_err(|e| e.errno());
                        prop_assert_eq!(got, want);
                        if want.is_ok() {
                            model.insert(k, v);
                        }
                    }
                    Op::Delete(k) => {
                        let got = m.delete(&key(ks, k)).map_err(|e| e.errno());
                        let want = model.remove(&k).map(|_| ()).ok_or(libc::ENOENT);
                        prop_assert_eq!(got, want);
                    }
                    Op::Lookup(k) => {
                        let got = m.lookup(&key(ks, k)).unwrap();
                        prop_assert_eq!(got, model.get(&k).map(|v| v.to_ne_bytes().to_vec()));
                    }
                    Op::Clear => {
                        m.clear().unwrap();
                        model.clear();
                    }
                }
                prop_assert_eq!(m.len(), model.len() as u64);
            }
            let mut got: Vec<(Vec<u8>, Vec<u8>)> =
                m.entries().unwrap().into_iter().map(|e| (e.key, e.value)).collect();
            got.sort();
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
                .iter()
                .map(|(k, v)| (key(ks, *k), v.to_ne_bytes().to_vec()))
                .collect();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn lru_matches_model(ks in key_size(), ops in proptest::collection::vec(op(), 1..200)) {
            let d = tempfile::tempdir().unwrap();
            let m = make(&d, "l", spec(MapType::LruHash, ks, 8, 8));
            // key -> (value, last use)
            let mut model: StdMap<u16, (u64, u64)> = StdMap::new();
            let mut clock = 0u64;
            for op in ops {
                clock += 1;
                match op {
                    Op::Update(k, v, f) => {
                        let f = f.min(BPF_EXIST);
                        let exists = model.contains_key(&k);
                        let got = m.update(&key(ks, k), &v.to_ne_bytes(), f).map_err(|e| e.errno());
                        if f == BPF_NOEXIST && exists {
                            prop_assert_eq!(got, Err(libc::EEXIST));
                        } else if f == BPF_EXIST && !exists {
                            prop_assert_eq!(got, Err(libc::ENOENT));
                        } else {
                            prop_assert_eq!(got, Ok(()));
                            if !exists && model.len() == 8 {
                                let oldest = *model.iter().min_by_key(|(_, (_, t))| *t).unwrap().0;
                                model.remove(&oldest);
                            }
                            model.insert(k, (v, clock));
                        }
                    }
                    Op::Delete(k) => {
                        let got = m.delete(&key(ks, k)).map_err(|e| e.errno());
                        prop_assert_eq!(got, model.remove(&k).map(|_| ()).ok_or(libc::ENOENT));
                    }
                    Op::Lookup(k) => {
                        let got = m.lookup(&key(ks, k)).unwrap();
                        let want = model.get_mut(&k).map(|e| {
                            e.1 = clock;
                            e.0.to_ne_bytes().to_vec()
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Clear => {
                        m.clear().unwrap();
                        model.clear();
                    }
                }
                prop_assert_eq!(m.len(), model.len() as u64);
            }
        }
    }
}

#[test]
fn masked_updates_change_only_the_masked_bits() {
    let d = tempfile::tempdir().unwrap();
    let mask = [0xff, 0xff, 0, 0, 0x0f, 0, 0, 0];
    let patch = [1, 2, 0, 0, 0x05, 0, 0, 0];
    // Array: under the writer lock, every other bit kept.
    let a = make(&d, "a", spec(MapType::Array, 4, 8, 2));
    let k = 1u32.to_ne_bytes();
    a.update(&k, &[0xaa; 8], BPF_ANY).unwrap();
    a.update_masked(&k, &patch, &mask, BPF_ANY).unwrap();
    assert_eq!(
        a.lookup(&k).unwrap().unwrap(),
        [1, 2, 0xaa, 0xaa, 0xa5, 0xaa, 0xaa, 0xaa]
    );
    assert!(matches!(
        a.update_masked(&k, &patch, &mask[..4], BPF_ANY),
        Err(MapError::WrongSize { .. })
    ));
    // Hash: an existing entry is patched; a new one is the patch; flags as for update.
    let h = make(&d, "h", spec(MapType::Hash, 4, 8, 4));
    h.update(&k, &[0xaa; 8], BPF_ANY).unwrap();
    h.update_masked(&k, &patch, &mask, BPF_EXIST).unwrap();
    assert_eq!(
        h.lookup(&k).unwrap().unwrap(),
        [1, 2, 0xaa, 0xaa, 0xa5, 0xaa, 0xaa, 0xaa]
    );
    assert!(matches!(
        h.update_masked(&k, &patch, &mask, BPF_NOEXIST),
        Err(MapError::KeyExists)
    ));
    let k2 = 2u32.to_ne_bytes();
    assert!(matches!(
        h.update_masked(&k2, &patch, &mask, BPF_EXIST),
        Err(MapError::KeyNotFound)
    ));
    h.update_masked(&k2, &patch, &mask, BPF_NOEXIST).unwrap();
    assert_eq!(h.lookup(&k2).unwrap().unwrap(), patch);
}

/// Minor and major page faults of this thread so far.
fn faults() -> i64 {
    // SAFETY: `ru` is plain data that getrusage fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to `ru`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_minflt + ru.ru_majflt
}

/// A process that opens a ring buffer writes its first lap without a page fault: the file's
/// pages are allocated when the map is created and the writable mappings are populated
/// (trace's events crossed a fresh page every 34 launches, each crossing a fault on the
/// policed call). On tmpfs only, where gpubpf keeps registries: a disk filesystem
/// write-protects mapped pages for its dirty tracking, populated or not.
#[test]
fn fault_free_ring() {
    let Some(shm) = crate::registry::shared_memory_dir()
        .filter(|d| crate::registry::filesystem(d).is_ok_and(|f| f.name == "tmpfs"))
    else {
        eprintln!("skipped: no tmpfs at /dev/shm");
        return;
    };
    let d = tempfile::tempdir_in(shm).unwrap();
    let size = 64 * mapping::page_size() as u32;
    let path = d.path().join("events");
    drop(make(&d, "events", spec(MapType::RingBuf, 0, 0, size)));
    // As a policed process opens it (its own mappings), then one lap of 120-byte records.
    let m = Map::open(&path).unwrap();
    let rec = [7u8; 112];
    // The code's own pages fault in on first use: one record first, consumed.
    m.ringbuf_output(&rec).unwrap();
    m.ringbuf_consume(|_| {}).unwrap();
    let before = faults();
    let mut written = 0u32;
    while m.ringbuf_output(&rec).is_ok() {
        written += 1;
    }
    let taken = faults() - before;
    assert!(written > size / 128, "{written} records");
    assert!(
        taken <= 1,
        "{taken} page faults writing a lap of {written} records over {} pages",
        size as usize / mapping::page_size()
    );
}
