//! Unit tests of the registry.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::maps::MapType;

fn record(name: &str) -> ObjectRecord {
    ObjectRecord {
        format: RECORD_FORMAT,
        name: name.into(),
        id: 0,
        replaced: None,
        object_file: "object.o".into(),
        object_sha256: sha256_hex(b"ELF"),
        object_size: 3,
        source_path: None,
        loaded_at_unix: 1,
        globals: Default::default(),
        maps: vec![MapBinding {
            index: 0,
            object_name: "counts".into(),
            registry_name: "counts".into(),
            spec: spec(),
            created: true,
        }],
        programs: vec![ProgramRecord {
            name: "f".into(),
            section: "cuda/cuMemAlloc".into(),
            insn_count: 2,
            links: vec![LinkRecord {
                attach_point: "cuMemAlloc".into(),
                requested: "cudaMalloc".into(),
                phase: Phase::Entry,
                priority: 0,
            }],
        }],
        shadow: false,
    }
}

#[test]
fn records_without_a_shadow_field_read_as_enforced() {
    let mut v = serde_json::to_value(record("old")).unwrap();
    assert!(v.get("shadow").is_none(), "enforced records omit the field");
    let r: ObjectRecord = serde_json::from_value(v.clone()).unwrap();
    assert!(!r.shadow);
    v["shadow"] = serde_json::Value::Bool(true);
    let r: ObjectRecord = serde_json::from_value(v).unwrap();
    assert!(r.shadow);
}

fn spec() -> MapSpec {
    MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 16,
        flags: 0,
    }
}

#[test]
fn creates_private_dirs_and_refuses_insecure_ones() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    let r = Registry::open(&home).unwrap();
    let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    drop(r);
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Registry::open(&home).unwrap_err();
    assert!(matches!(e, RegistryError::Insecure { .. }), "{e}");
    assert!(e.to_string().contains("writable by group or others"), "{e}");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o720)).unwrap();
    assert!(matches!(
        Registry::open(&home),
        Err(RegistryError::Insecure { .. })
    ));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o750)).unwrap();
    Registry::open(&home).unwrap();
    let f = d.path().join("file");
    std::fs::write(&f, b"").unwrap();
    assert!(Registry::open(&f).is_err());
}

#[test]
fn publish_replace_unload_bump_generation() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let g0 = r.generation();
    {
        let mut w = r.writer().unwrap();
        let (_m, created) = w
            .open_or_create_map("counts", &spec(), &MapMeta::default())
            .unwrap();
        assert!(created);
        let (_m, created) = w
            .open_or_create_map("counts", &spec(), &MapMeta::default())
            .unwrap();
        assert!(!created);
        w.publish_object(&record("p1"), b"ELF").unwrap();
    }
    let g1 = r.generation();
    assert_eq!(g1, g0 + 1);
    let s = r.snapshot().unwrap();
    assert_eq!(s.objects, vec![record("p1")]);
    assert_eq!(r.object_bytes("p1").unwrap(), b"ELF");
    // Replace atomically.
    let mut r2 = record("p1");
    r2.programs[0].links[0].priority = 5;
    r.writer().unwrap().publish_object(&r2, b"ELF").unwrap();
    assert_eq!(r.object("p1").unwrap(), r2);
    assert!(r.generation() > g1);
    // A map in use cannot be removed without force.
    let e = r.writer().unwrap().remove_map("counts", false).unwrap_err();
    assert!(matches!(e, RegistryError::MapInUse { .. }), "{e}");
    // Unloading retires the maps nothing else binds: they go at commit.
    let mut w = r.writer().unwrap();
    w.remove_object("p1").unwrap();
    assert!(matches!(
        r.object("p1"),
        Err(RegistryError::NoSuchProgram { .. })
    ));
    assert_eq!(r.map_names().unwrap(), ["counts"]);
    w.commit();
    assert_eq!(r.map_names().unwrap(), Vec::<String>::new());
    // A reader-only snapshot sees nothing left behind.
    assert!(std::fs::read_dir(r.progs_dir()).unwrap().next().is_none());
}

