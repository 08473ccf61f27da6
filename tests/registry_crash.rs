//! A registry writer SIGKILLed at any point leaves a registry that loads: every listed
//! program reads back with a matching hash, every listed map opens and validates, and the
//! next writer gets the lock (recovered from the dead owner) and cleans up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpubpf_runtime::maps::{MapMeta, MapSpec, MapType};
use gpubpf_runtime::registry::{
    sha256_hex, MapBinding, ObjectRecord, Registry, Replaced, RECORD_FORMAT,
};

const ENV_HOME: &str = "GPUBPF_TEST_HOME";

fn record(name: &str, object: &[u8]) -> ObjectRecord {
    ObjectRecord {
        format: RECORD_FORMAT,
        name: name.into(),
        id: 0,
        replaced: None,
        object_file: "object.o".into(),
        object_sha256: sha256_hex(object),
        object_size: object.len() as u64,
        source_path: None,
        loaded_at_unix: 0,
        globals: Default::default(),
        maps: Vec::new(),
        programs: Vec::new(),
        shadow: false,
    }
}

#[test]
#[ignore = "worker process of killed_writers_leave_a_loadable_registry"]
fn worker_registry_writer() {
    let home = PathBuf::from(std::env::var_os(ENV_HOME).unwrap());
    let reg = Registry::open(&home).unwrap();
    let spec = MapSpec {
        map_type: MapType::Hash,
        key_size: 8,
        value_size: 64,
        max_entries: 2048,
        flags: 0,
    };
    let object = vec![0x7fu8; 64 * 1024];
    for i in 0u64.. {
        let mut w = reg.writer().unwrap();
        let name = format!("p{}", i % 3);
        let mut obj = object.clone();
        obj[..8].copy_from_slice(&i.to_ne_bytes());
        w.publish_object(&record(&name, &obj), &obj).unwrap();
        let m = format!("m{}", i % 4);
        if w.create_map(&m, &spec, &MapMeta::default()).is_err() {
            let _ = w.remove_map(&m, true);
        }
        if i % 5 == 1 {
            let _ = w.remove_object(&format!("p{}", (i + 1) % 3));
        }
    }
}

#[test]
fn killed_writers_leave_a_loadable_registry() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    drop(Registry::open(&home).unwrap());
    let mut recovered = 0;
    for round in 0..20u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "worker_registry_writer",
                "--test-threads=1",
            ])
            .env(ENV_HOME, &home)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(10 + (round * 7) % 23));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();

        let reg = Registry::open(&home).unwrap();
        let snap = reg.snapshot().unwrap();
        assert!(
            snap.problems.is_empty(),
            "round {round}: {:?}",
            snap.problems
        );
        for o in &snap.objects {
            let bytes = reg.object_bytes(&o.name).unwrap();
            assert_eq!(bytes.len(), 64 * 1024);
        }
        for m in reg.map_names().unwrap() {
            reg.open_map(&m)
                .unwrap_or_else(|e| panic!("round {round}: map {m}: {e}"));
        }
        let before = gpubpf_runtime::maps::lock::recoveries();
        let g = reg.generation();
        drop(reg.writer().unwrap());
        recovered += gpubpf_runtime::maps::lock::recoveries() - before;
        assert_eq!(
            reg.generation(),
            g,
            "an empty write does not bump the generation"
        );
        // The writer removed every temporary a dead writer left.
        for dir in [reg.maps_dir(), reg.progs_dir(), home.clone()] {
            for e in std::fs::read_dir(dir).unwrap() {
                let n = e.unwrap().file_name();
                assert!(
                    !n.to_string_lossy().starts_with(".tmp-"),
                    "{n:?} left behind"
                );
            }
        }
    }
    eprintln!("writer lock recovered from a dead owner {recovered} times in 20 kills");
}

fn spec() -> MapSpec {
    MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 64,
        flags: 0,
    }
}

