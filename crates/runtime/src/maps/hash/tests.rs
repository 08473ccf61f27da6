//! Hash-map unit tests: a writer killed at each point of an update, counting in both
//! file formats, colliding keys.

use super::super::{Map, MapMeta, MapSpec, MapType, BPF_NOEXIST};
use super::*;

/// Runs `dead_writer` in a forked child that exits holding bucket 0's lock, as a
/// writer SIGKILLed mid-update would (its lease dies with it: the next locker recovers).
fn die_in_child(h: &HashMap, dead_writer: impl FnOnce(&HashMap)) {
    // SAFETY: the child only takes a lock, touches shared atomics and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        std::mem::forget(h.lock_raw(0));
        dead_writer(h);
        // SAFETY: leave without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
}

fn full_capacity(m: &Map, n: u32) {
    for k in 0..n {
        m.update(&k.to_ne_bytes(), &[3; 8], BPF_NOEXIST)
            .unwrap_or_else(|e| panic!("insert {k} of {n}: {e}"));
    }
    assert_eq!(m.hash_for_test().count(), n);
    for k in 0..n {
        assert_eq!(m.lookup(&k.to_ne_bytes()).unwrap(), Some(vec![3; 8]));
    }
}

/// The first `u32` key that hashes into bucket 0 of `h`.
fn key_in_bucket_0(h: &HashMap) -> u32 {
    (0u32..)
        .find(|k| hash_key(h.seed, &k.to_ne_bytes()) & (h.nbuckets - 1) == 0)
        .unwrap()
}

fn small(d: &tempfile::TempDir) -> Map {
    let spec = MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 16,
        flags: 0,
    };
    Map::create(&d.path().join("m"), &spec, &MapMeta::default()).unwrap()
}

/// Every way to change the number of entries keeps `count` exact: inserts, replacing
/// updates (no change), deletes, LRU evictions, clearing, and a repair after a dead writer.
#[test]
fn count_follows_every_change() {
    for map_type in [MapType::Hash, MapType::LruHash] {
        let d = tempfile::tempdir().unwrap();
        let spec = MapSpec {
            map_type,
            key_size: 4,
            value_size: 8,
            max_entries: 16,
            flags: 0,
        };
        let path = d.path().join("m");
        let m = Map::create(&path, &spec, &MapMeta::default()).unwrap();
        let what = format!("{map_type:?}");
        let h = m.hash_for_test();
        for k in 0u32..10 {
            m.update(&k.to_ne_bytes(), &[1; 8], 0).unwrap();
        }
        m.update(&3u32.to_ne_bytes(), &[2; 8], 0).unwrap();
        assert_eq!(m.len(), 10, "{what}");
        for k in [0u32, 5, 9] {
            m.delete(&k.to_ne_bytes()).unwrap();
        }
        assert!(m.delete(&5u32.to_ne_bytes()).is_err(), "{what}");
        assert_eq!(m.len(), 7, "{what}");
        for k in 100u32..140 {
            let r = m.update(&k.to_ne_bytes(), &[1; 8], 0);
            assert_eq!(
                r.is_ok(),
                map_type == MapType::LruHash || k < 109,
                "{what}: {k}"
            );
        }
        assert_eq!(m.len(), 16, "{what}: full");
        // Another process sees the same count.
        assert_eq!(Map::open(&path).unwrap().len(), 16, "{what}");
        die_in_child(h, |h| {
            let i = h.bucket_head(0).load(Ordering::Acquire);
            if i & NULLS == 0 {
                h.e_state(i).store(STATE_FREE, Ordering::Release);
            }
        });
        let lost = usize::from(h.bucket_head(0).load(Ordering::Acquire) & NULLS == 0);
        h.repair().unwrap();
        assert_eq!(m.len(), 16 - lost as u64, "{what}: after a repair");
        m.clear().unwrap();
        assert_eq!(m.len(), 0, "{what}: cleared");
    }
}

#[test]
fn entry_popped_but_never_linked_is_reclaimed() {
    let d = tempfile::tempdir().unwrap();
    let m = small(&d);
    die_in_child(m.hash_for_test(), |h| {
        h.pop_free().unwrap();
    });
    full_capacity(&m, 16);
}

/// Inserts one entry into bucket 0 of `m`; returns its key.
fn one_entry_in_bucket_0(m: &Map) -> u32 {
    let key = key_in_bucket_0(m.hash_for_test());
    m.update(&key.to_ne_bytes(), &[1; 8], BPF_NOEXIST).unwrap();
    key
}

