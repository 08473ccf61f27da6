//! A registry writer SIGKILLed at any point leaves a registry that loads: every listed
//! program reads back with a matching hash, every listed map opens and validates, and the
//! next writer gets the lock (recovered from the dead owner) and cleans up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpubpf_runtime::maps::{MapMeta, MapSpec, MapType};
use gpubpf_runtime::registry::{sha256_hex, ObjectRecord, Registry, RECORD_FORMAT};

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
