//! System registries: one registry for a whole node, owned by its operator (normally
//! root), that every user's processes under the shim obey and only the operator changes.
//!
//! ```text
//! /run/gpubpf/             mode 0755, owned by the operator
//!   system                 marker: this is a system registry (owner's file, 0644)
//!   control                0644: generation, futex word, statistics deadline, writer lock
//!   maps/NAME              per-map access for applications: 0666 read-write (default),
//!                          0644 read-only (default for `.rodata`), 0600 none
//!   progs/NAME/…           0755 / 0644: every process re-verifies what it runs
//!   pins/                  0755
//!   procs/                 1777 (sticky): every process writes its own stats file
//!   procs/table            0666: the process table (registration and acknowledgements)
//! ```
//!
//! What each party can do is in docs/security.md (System mode). In short: the owner does
//! everything a user-mode registry allows; any other user reads programs, metadata and the
//! maps the owner made readable, and their processes run the owner's policies, using the
//! maps the owner made writable; nobody else loads, replaces or unloads programs, sets
//! globals, changes map access or takes the writer lock (the control block is not writable
//! by them). The limits: a map declared read-write is writable by every user (a process
//! can write the counters its policy keeps, and those of other processes in the same map),
//! the process table can be scribbled on by any user (it feeds `gpubpf ps` and
//! `load --wait`, never what runs), and a process can always leave the shim out of itself
//! (a library it loaded cannot bind it).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{RegistryError, TABLE_FILE};

/// Where the shim and the CLI look for a system registry when `GPUBPF_HOME` is not set.
pub const SYSTEM_HOME: &str = "/run/gpubpf";
/// The marker file that makes a registry directory a system registry.
pub const SYSTEM_MARKER: &str = "system";

/// Which kind of registry is open, and whose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Mode {
    /// Private to one user (`$GPUBPF_HOME`, mode 0700).
    User,
    /// A node's registry: `owner` changes it, every user's processes obey it.
    System { owner: u32 },
}

/// What applications (processes of users other than the owner) may do with a map of a
/// system registry, declared by the owner (`gpubpf load --map-access`, `gpubpf maps
/// access`) and kept as the map file's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read and write (mode 0666): what a policy that counts in the map needs.
    Rw,
    /// Read only (mode 0644): programs that write it are rejected in those processes.
    Ro,
    /// Neither (mode 0600): objects binding it cannot run in those processes.
    None,
}

impl Access {
    /// The map file mode that declares this access.
    pub fn file_mode(self) -> u32 {
        match self {
            Access::Rw => 0o666,
            Access::Ro => 0o644,
            Access::None => 0o600,
        }
    }

    /// The access a map file's mode declares.
    pub fn of_mode(mode: u32) -> Access {
        if mode & 0o002 != 0 {
            Access::Rw
        } else if mode & 0o004 != 0 {
            Access::Ro
        } else {
            Access::None
        }
    }

    /// `rw`, `ro` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            Access::Rw => "rw",
            Access::Ro => "ro",
            Access::None => "none",
        }
    }
}

impl std::str::FromStr for Access {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rw" => Ok(Access::Rw),
            "ro" => Ok(Access::Ro),
            "none" => Ok(Access::None),
            _ => Err(format!("`{s}` is not a map access (rw, ro or none)")),
        }
    }
}

/// Whether `home` holds a system registry (its marker is a regular file, not a link).
pub fn is_system_home(home: &Path) -> bool {
    std::fs::symlink_metadata(home.join(SYSTEM_MARKER)).is_ok_and(|m| m.is_file())
}

fn insecure(path: &Path, reason: String) -> RegistryError {
    RegistryError::Insecure {
        path: path.to_path_buf(),
        reason,
    }
}

/// Checks that `path` is owned by `owner`, is of the expected kind (never a link) and that
/// no one else may write it (`shared_dir`: a sticky directory everyone may write into).
fn check_owned(path: &Path, owner: u32, dir: bool, shared_dir: bool) -> Result<(), RegistryError> {
    let md = std::fs::symlink_metadata(path).map_err(|source| RegistryError::Io {
        path: path.to_path_buf(),
        op: "stat",
        source,
    })?;
    if md.file_type().is_symlink() {
        return Err(insecure(path, "it is a symbolic link".into()));
    }
    if dir != md.is_dir() || (!dir && !md.is_file()) {
        let want = if dir { "a directory" } else { "a regular file" };
        return Err(insecure(path, format!("it is not {want}")));
    }
    if md.uid() != owner {
        return Err(insecure(
            path,
            format!(
                "it is owned by uid {}, not by the registry's owner (uid {owner})",
                md.uid()
            ),
        ));
    }
    let mode = md.mode() & 0o7777;
    if shared_dir {
        if mode & 0o1000 == 0 {
            return Err(insecure(
                path,
                format!("it is writable by everyone without the sticky bit (mode {mode:04o}); run `chmod 1777`"),
            ));
        }
    } else if mode & 0o022 != 0 {
        return Err(insecure(
            path,
            format!("it is writable by group or others (mode {mode:04o})"),
        ));
    }
    Ok(())
}

