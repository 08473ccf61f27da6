//! `$GPUBPF_HOME` must be a private directory: owned by the user, not writable by group or
//! others. Anything else is refused with a message that says why and what to do.

use std::os::unix::fs::PermissionsExt;

use gpubpf_runtime::registry::{Registry, RegistryError};

fn refused(path: &std::path::Path) -> String {
    match Registry::open(path) {
        Err(e @ RegistryError::Insecure { .. }) => e.to_string(),
        Err(e) => panic!("expected an insecure-directory error, got: {e}"),
        Ok(_) => panic!("{} was accepted", path.display()),
    }
}

#[test]
fn bad_permissions_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    Registry::open(&home).unwrap();
    for (mode, ok) in [
        (0o700, true),
        (0o750, true),
        (0o755, true),
        (0o770, false),
        (0o702, false),
        (0o1777, false),
    ] {
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(mode)).unwrap();
        match Registry::open(&home) {
            Ok(_) => assert!(ok, "mode {mode:o} accepted"),
            Err(e) => {
                assert!(!ok, "mode {mode:o} refused: {e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("writable by group or others") && msg.contains("chmod 700"),
                    "{msg}"
                );
            }
        }
    }
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Sub-directories are checked too.
    std::fs::set_permissions(home.join("maps"), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(refused(&home).contains("maps"));
    std::fs::set_permissions(home.join("maps"), std::fs::Permissions::from_mode(0o700)).unwrap();
    // Not a directory.
    let f = d.path().join("file");
    std::fs::write(&f, b"").unwrap();
    assert!(refused(&f).contains("not a directory"));
}

#[test]
fn a_directory_of_another_user_is_refused() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing a directory's owner needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&home, Some(54321), None).unwrap();
    let msg = refused(&home);
    assert!(msg.contains("owned by uid 54321"), "{msg}");
}

#[test]
fn new_registries_are_private() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("new");
    Registry::open(&home).unwrap();
    for p in [home.clone(), home.join("maps"), home.join("progs")] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", p.display());
    }
    let mode = std::fs::metadata(home.join("control"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}
