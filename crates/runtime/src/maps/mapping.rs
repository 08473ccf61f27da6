//! Shared file mappings: a map file `mmap`ed `MAP_SHARED`, optionally with its data region
//! mapped a second time right behind itself (ring buffers, so that a record that wraps
//! around the end is still contiguous in memory).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::MapError;

/// A shared, read-write mapping of a whole file.
#[derive(Debug)]
pub struct Mapping {
    base: *mut u8,
    /// Length of the file (the first mapping).
    len: usize,
    /// Total reserved length (`len` plus a mirror of the data region, if any).
    reserved: usize,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to its contents goes
// through atomics or the shared locks of the map types.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`.
unsafe impl Sync for Mapping {}

/// System page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v <= 0 {
        4096
    } else {
        v as usize
    }
}

fn os_err(path: &Path, op: &'static str) -> MapError {
    MapError::Io {
        path: path.to_path_buf(),
        op,
        source: std::io::Error::last_os_error(),
    }
}

impl Mapping {
    /// Maps all of `file` (of length `len`). With `mirror = Some((offset, size))`, the byte
    /// range `offset..offset+size` (page aligned, ending at `len`) is mapped a second time
    /// immediately after the first mapping, and both mappings are populated (`MAP_POPULATE`):
    /// a ring buffer's producers write every page of it in turn, and without it the first
    /// lap of every process took a page fault per page on the policed call that crossed
    /// it (~1 µs each on tmpfs here, a page of 34 trace events; `fault_free_ring` in the
    /// maps' tests). Populating costs ~0.3 µs a page, once, when the map is opened.
    pub fn map(
        file: &File,
        path: &Path,
        len: usize,
        mirror: Option<(usize, usize)>,
    ) -> Result<Self, MapError> {
        Self::map_prot(file, path, len, mirror, true)
    }

    /// [`Mapping::map`] read-only (`PROT_READ`): any store through it faults, so only code
    /// that never writes (readers, programs the verifier checked against a read-only map)
    /// may use it.
    pub fn map_read_only(
        file: &File,
        path: &Path,
        len: usize,
        mirror: Option<(usize, usize)>,
    ) -> Result<Self, MapError> {
        Self::map_prot(file, path, len, mirror, false)
    }

    fn map_prot(
        file: &File,
        path: &Path,
        len: usize,
        mirror: Option<(usize, usize)>,
        writable: bool,
    ) -> Result<Self, MapError> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let populate = if writable && mirror.is_some() {
            libc::MAP_POPULATE
        } else {
            0
        };
        let extra = mirror.map(|(_, s)| s).unwrap_or(0);
        let reserved = len.checked_add(extra).ok_or(MapError::Corrupt {
            path: path.to_path_buf(),
            reason: "mapping size overflows".into(),
        })?;
        if len == 0 {
            return Err(MapError::Corrupt {
                path: path.to_path_buf(),
                reason: "empty file".into(),
            });
        }
        let fd = file.as_raw_fd();
        // SAFETY: a fresh anonymous reservation; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(os_err(path, "reserve address space"));
        }
        let base = base.cast::<u8>();
        let out = Self {
            base,
            len,
            reserved,
        };
        // SAFETY: `base..base+len` lies inside our own reservation, so MAP_FIXED replaces
        // only memory we own.
        let p = unsafe {
            libc::mmap(
                base.cast(),
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED | populate,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err(path, "mmap"));
        }
        if let Some((off, size)) = mirror {
            if off.checked_add(size) != Some(len) || off % page_size() != 0 {
                return Err(MapError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("data region {off}+{size} is not page aligned at the end"),
                });
            }
            // SAFETY: `base+len..base+len+size` is the tail of our own reservation.
            let p = unsafe {
                libc::mmap(
                    base.add(len).cast(),
                    size,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED | populate,
                    fd,
                    off as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(os_err(path, "mmap mirror"));
            }
        }
        Ok(out)
    }

    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length of the file mapping (without the mirror).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: empty files are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Length of the whole reservation: the file mapping and its mirror, if any.
    pub fn reserved_len(&self) -> usize {
        self.reserved
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation created in `map`; nothing borrows it any
        // more (the owner is being dropped).
        unsafe {
            libc::munmap(self.base.cast(), self.reserved);
        }
    }
}

/// Opens an existing file read-write, refusing symlinks.
pub fn open_rw(path: &Path) -> Result<File, MapError> {
    open_existing(path, true)
}

/// Opens an existing file read-only, refusing symlinks.
pub fn open_ro(path: &Path) -> Result<File, MapError> {
    open_existing(path, false)
}

fn open_existing(path: &Path, write: bool) -> Result<File, MapError> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                MapError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                MapError::Io {
                    path: path.to_path_buf(),
                    op: "open",
                    source,
                }
            }
        })
}

/// Creates a new file with mode 0600 (fails when it exists).
pub fn create_new(path: &Path) -> Result<File, MapError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| MapError::Io {
            path: path.to_path_buf(),
            op: "create",
            source,
        })
}

/// Renames `from` to `to`, failing with `AlreadyExists` when `to` exists.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let f = CString::new(from.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let t = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINVAL) || err.raw_os_error() == Some(libc::ENOSYS) {
        // File system without RENAME_NOREPLACE: link() also refuses an existing target.
        std::fs::hard_link(from, to)?;
        return std::fs::remove_file(from);
    }
    Err(err)
}