#[test]
fn leftovers_of_a_crashed_writer_are_ignored_then_cleaned() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    // A dead writer (pid 0 never exists as a process) left a half-built directory, a
    // half-built map and a program directory without metadata.
    std::fs::create_dir(r.progs_dir().join(".tmp-0-x")).unwrap();
    std::fs::write(r.maps_dir().join(".tmp-0-m"), b"junk").unwrap();
    std::fs::create_dir(r.progs_dir().join("half")).unwrap();
    let s = r.snapshot().unwrap();
    assert!(s.objects.is_empty());
    assert_eq!(s.problems.len(), 1);
    assert!(r.map_names().unwrap().is_empty());
    drop(r.writer().unwrap());
    assert!(!r.progs_dir().join(".tmp-0-x").exists());
    assert!(!r.maps_dir().join(".tmp-0-m").exists());
    // A tampered object is detected.
    r.writer()
        .unwrap()
        .publish_object(&record("p"), b"ELF")
        .unwrap();
    std::fs::write(r.progs_dir().join("p/object.o"), b"ELG").unwrap();
    assert!(matches!(
        r.object_bytes("p"),
        Err(RegistryError::HashMismatch { .. })
    ));
    assert!(matches!(
        r.object("../x"),
        Err(RegistryError::InvalidName { .. })
    ));
}

#[test]
fn process_table_and_generation_wait() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    {
        let slot = r.register_process().unwrap();
        slot.ack(7);
        let ps = r.control().processes();
        assert_eq!(ps.len(), 1);
        assert_eq!(ps[0].pid, std::process::id());
        assert_eq!(ps[0].acked_generation, 7);
    }
    assert!(r.control().processes().is_empty());
    let g = r.generation();
    let t0 = std::time::Instant::now();
    assert_eq!(
        r.control()
            .wait_change(g, std::time::Duration::from_millis(30)),
        g
    );
    assert!(t0.elapsed() >= std::time::Duration::from_millis(25));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            r.writer()
                .unwrap()
                .create_map("m", &spec(), &MapMeta::default())
                .unwrap();
        });
        let g2 = r
            .control()
            .wait_change(g, std::time::Duration::from_secs(10));
        assert_eq!(g2, g + 1);
    });
}

#[test]
fn trace_ring_is_created_once_and_receives_trace_lines() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let g = r.generation();
    let ring = r.trace_ring().unwrap();
    assert_eq!(r.trace_ring().unwrap().path(), ring.path());
    // No policy changed: processes must not rebuild their chains for it.
    assert_eq!(r.generation(), g);
    assert_eq!(ring.name(), TRACE_RING);
    assert_eq!(ring.spec().map_type, MapType::RingBuf);
    ring.ringbuf_output(b"hello\n").unwrap();
    let again = r.trace_ring().unwrap();
    let mut got = Vec::new();
    again.ringbuf_consume(|rec| got.push(rec.to_vec())).unwrap();
    assert_eq!(got, vec![b"hello\n".to_vec()]);
}

