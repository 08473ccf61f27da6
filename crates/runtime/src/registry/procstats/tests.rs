//! Tests of the per-process stats files.

use super::*;

fn home() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("procs")).unwrap();
    d
}

#[test]
fn a_slots_previous_file_is_kept_under_a_second_name_until_removed() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("procs")).unwrap();
    let path = stats_path(d.path(), 2);
    let (old, none) = ProcStats::create_at(&path, 2, 100, 1, false).unwrap();
    assert!(none.is_none(), "nothing to keep the first time");
    drop(old);
    let (new, stale) = ProcStats::create_at(&path, 2, 200, 1, false).unwrap();
    let stale = stale.expect("the previous file is kept");
    // The slot's name holds the new file; the previous one lives on until removed.
    assert_eq!(ProcStats::open(&path).unwrap().pid(), 200);
    assert_eq!(ProcStats::open(&stale).unwrap().pid(), 100);
    assert!(stale
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".tmp-stale-200-2")));
    remove_stale(Some(stale.clone()));
    assert!(!stale.exists());
    drop(new);
}

#[test]
fn tables_and_counters_round_trip() {
    let d = home();
    let s = ProcStats::create(d.path(), 3, 1234, 99, true).unwrap();
    let (p, q) = s.update(|t| {
        t.clear();
        let p = t.point(303, false).unwrap();
        let q = t
            .program("quota", "quota_alloc", 303, false, false)
            .unwrap();
        t.failure("broken", "program `x` was rejected");
        (p, q)
    });
    let shard = s.claim_shard(77);
    assert_ne!(shard, 0);
    for _ in 0..5 {
        s.add(shard, Counter::calls(p), 1);
    }
    s.add(0, Counter::calls(p), 2);
    s.add(0, Counter::denied(p), 1);
    // The thread's own shard as one word (the shim's hot path) adds to the same counters;
    // the shared shard has none.
    assert!(s.counters().own_shard(0).is_none());
    assert!(s.counters().own_shard(N_SHARDS as u32).is_none());
    assert!(s.counters().own_shard(N_SHARDS as u32 - 1).is_some());
    let own = s.counters().own_shard(shard).unwrap();
    own.add(Counter::calls(p), 4);
    assert_eq!(s.calls(p), 11);
    own.add(Counter::calls(p), u64::MAX - 3); // wraps: four fewer
    assert_eq!(s.calls(p), 7);
    // Summed over the thread's shard and the shared one: what the shim's watcher reads to
    // compile a point once it has been called.
    assert_eq!(s.calls(p), 7);
    s.add(shard, Counter::runs(q), 3);
    s.add(shard, Counter::run_ns(q), 300);
    s.add(shard, Counter::faults(q), 1);
    let r = ProcStats::open(&stats_path(d.path(), 3)).unwrap().read();
    assert_eq!((r.pid, r.start_time, r.fail_closed), (1234, 99, true));
    assert_eq!(r.points.len(), 1);
    assert_eq!(
        (r.points[0].api_id, r.points[0].calls, r.points[0].denied),
        (303, 7, 1)
    );
    let prog = &r.programs[0];
    assert_eq!(
        (
            prog.object.as_str(),
            prog.name.as_str(),
            prog.exit,
            prog.active
        ),
        ("quota", "quota_alloc", false, true)
    );
    assert_eq!((prog.runs, prog.run_time_ns, prog.faults), (3, 300, 1));
    assert_eq!((prog.shadow, prog.shadow_denied), (false, 0));
    // The same program reloaded with --shadow: same slot, marked, its own counter.
    let q2 = s.update(|t| {
        t.clear();
        t.program("quota", "quota_alloc", 303, false, true).unwrap()
    });
    assert_eq!(q2, q);
    // A rebuild keeps the counters (the watcher compiles the points already called right
    // after it).
    assert_eq!(s.calls(p), 7);
    s.add(shard, Counter::shadow_denied(q), 2);
    let r2 = s.read();
    let prog2 = &r2.programs[0];
    assert_eq!(
        (prog2.shadow, prog2.shadow_denied, prog2.faults),
        (true, 2, 1)
    );
    assert_eq!(r.failures[0].object, "broken");
    assert_eq!(r.failures[0].reason, "program `x` was rejected");
}