/// Checks a system registry before use; returns its owner (the directory's). Refused: a
/// link anywhere, a part owned by someone else, anything but `procs/` (sticky) and its
/// table writable by group or others.
pub fn check_system_home(home: &Path) -> Result<u32, RegistryError> {
    let md = std::fs::symlink_metadata(home).map_err(|source| RegistryError::Io {
        path: home.to_path_buf(),
        op: "stat",
        source,
    })?;
    let owner = md.uid();
    check_owned(home, owner, true, false)?;
    check_owned(&home.join(SYSTEM_MARKER), owner, false, false)?;
    check_owned(&home.join("control"), owner, false, false)?;
    for sub in ["maps", "progs"] {
        check_owned(&home.join(sub), owner, true, false)?;
    }
    let procs = home.join("procs");
    check_owned(&procs, owner, true, true)?;
    // The table is world-writable by design; it must still be the owner's regular file.
    let table = procs.join(TABLE_FILE);
    let md = std::fs::symlink_metadata(&table).map_err(|source| RegistryError::Io {
        path: table.clone(),
        op: "stat",
        source,
    })?;
    if !md.is_file() || md.uid() != owner {
        return Err(insecure(
            &table,
            format!("it is not a regular file of the registry's owner (uid {owner})"),
        ));
    }
    Ok(owner)
}

/// Checks a directory of a system registry that only its owner writes and everyone reads
/// (the verification cache, `program::verify_cache`): the owner's, not a link, writable by
/// no one else.
pub fn check_owner_dir(dir: &Path, owner: u32) -> Result<(), RegistryError> {
    check_owned(dir, owner, true, false)
}

/// Creates (when missing) a directory of a system registry that only its owner writes and
/// everyone reads (mode 0755), then checks it ([`check_owner_dir`]).
pub fn ensure_owner_dir(dir: &Path, owner: u32) -> Result<(), RegistryError> {
    if std::fs::symlink_metadata(dir).is_err() {
        mkdir(dir, 0o755)?;
    }
    check_owner_dir(dir, owner)
}

fn chmod(path: &Path, mode: u32) -> Result<(), RegistryError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        RegistryError::Io {
            path: path.to_path_buf(),
            op: "chmod",
            source,
        }
    })
}

fn mkdir(path: &Path, mode: u32) -> Result<(), RegistryError> {
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(RegistryError::Io {
                path: path.to_path_buf(),
                op: "create directory",
                source,
            })
        }
    }
    // The umask may have removed bits; set them exactly.
    chmod(path, mode)
}

/// Creates (or completes) a system registry at `home`, owned by the caller. Refuses a
/// directory that is a user registry, or a system registry of another owner.
pub fn init_system(home: &Path) -> Result<PathBuf, RegistryError> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Ok(md) = std::fs::symlink_metadata(home) {
        if md.file_type().is_symlink() || !md.is_dir() {
            return Err(insecure(home, "it exists and is not a directory".into()));
        }
        if md.uid() != me {
            return Err(RegistryError::NotOwner {
                path: home.to_path_buf(),
                owner: md.uid(),
            });
        }
        if home.join("control").exists() && !is_system_home(home) {
            return Err(insecure(
                home,
                "it is a user registry; choose another directory for the system registry".into(),
            ));
        }
    }
    mkdir(home, 0o755)?;
    for sub in ["maps", "progs", "pins"] {
        mkdir(&home.join(sub), 0o755)?;
    }
    mkdir(&home.join("procs"), 0o1777)?;
    let control = home.join("control");
    super::control::Control::open_or_create(&control)?;
    chmod(&control, 0o644)?;
    super::control::Control::create_table(&home.join("procs").join(TABLE_FILE))?;
    let marker = home.join(SYSTEM_MARKER);
    if !is_system_home(home) {
        let tmp = home.join(format!(".tmp-system-{}", std::process::id()));
        std::fs::write(&tmp, format!("gpubpf system registry, owner uid {me}\n")).map_err(
            |source| RegistryError::Io {
                path: tmp.clone(),
                op: "write",
                source,
            },
        )?;
        chmod(&tmp, 0o644)?;
        std::fs::rename(&tmp, &marker).map_err(|source| RegistryError::Io {
            path: marker.clone(),
            op: "publish",
            source,
        })?;
    }
    // The rings every process writes (bpf_printk lines, decisions).
    let reg = super::Registry::open(home)?;
    reg.trace_ring()?;
    reg.audit_ring()?;
    Ok(home.to_path_buf())
}

/// Sets the file mode of a system registry's file to `mode` (the owner's tool).
pub(super) fn set_mode(path: &Path, mode: u32) -> Result<(), RegistryError> {
    chmod(path, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_is_the_map_files_mode_and_round_trips() {
        for a in [Access::Rw, Access::Ro, Access::None] {
            assert_eq!(Access::of_mode(a.file_mode()), a);
            assert_eq!(a.name().parse::<Access>(), Ok(a));
        }
        // Only the bits for others count: a group bit grants applications nothing.
        assert_eq!(Access::of_mode(0o660), Access::None);
        assert_eq!(Access::of_mode(0o100644), Access::Ro);
        assert!("write".parse::<Access>().is_err());
    }

    #[test]
    fn the_system_registry_is_the_default_unless_gpubpf_home_names_another() {
        let d = tempfile::tempdir().unwrap();
        let system = d.path().join("run-gpubpf");
        let choose = super::super::home::choose_home;
        // No system registry: the user's own.
        assert_ne!(choose(None, &system), system);
        init_system(&system).unwrap();
        assert_eq!(choose(None, &system), system);
        assert_eq!(choose(Some("".into()), &system), system);
        assert_eq!(
            choose(Some("/elsewhere".into()), &system),
            Path::new("/elsewhere")
        );
        let reg = super::super::Registry::open(&system).unwrap();
        assert!(matches!(reg.mode(), Mode::System { .. }) && reg.is_owner());
    }

    #[test]
    fn a_user_registry_is_not_a_system_registry() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("reg");
        super::super::Registry::open(&home).unwrap();
        assert!(!is_system_home(&home));
        assert_eq!(
            super::super::Registry::open(&home).unwrap().mode(),
            Mode::User
        );
        // Turning it into a system registry is refused.
        assert!(matches!(
            init_system(&home),
            Err(RegistryError::Insecure { .. })
        ));
    }
}
