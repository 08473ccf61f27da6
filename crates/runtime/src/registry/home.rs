//! Locating and checking `$GPUBPF_HOME`.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::RegistryError;

/// Environment variable naming the registry directory.
pub const HOME_ENV: &str = "GPUBPF_HOME";

/// The registry directory: `$GPUBPF_HOME`, else the node's system registry
/// ([`super::system::SYSTEM_HOME`]) when there is one, else `/dev/shm/gpubpf-$UID` (tmpfs,
/// identical for every process of the user whatever its environment), else
/// `$XDG_RUNTIME_DIR/gpubpf`, else `/tmp/gpubpf-$UID`.
pub fn default_home() -> PathBuf {
    choose_home(
        std::env::var_os(HOME_ENV),
        Path::new(super::system::SYSTEM_HOME),
    )
}

/// [`default_home`] with `$GPUBPF_HOME` = `env` and the system registry looked for at
/// `system`.
pub(super) fn choose_home(env: Option<std::ffi::OsString>, system: &Path) -> PathBuf {
    if let Some(h) = env.filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    if super::system::is_system_home(system) {
        return system.to_path_buf();
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if let Some(shm) = shared_memory_dir() {
        return shm.join(format!("gpubpf-{uid}"));
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|h| !h.is_empty()) {
        return PathBuf::from(x).join("gpubpf");
    }
    PathBuf::from(format!("/tmp/gpubpf-{uid}"))
}

/// `/dev/shm` when this machine has it: tmpfs, where registries belong (their maps are
/// shared file mappings; [`Filesystem::in_memory`] says what a disk costs them).
pub fn shared_memory_dir() -> Option<&'static Path> {
    Some(Path::new("/dev/shm")).filter(|d| d.is_dir())
}

/// Creates `dir` (mode 0700) when missing, then checks that it is a directory owned by us
/// and not writable by group or others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), RegistryError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            // The umask may have removed bits we asked for, never added any; make sure.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
                |source| RegistryError::Io {
                    path: dir.to_path_buf(),
                    op: "chmod",
                    source,
                },
            )?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(RegistryError::Io {
                path: dir.to_path_buf(),
                op: "create directory",
                source,
            })
        }
    }
    check_private_dir(dir)
}

/// Refuses a directory that another user owns, that group/others may write, or that is a
/// symbolic link (whoever may write the directory holding the link could point it
/// elsewhere).
pub fn check_private_dir(dir: &Path) -> Result<(), RegistryError> {
    let md = std::fs::symlink_metadata(dir).map_err(|source| RegistryError::Io {
        path: dir.to_path_buf(),
        op: "stat",
        source,
    })?;
    if md.file_type().is_symlink() {
        return Err(RegistryError::Insecure {
            path: dir.to_path_buf(),
            reason: "it is a symbolic link; name the directory itself".into(),
        });
    }
    if !md.is_dir() {
        return Err(RegistryError::Insecure {
            path: dir.to_path_buf(),
            reason: "it is not a directory".into(),
        });
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me {
        return Err(RegistryError::Insecure {
            path: dir.to_path_buf(),
            reason: format!("it is owned by uid {}, not by you (uid {me})", md.uid()),
        });
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(RegistryError::Insecure {
            path: dir.to_path_buf(),
            reason: format!(
                "it is writable by group or others (mode {mode:04o}); run `chmod 700 {}`",
                dir.display()
            ),
        });
    }
    Ok(())
}

/// The kind of filesystem a registry lives on: maps are shared file mappings, so where the
/// files are decides what writing to a map costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filesystem {
    /// Its name (`tmpfs`, `ext4`…), or its magic number in hex when unknown here.
    pub name: String,
    /// Memory only (tmpfs, ramfs): a page of a map is never written back, so a written
    /// page stays writable. On a disk filesystem the kernel writes dirty map pages back
    /// and write-protects them again: the next store to each faults through the filesystem
    /// (1.4 µs against 9 ns on the development VM's ext4, docs/gpu-runs.md 2026-12-07).
    pub in_memory: bool,
}

/// Names of the filesystems a registry is likely to meet, by `statfs` magic.
const FILESYSTEMS: &[(i64, &str, bool)] = &[
    (0x0102_1994, "tmpfs", true),
    (0x8584_58f6, "ramfs", true),
    (0xef53, "ext4", false), // ext2, ext3 and ext4 share it
    (0x5846_5342, "xfs", false),
    (0x9123_683e, "btrfs", false),
    (0x794c_7630, "overlayfs", false),
    (0x6969, "nfs", false),
    (0x0102_1997, "9p", false),
    (0x6573_5546, "fuse", false), // virtiofs too
];

/// The filesystem `dir` is on.
pub fn filesystem(dir: &Path) -> Result<Filesystem, RegistryError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| RegistryError::Io {
        path: dir.to_path_buf(),
        op: "statfs",
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: `st` is plain data that statfs fills; `c` is a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above; both pointers are valid for the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(RegistryError::Io {
            path: dir.to_path_buf(),
            op: "statfs",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(filesystem_of(st.f_type as i64))
}

fn filesystem_of(magic: i64) -> Filesystem {
    match FILESYSTEMS.iter().find(|(m, _, _)| *m == magic) {
        Some(&(_, name, in_memory)) => Filesystem {
            name: name.to_string(),
            in_memory,
        },
        None => Filesystem {
            name: format!("{magic:#x}"),
            in_memory: false,
        },
    }
}

/// Largest registry file read whole (`meta.json`, objects, journals, the id counter).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads a whole regular file of the registry without following a symbolic link (at the
/// last component: the directories above were checked by [`check_private_dir`]), refusing
/// anything but a regular file and anything over [`MAX_FILE_BYTES`].
pub fn read_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if md.len() > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "{} bytes, more than the {MAX_FILE_BYTES} a registry file may hold",
            md.len()
        )));
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    f.by_ref().take(MAX_FILE_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other("file grew past the size limit"));
    }
    Ok(buf)
}

/// Whether `path` is a directory itself (not a symbolic link to one).
pub fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod filesystem_tests {
    use super::{filesystem, filesystem_of, shared_memory_dir};
    use std::path::Path;

    #[test]
    fn known_magics_are_named_and_unknown_ones_shown_in_hex() {
        assert_eq!(filesystem_of(0x0102_1994).name, "tmpfs");
        assert!(filesystem_of(0x0102_1994).in_memory);
        assert_eq!(filesystem_of(0xef53).name, "ext4");
        assert!(!filesystem_of(0xef53).in_memory);
        let unknown = filesystem_of(0x1234_5678);
        assert_eq!(unknown.name, "0x12345678");
        assert!(
            !unknown.in_memory,
            "an unknown filesystem is not assumed to be memory"
        );
    }

    #[test]
    fn dev_shm_is_memory_and_a_missing_directory_is_an_error() {
        if let Some(shm) = shared_memory_dir() {
            let fs = filesystem(shm).unwrap();
            assert_eq!(fs.name, "tmpfs");
            assert!(fs.in_memory);
        } else {
            eprintln!("skipped the /dev/shm half: this machine has no /dev/shm");
        }
        let err = filesystem(Path::new("/nonexistent/gpubpf-registry")).unwrap_err();
        assert!(err.to_string().contains("statfs"), "{err}");
    }
}