#[test]
fn unused_maps_go_unless_pinned_and_names_resolve() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut w = r.writer().unwrap();
    for m in ["counts", "a.local", "b.local", "kept"] {
        w.create_map(m, &spec(), &MapMeta::default()).unwrap();
    }
    w.publish_object(&record("user"), b"ELF").unwrap();
    assert!(w.pin_map("kept").unwrap());
    assert!(!w.pin_map("kept").unwrap(), "already pinned");
    assert!(matches!(
        w.pin_map("nope"),
        Err(RegistryError::NoSuchMap { .. })
    ));
    let all: Vec<String> = ["counts", "a.local", "kept", "gone"]
        .map(String::from)
        .to_vec();
    // `counts` is bound by `user`, `kept` is pinned, `gone` does not exist.
    assert_eq!(w.remove_unused_maps(&all).unwrap(), ["a.local"]);
    // Retired maps go when the change is committed, after the generation moved.
    assert!(r.map_path("a.local").unwrap().exists());
    let g = r.generation();
    assert_eq!(w.commit(), g + 1);
    assert!(!r.map_path("a.local").unwrap().exists());
    let mut w = r.writer().unwrap();
    assert_eq!(r.resolve_map_name("local").unwrap(), "b.local");
    assert_eq!(r.resolve_map_name("counts").unwrap(), "counts");
    assert!(matches!(
        r.resolve_map_name("x"),
        Err(RegistryError::NoSuchMap { .. })
    ));
    w.create_map("c.local", &spec(), &MapMeta::default())
        .unwrap();
    let e = r.resolve_map_name("local").unwrap_err().to_string();
    assert!(e.contains("b.local, c.local"), "{e}");
    // Unpinning an unused map removes it; removing a map drops its pin.
    assert!(w.unpin_map("kept").unwrap());
    drop(w);
    assert!(!r.map_path("kept").unwrap().exists());
    let mut w = r.writer().unwrap();
    assert!(matches!(
        w.unpin_map("kept"),
        Err(RegistryError::NotPinned { .. })
    ));
    w.pin_map("b.local").unwrap();
    w.remove_map("b.local", false).unwrap();
    assert!(!r.is_pinned("b.local"));
}

fn object(name: &str, id: u64, replaced: Option<&ObjectRecord>) -> ObjectRecord {
    let mut o = record(name);
    o.id = id;
    o.maps[0].registry_name = format!("{name}.counts");
    o.replaced = replaced.map(|r| Replaced {
        id: r.id,
        name: r.name.clone(),
    });
    o
}

/// `load NEW --replace OLD` under another name, 200 times back and forth, while a reader
/// takes snapshots in a loop: every replacement moves the generation by exactly one, and
/// no snapshot lacks the object or shows both names.
#[test]
fn replacing_under_another_name_is_one_generation_never_neither_nor_both() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut current = {
        let mut w = r.writer().unwrap();
        let id = w.allocate_ids(2).unwrap();
        let o = object("a", id, None);
        w.create_map("a.counts", &spec(), &MapMeta::default())
            .unwrap()
            .update(&1u32.to_ne_bytes(), &7u64.to_ne_bytes(), 0)
            .unwrap();
        w.publish_object(&o, b"ELF").unwrap();
        w.commit();
        o
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut seen = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let snap = r.snapshot().unwrap();
                let names: Vec<&str> = snap.objects.iter().map(|o| o.name.as_str()).collect();
                assert!(
                    names == ["a"] || names == ["b"],
                    "generation {}: {names:?} ({:?})",
                    snap.generation,
                    snap.problems
                );
                seen += 1;
            }
            seen
        });
        for i in 0..200 {
            let new_name = if i % 2 == 0 { "b" } else { "a" };
            let g = r.generation();
            let mut w = r.writer().unwrap();
            let id = w.allocate_ids(2).unwrap();
            assert!(id > current.id);
            let next = object(new_name, id, Some(&current));
            let m = w
                .take_over_map(&current.maps[0].registry_name, &next.maps[0].registry_name)
                .unwrap();
            m.update(&1u32.to_ne_bytes(), &(8 + i as u64).to_ne_bytes(), 0)
                .unwrap();
            let old = w.replace_object(&current.name, &next, b"ELF").unwrap();
            assert_eq!(old, current);
            let dropped = vec![current.maps[0].registry_name.clone()];
            assert_eq!(w.remove_unused_maps(&dropped).unwrap(), dropped);
            assert_eq!(w.commit(), g + 1);
            assert_eq!(r.generation(), g + 1);
            current = next;
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    // What is left: the last object, its map with the last value, no temporaries.
    assert_eq!(r.snapshot().unwrap().objects, vec![current.clone()]);
    assert_eq!(r.map_names().unwrap(), vec!["a.counts".to_string()]);
    let m = r.open_map("a.counts").unwrap();
    assert_eq!(m.name(), "a.counts");
    assert_eq!(
        m.lookup(&1u32.to_ne_bytes()).unwrap(),
        Some(207u64.to_ne_bytes().to_vec())
    );
    let leftovers: Vec<_> = std::fs::read_dir(r.home())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn replace_refuses_a_missing_name_a_taken_name_and_an_unrelated_record() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut w = r.writer().unwrap();
    let a = object("a", 1, None);
    w.publish_object(&a, b"ELF").unwrap();
    w.publish_object(&object("b", 3, None), b"ELF").unwrap();
    let e = w
        .replace_object("nope", &object("c", 5, None), b"ELF")
        .unwrap_err();
    assert!(matches!(e, RegistryError::NoSuchProgram { .. }), "{e}");
    let e = w
        .replace_object("a", &object("b", 5, Some(&a)), b"ELF")
        .unwrap_err();
    assert!(e.to_string().contains("`b` is loaded too"), "{e}");
    let e = w
        .replace_object("a", &object("c", 5, None), b"ELF")
        .unwrap_err();
    assert!(
        e.to_string().contains("must name the object it replaces"),
        "{e}"
    );
    // Under the same name it is a plain atomic exchange.
    let a2 = object("a", 7, Some(&a));
    assert_eq!(w.replace_object("a", &a2, b"ELF").unwrap(), a);
    assert_eq!(r.object("a").unwrap(), a2);
}