#[test]
fn slots_persist_across_updates_and_each_link_gets_its_own() {
    let d = home();
    let s = ProcStats::create(d.path(), 0, 1, 1, false).unwrap();
    let a = s.update(|t| t.program("q", "p", 5, true, false).unwrap());
    s.add(0, Counter::faults(a), 4);
    // Same program again in the next set: same slot, counts kept.
    let b = s.update(|t| {
        t.clear();
        t.program("q", "p", 5, true, false).unwrap()
    });
    assert_eq!(a, b);
    // Within one set, a second program of the same identity (two links) gets its own.
    let c = s.update(|t| {
        t.clear();
        let x = t.program("q", "p", 5, true, false).unwrap();
        let y = t.program("q", "p", 5, true, false).unwrap();
        assert_ne!(x, y);
        y
    });
    let r = s.read();
    assert_eq!(r.programs.len(), 2);
    assert_eq!(r.programs[a as usize].faults, 4);
    assert!(r.programs[c as usize].active);
    let none = s.update(|t| {
        t.clear();
        t.point(9, false)
    });
    assert!(none.is_some());
    let r = s.read();
    assert!(r.programs.iter().all(|p| !p.active));
}

#[test]
fn shards_run_out_into_the_shared_one_and_are_reused() {
    let d = home();
    let s = ProcStats::create(d.path(), 1, 1, 1, false).unwrap();
    let claimed: Vec<u32> = (0..N_SHARDS as u32 + 3)
        .map(|t| s.claim_shard(t + 1))
        .collect();
    assert_eq!(claimed.iter().filter(|&&c| c == 0).count(), 4);
    s.release_shard(claimed[0]);
    assert_eq!(s.claim_shard(1000), claimed[0]);
}

#[test]
fn long_names_and_reasons_are_cut_on_character_boundaries() {
    let d = home();
    let s = ProcStats::create(d.path(), 2, 1, 1, false).unwrap();
    let long = "é".repeat(100);
    s.update(|t| {
        t.program(&long, &long, 1, false, false);
        t.failure(&long, &"x".repeat(1000));
    });
    let r = s.read();
    assert!(r.programs[0].object.len() <= 56 && r.programs[0].object.starts_with('é'));
    assert_eq!(r.failures[0].reason.len(), REASON_WORDS * 8 - 1);
}

#[test]
fn a_file_of_the_wrong_size_or_magic_is_refused() {
    let d = home();
    let p = stats_path(d.path(), 4);
    std::fs::write(&p, b"short").unwrap();
    assert!(matches!(
        ProcStats::open(&p),
        Err(ProcStatsError::Corrupt { .. })
    ));
    std::fs::write(&p, vec![0u8; FILE_SIZE]).unwrap();
    assert!(ProcStats::open(&p).is_err());
}

/// Found by the stats-file fuzz twin (tests/fuzz_replay.rs): a writer killed inside
/// `update` leaves the sequence word odd, and `read` (that is, `gpubpf ps`) spun for ever.
#[test]
fn a_writer_that_died_mid_update_does_not_hang_readers() {
    use std::io::{Seek, SeekFrom, Write};
    let d = home();
    let s = ProcStats::create(d.path(), 5, 42, 7, false).unwrap();
    s.update(|t| {
        t.point(303, false);
    });
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(stats_path(d.path(), 5))
        .unwrap();
    f.seek(SeekFrom::Start((W_SEQ * 8) as u64)).unwrap();
    f.write_all(&3u64.to_le_bytes()).unwrap();
    drop(f);
    let started = std::time::Instant::now();
    let r = ProcStats::open(&stats_path(d.path(), 5)).unwrap().read();
    assert_eq!((r.pid, r.points.len()), (42, 1));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
