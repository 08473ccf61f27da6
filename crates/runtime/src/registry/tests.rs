//! Unit tests of the registry.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::maps::MapType;

fn record(name: &str) -> ObjectRecord {
    ObjectRecord {
        format: RECORD_FORMAT,
        name: name.into(),
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
    }
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
    r.writer().unwrap().remove_object("p1").unwrap();
    assert!(matches!(
        r.object("p1"),
        Err(RegistryError::NoSuchProgram { .. })
    ));
    r.writer().unwrap().remove_map("counts", false).unwrap();
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
    assert!(!r.map_path("kept").unwrap().exists());
    assert!(matches!(
        w.unpin_map("kept"),
        Err(RegistryError::NotPinned { .. })
    ));
    w.pin_map("b.local").unwrap();
    w.remove_map("b.local", false).unwrap();
    assert!(!r.is_pinned("b.local"));
}