/// A writer killed after publishing the replacement but before removing the replaced
/// object: readers see the new object only, and the next writer finishes the change
/// (removes the old directory and the maps it retired) and moves the generation.
#[test]
fn the_next_writer_finishes_a_killed_replacement() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let old = object("old", 1, None);
    let new = object("new", 3, Some(&old));
    {
        let mut w = r.writer().unwrap();
        w.create_map("old.counts", &spec(), &MapMeta::default())
            .unwrap();
        w.create_map("new.counts", &spec(), &MapMeta::default())
            .unwrap();
        w.publish_object(&old, b"ELF").unwrap();
        w.publish_object(&new, b"ELF").unwrap();
    }
    // What the killed writer (pid 0 never runs) had journaled.
    std::fs::write(
        r.home().join(".tmp-retire-0"),
        br#"{"objects":[{"name":"old","id":1}],"maps":["old.counts"]}"#,
    )
    .unwrap();
    assert_eq!(r.snapshot().unwrap().objects, vec![new.clone()]);
    let g = r.generation();
    drop(r.writer().unwrap());
    assert_eq!(r.generation(), g + 1);
    assert!(!r.progs_dir().join("old").exists());
    assert_eq!(r.map_names().unwrap(), vec!["new.counts".to_string()]);
    assert!(!r.home().join(".tmp-retire-0").exists());
    // Nothing left to finish: the next writer changes nothing.
    drop(r.writer().unwrap());
    assert_eq!(r.generation(), g + 1);
}

#[test]
fn ids_increase_are_never_reused_and_a_bad_counter_is_named() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut w = r.writer().unwrap();
    assert_eq!(w.allocate_ids(3).unwrap(), 1);
    assert_eq!(w.allocate_ids(1).unwrap(), 4);
    // Unloading does not give ids back.
    w.publish_object(&object("x", 4, None), b"ELF").unwrap();
    w.remove_object("x").unwrap();
    assert_eq!(w.allocate_ids(2).unwrap(), 5);
    // A lost counter restarts above what is loaded.
    w.publish_object(&object("y", 20, None), b"ELF").unwrap();
    std::fs::remove_file(r.home().join("ids")).unwrap();
    assert_eq!(w.allocate_ids(1).unwrap(), 22, "id 20 + object + 1 program");
    std::fs::write(r.home().join("ids"), "x\n").unwrap();
    let e = w.allocate_ids(1).unwrap_err();
    assert!(matches!(e, RegistryError::CorruptIds { .. }), "{e}");
}