/// What a writer does between popping entry `i` and publishing it: links it at the head of
/// bucket 0 (as `insert_locked`).
fn link_at_head_of_bucket_0(h: &HashMap, i: u32) {
    let head = h.bucket_head(0);
    h.e_next(i)
        .store(head.load(Ordering::Relaxed), Ordering::Release);
    head.store(i, Ordering::Release);
}

#[test]
fn entry_linked_but_never_published_is_reclaimed() {
    let d = tempfile::tempdir().unwrap();
    let m = small(&d);
    die_in_child(m.hash_for_test(), |h| {
        let i = h.pop_free().unwrap();
        link_at_head_of_bucket_0(h, i);
    });
    full_capacity(&m, 16);
}

#[test]
fn entry_unlinked_but_never_pushed_is_reclaimed_and_count_fixed() {
    let d = tempfile::tempdir().unwrap();
    let m = small(&d);
    // A used entry in bucket 0, then a dead deleter that unlinked it only.
    let (h, key) = (m.hash_for_test(), one_entry_in_bucket_0(&m));
    die_in_child(h, |h| {
        let i = h.bucket_head(0).load(Ordering::Acquire);
        h.e_state(i).store(STATE_FREE, Ordering::Release);
        h.uncounted(0);
        h.bucket_head(0)
            .store(h.e_next(i).load(Ordering::Acquire), Ordering::Release);
    });
    assert_eq!(m.lookup(&key.to_ne_bytes()).unwrap(), None);
    full_capacity(&m, 16);
}

/// The next locker of the dead writer's bucket repairs at once (not only a failing
/// insert): the count is right before the map fills.
#[test]
fn the_next_locker_of_the_bucket_repairs() {
    let d = tempfile::tempdir().unwrap();
    let m = small(&d);
    let (h, key) = (m.hash_for_test(), one_entry_in_bucket_0(&m));
    // Killed after publishing a second entry, before counting it.
    die_in_child(h, |h| {
        let i = h.pop_free().unwrap();
        h.e_hash(i).store(u32::MAX, Ordering::Relaxed);
        link_at_head_of_bucket_0(h, i);
        h.e_state(i).store(STATE_USED, Ordering::Release);
    });
    assert_eq!(h.count(), 1);
    m.delete(&key.to_ne_bytes()).unwrap();
    assert_eq!(
        h.count(),
        1,
        "the published entry was not counted by the repair"
    );
}

/// Two keys of `size` bytes that differ only in their last four bytes and hash alike
/// under `seed` (a birthday search over the 32-bit hash).
fn colliding_keys(seed: u64, size: usize) -> (Vec<u8>, Vec<u8>) {
    let key = |n: u32| {
        let mut k = vec![0xa5u8; size];
        k[size - 4..].copy_from_slice(&n.to_ne_bytes());
        k
    };
    let mut seen = std::collections::HashMap::new();
    for n in 0u32.. {
        if let Some(m) = seen.insert(hash_key(seed, &key(n)), n) {
            return (key(m), key(n));
        }
    }
    unreachable!("the 32-bit hash has collisions")
}

/// Keys whose hashes collide stay apart, for every key size with a path of its own
/// (4, 8, 16) and the general one: the comparison covers the whole key.
#[test]
fn colliding_keys_stay_apart_at_every_key_size() {
    for (size, map_type) in [
        (4, MapType::Hash),
        (8, MapType::Hash),
        (12, MapType::Hash),
        (16, MapType::Hash),
        (16, MapType::LruHash),
    ] {
        let d = tempfile::tempdir().unwrap();
        let spec = MapSpec {
            map_type,
            key_size: size,
            value_size: 8,
            max_entries: 16,
            flags: 0,
        };
        let m = Map::create(&d.path().join("m"), &spec, &MapMeta::default()).unwrap();
        let (a, b) = colliding_keys(m.hash_for_test().seed, size as usize);
        m.update(&a, &[1; 8], BPF_NOEXIST).unwrap();
        assert_eq!(
            m.lookup(&b).unwrap(),
            None,
            "size {size}: b found before insert"
        );
        m.update(&b, &[2; 8], BPF_NOEXIST).unwrap();
        assert_eq!(m.lookup(&a).unwrap(), Some(vec![1; 8]), "size {size}");
        assert_eq!(m.lookup(&b).unwrap(), Some(vec![2; 8]), "size {size}");
        m.delete(&a).unwrap();
        assert_eq!(m.lookup(&a).unwrap(), None, "size {size}: a after delete");
        assert_eq!(
            m.lookup(&b).unwrap(),
            Some(vec![2; 8]),
            "size {size}: b after delete"
        );
    }
}