/// Object `name` (id `id`) binding its private map `name.m`.
fn replacing_record(name: &str, id: u64, replaced: Option<&ObjectRecord>) -> ObjectRecord {
    let mut r = record(name, b"ELF");
    r.id = id;
    r.replaced = replaced.map(|o| Replaced {
        id: o.id,
        name: o.name.clone(),
    });
    r.maps = vec![MapBinding {
        index: 0,
        object_name: "m".into(),
        registry_name: format!("{name}.m"),
        spec: spec(),
        created: false,
    }];
    r
}

/// Replaces the one loaded object (`x` or `y`) by the other, taking its map over and
/// counting in it, forever.
#[test]
#[ignore = "worker process of killed_replacements_leave_exactly_one_object"]
fn worker_replacing_writer() {
    let home = PathBuf::from(std::env::var_os(ENV_HOME).unwrap());
    let reg = Registry::open(&home).unwrap();
    loop {
        let mut w = reg.writer().unwrap();
        let cur = reg.snapshot().unwrap().objects.remove(0);
        let next = if cur.name == "x" { "y" } else { "x" };
        let id = w.allocate_ids(1).unwrap();
        let rec = replacing_record(next, id, Some(&cur));
        let m = w
            .take_over_map(&format!("{}.m", cur.name), &format!("{next}.m"))
            .unwrap();
        let n = m
            .lookup(&0u32.to_ne_bytes())
            .unwrap()
            .map_or(0, |v| u64::from_ne_bytes(v.try_into().unwrap()));
        m.update(&0u32.to_ne_bytes(), &(n + 1).to_ne_bytes(), 0)
            .unwrap();
        w.replace_object(&cur.name, &rec, b"ELF").unwrap();
        w.remove_unused_maps(&[format!("{}.m", cur.name)]).unwrap();
        w.commit();
    }
}

/// A writer replacing an object under another name, SIGKILLed at any point: readers see
/// exactly one of the two names, and the next writer finishes or undoes what was left
/// (the replaced object and its map name go once the replacement was published; a second
/// name taken for an unpublished replacement goes), so that replacing goes on.
#[test]
fn killed_replacements_leave_exactly_one_object() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("reg");
    {
        let reg = Registry::open(&home).unwrap();
        let mut w = reg.writer().unwrap();
        let id = w.allocate_ids(1).unwrap();
        w.create_map("x.m", &spec(), &MapMeta::default()).unwrap();
        w.publish_object(&replacing_record("x", id, None), b"ELF")
            .unwrap();
    }
    let mut last = 0;
    for round in 0..20u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "worker_replacing_writer",
                "--test-threads=1",
            ])
            .env(ENV_HOME, &home)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(15 + (round * 7) % 23));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();

        let reg = Registry::open(&home).unwrap();
        let snap = reg.snapshot().unwrap();
        let names: Vec<&str> = snap.objects.iter().map(|o| o.name.as_str()).collect();
        assert!(names == ["x"] || names == ["y"], "round {round}: {names:?}");
        let name = names[0].to_string();
        drop(reg.writer().unwrap());
        let g = reg.generation();
        drop(reg.writer().unwrap());
        assert_eq!(
            reg.generation(),
            g,
            "round {round}: all finished by one writer"
        );
        let progs: Vec<String> = std::fs::read_dir(reg.progs_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(progs, std::slice::from_ref(&name), "round {round}");
        assert_eq!(
            reg.map_names().unwrap(),
            [format!("{name}.m")],
            "round {round}"
        );
        for e in std::fs::read_dir(reg.home()).unwrap() {
            let n = e.unwrap().file_name();
            assert!(
                !n.to_string_lossy().starts_with(".tmp-"),
                "{n:?} left behind"
            );
        }
        // The count never goes back: one map all along.
        let n = reg
            .open_map(&format!("{name}.m"))
            .unwrap()
            .lookup(&0u32.to_ne_bytes())
            .unwrap()
            .map_or(0, |v| u64::from_ne_bytes(v.try_into().unwrap()));
        assert!(n >= last, "round {round}: {n} < {last}");
        last = n;
    }
    assert!(last > 20, "the workers replaced {last} times");
    eprintln!("{last} replacements in 20 kills");
}