#[test]
fn taken_over_maps_share_contents_and_pins_recreated_maps_start_empty() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut w = r.writer().unwrap();
    let a = w.create_map("a.m", &spec(), &MapMeta::default()).unwrap();
    a.update(&1u32.to_ne_bytes(), &5u64.to_ne_bytes(), 0)
        .unwrap();
    w.pin_map("a.m").unwrap();
    let b = w.take_over_map("a.m", "b.m").unwrap();
    assert_eq!(b.name(), "b.m");
    assert_eq!(
        b.lookup(&1u32.to_ne_bytes()).unwrap(),
        Some(5u64.to_ne_bytes().to_vec())
    );
    a.update(&2u32.to_ne_bytes(), &6u64.to_ne_bytes(), 0)
        .unwrap();
    assert_eq!(
        b.lookup(&2u32.to_ne_bytes()).unwrap(),
        Some(6u64.to_ne_bytes().to_vec()),
        "one map under two names"
    );
    assert!(r.is_pinned("b.m") && !r.is_pinned("a.m"));
    assert!(matches!(
        w.take_over_map("a.m", "b.m"),
        Err(RegistryError::Map { .. })
    ));
    let mut bigger = spec();
    bigger.value_size = 16;
    let c = w.recreate_map("b.m", &bigger, &MapMeta::default()).unwrap();
    assert_eq!(c.spec(), &bigger);
    assert_eq!(c.lookup(&1u32.to_ne_bytes()).unwrap(), None);
    assert!(r.is_pinned("b.m"));
    assert_eq!(r.open_map("a.m").unwrap().spec(), &spec(), "a.m untouched");
}

/// Every registry file and directory is refused when it is a symbolic link: another
/// registry's control block, map, record, object or stats file, and the registry itself.
#[test]
fn symbolic_links_in_the_registry_are_refused() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let ra = Registry::open(&a).unwrap();
    let rb = Registry::open(&b).unwrap();
    {
        let mut w = rb.writer().unwrap();
        w.create_map("m", &spec(), &MapMeta::default()).unwrap();
        w.publish_object(&record("p"), b"ELF").unwrap();
    }
    {
        let mut w = ra.writer().unwrap();
        w.publish_object(&record("p"), b"ELF").unwrap();
    }
    // The registry reached through a link.
    let link = d.path().join("link");
    symlink(&b, &link).unwrap();
    let e = Registry::open(&link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A sub-directory that is a link.
    let c = d.path().join("c");
    Registry::open(&c).unwrap();
    std::fs::remove_dir(c.join("procs")).unwrap();
    symlink(b.join("procs"), c.join("procs")).unwrap();
    let e = Registry::open(&c).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A map file.
    symlink(b.join("maps/m"), a.join("maps/m")).unwrap();
    assert!(Map::open(&b.join("maps/m")).is_ok());
    assert!(matches!(ra.open_map("m"), Err(RegistryError::Map { .. })));
    // meta.json and the object.
    let pa = a.join("progs/p");
    assert_eq!(ra.object_bytes("p").unwrap(), b"ELF");
    std::fs::remove_file(pa.join("object.o")).unwrap();
    symlink(b.join("progs/p/object.o"), pa.join("object.o")).unwrap();
    assert!(ra.object_bytes("p").is_err(), "object through a link");
    std::fs::remove_file(pa.join("meta.json")).unwrap();
    symlink(b.join("progs/p/meta.json"), pa.join("meta.json")).unwrap();
    assert!(matches!(
        ra.object("p"),
        Err(RegistryError::BadRecord { .. })
    ));
    // A program directory that is a link.
    std::fs::remove_dir_all(&pa).unwrap();
    symlink(b.join("progs/p"), &pa).unwrap();
    assert!(matches!(
        ra.object("p"),
        Err(RegistryError::NoSuchProgram { .. })
    ));
    // A stats file.
    let slot = rb.control().register(std::process::id()).unwrap();
    procstats::ProcStats::create(&b, slot, std::process::id(), 0, false).unwrap();
    let stats = procstats::stats_path(&b, slot);
    assert!(procstats::ProcStats::open(&stats).is_ok());
    let linked = procstats::stats_path(&a, slot);
    symlink(&stats, &linked).unwrap();
    assert!(procstats::ProcStats::open(&linked).is_err());
    // The control block.
    drop(ra);
    std::fs::remove_file(a.join("control")).unwrap();
    symlink(b.join("control"), a.join("control")).unwrap();
    assert!(Registry::open(&a).is_err(), "control block through a link");
}

