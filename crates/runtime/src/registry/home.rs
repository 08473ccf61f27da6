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
    if Path::new("/dev/shm").is_dir() {
        return PathBuf::from(format!("/dev/shm/gpubpf-{uid}"));
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|h| !h.is_empty()) {
        return PathBuf::from(x).join("gpubpf");
    }
    PathBuf::from(format!("/tmp/gpubpf-{uid}"))
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