/// A record whose object file is not a plain name (`../x`) is refused on write and read.
#[test]
fn object_file_names_cannot_leave_the_program_directory() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(&d.path().join("reg")).unwrap();
    let mut bad = record("p");
    bad.object_file = "../../escape".into();
    {
        let mut w = r.writer().unwrap();
        assert!(w.publish_object(&bad, b"ELF").is_err());
        w.publish_object(&record("p"), b"ELF").unwrap();
    }
    let meta = r.progs_dir().join("p/meta.json");
    std::fs::write(&meta, serde_json::to_vec(&bad).unwrap()).unwrap();
    assert!(matches!(
        r.object("p"),
        Err(RegistryError::BadRecord { .. })
    ));
    // A size that does not match the recorded one is refused too.
    let mut wrong = record("p");
    wrong.object_size = 4;
    std::fs::write(&meta, serde_json::to_vec(&wrong).unwrap()).unwrap();
    assert!(r.object_bytes("p").is_err());
}

/// The control block is validated before use: size, magic, version and slot count.
#[test]
fn a_corrupt_control_block_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    drop(Registry::open(&home).unwrap());
    let control = home.join("control");
    let good = std::fs::read(&control).unwrap();
    // (what the message names, offset damaged; `None`: truncated).
    for (want, at) in [
        ("bytes, expected", None),
        ("bad magic", Some(0)),
        ("version", Some(8)),
        ("slots", Some(12)),
    ] {
        let mut b = good.clone();
        match at {
            Some(i) => b[i] = b[i].wrapping_add(1),
            None => b.truncate(100),
        }
        std::fs::write(&control, &b).unwrap();
        match Registry::open(&home) {
            Err(e @ RegistryError::CorruptControl { .. }) => {
                assert!(e.to_string().contains(want), "{e}")
            }
            other => panic!("{want}: {other:?}"),
        }
    }
    std::fs::write(&control, &good).unwrap();
    Registry::open(&home).unwrap();
}

#[test]
fn a_writer_removes_the_kept_stats_files_of_dead_processes() {
    let d = tempfile::tempdir().unwrap();
    let r = Registry::open(d.path()).unwrap();
    let procs = d.path().join("procs");
    // Beyond any pid_max: a process that no longer exists.
    let dead = procs.join(".tmp-stale-4194305-1");
    let live = procs.join(format!(".tmp-stale-{}-2", std::process::id()));
    std::fs::write(&dead, b"x").unwrap();
    std::fs::write(&live, b"x").unwrap();
    drop(r.writer().unwrap());
    assert!(!dead.exists(), "a dead process's kept file is removed");
    assert!(live.exists(), "a live process removes its own");
}

#[test]
fn the_stale_sweep_removes_only_kept_files_of_dead_processes() {
    let d = tempfile::tempdir().unwrap();
    let procs = d.path();
    let own = std::process::id();
    let names = [
        ".tmp-stale-4194305-1".to_string(), // dead (beyond any pid_max)
        ".tmp-stale-4194306-3".to_string(), // dead
        format!(".tmp-stale-{own}-2"),      // alive: its owner removes it
        ".tmp-0-4194305".to_string(),       // a creation in progress, not a kept file
        "0".to_string(),                    // a stats file
    ];
    for n in &names {
        std::fs::write(procs.join(n), b"x").unwrap();
    }
    assert_eq!(procstats::remove_dead_stale(procs), 2);
    let left: std::collections::BTreeSet<String> = std::fs::read_dir(procs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let want: std::collections::BTreeSet<String> = names[2..].iter().cloned().collect();
    assert_eq!(left, want);
    assert_eq!(procstats::remove_dead_stale(&procs.join("missing")), 0);
}
