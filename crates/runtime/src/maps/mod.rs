//! Maps in shared memory.
//!
//! Every map is one file, `mmap`ed `MAP_SHARED` by every process that uses it and by the
//! CLI, with the same layout everywhere (see [`layout`]): a header page carrying a magic,
//! the format version, the map's type and sizes and a checksum (all checked on open: a
//! corrupted file is reported, never trusted), a JSON metadata region (name, BTF-derived
//! key/value types for typed dumps), then the data.
//!
//! Types: [`MapType::Array`] (also backing `.rodata/.data/.bss`), [`MapType::Hash`]
//! (preallocated entries, lock-free lookups, per-bucket robust locks for writers),
//! [`MapType::LruHash`] (the same, evicting the least recently used entry when full) and
//! [`MapType::RingBuf`] (multi-producer across processes, one consumer, a drop counter
//! instead of blocking).
//!
//! Program-side lookups ([`Map::lookup_ptr`]) return pointers straight into the shared
//! mapping, so BPF atomics on map values count correctly across processes. Writers
//! serialise on [`lock::MapLock`]s, whose words name their owner's [`lease`]: a process
//! killed while holding one never wedges the others.
//!
//! The process-local [`Map`] is what the prepared program's `lddw` carries (its address is
//! the "map handle"); helpers turn it back into `&Map`.

mod array;
mod hash;
pub(crate) mod key_hash;
pub mod layout;
pub mod lease;
pub mod lock;
mod map;
pub mod mapping;
mod ringbuf;
pub mod types;

use std::path::PathBuf;

pub use map::{Map, MapEntry};
pub use ringbuf::{pid_alive, RingBufStats};
pub use types::{FieldDesc, TypeDesc};

/// `BPF_ANY`: create or update.
pub const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
pub const BPF_NOEXIST: u64 = 1;
/// `BPF_EXIST`: update only.
pub const BPF_EXIST: u64 = 2;
/// `BPF_F_RDONLY_PROG`: programs may not write the map (`.rodata`).
pub const BPF_F_RDONLY_PROG: u32 = 1 << 7;

/// The kinds of map gpubpf implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapType {
    /// Fixed-size array indexed by a `u32` key.
    Array,
    /// Hash table with preallocated entries.
    Hash,
    /// Hash table that evicts the least recently used entry when full.
    LruHash,
    /// Ring buffer of variable-size records.
    RingBuf,
}

impl MapType {
    /// The Linux `BPF_MAP_TYPE_*` number.
    pub fn linux_id(self) -> u32 {
        match self {
            MapType::Hash => 1,
            MapType::Array => 2,
            MapType::LruHash => 9,
            MapType::RingBuf => 27,
        }
    }

    /// The map type with Linux number `id`, when gpubpf implements it.
    pub fn from_linux_id(id: u32) -> Option<Self> {
        Some(match id {
            1 => MapType::Hash,
            2 => MapType::Array,
            9 => MapType::LruHash,
            27 => MapType::RingBuf,
            _ => return None,
        })
    }

    /// Short name as in bpftool (`array`, `hash`, `lru_hash`, `ringbuf`).
    pub fn name(self) -> &'static str {
        match self {
            MapType::Array => "array",
            MapType::Hash => "hash",
            MapType::LruHash => "lru_hash",
            MapType::RingBuf => "ringbuf",
        }
    }
}

impl std::fmt::Display for MapType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A map's definition: what must agree for two objects to share a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MapSpec {
    /// The map type.
    pub map_type: MapType,
    /// Key size in bytes (0 for ring buffers).
    pub key_size: u32,
    /// Value size in bytes (0 for ring buffers).
    pub value_size: u32,
    /// Number of entries (ring buffers: data size in bytes, a power of two multiple of the
    /// page size).
    pub max_entries: u32,
    /// `BPF_F_*` flags (only [`BPF_F_RDONLY_PROG`] has a meaning here).
    pub flags: u32,
}

impl std::fmt::Display for MapSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.map_type == MapType::RingBuf {
            return write!(f, "ringbuf size {}", self.max_entries);
        }
        write!(
            f,
            "{} key {}B value {}B max_entries {}",
            self.map_type, self.key_size, self.value_size, self.max_entries
        )?;
        if self.flags != 0 {
            write!(f, " flags {:#x}", self.flags)?;
        }
        Ok(())
    }
}

/// Descriptive metadata stored in the map file (not part of compatibility).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MapMeta {
    /// Map name (also its file name in the registry).
    pub name: String,
    /// Key type from BTF, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_type: Option<TypeDesc>,
    /// Value type from BTF, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_type: Option<TypeDesc>,
    /// For global-data maps: the section (`.rodata`, `.data`, `.bss`, `.rodata.str1.1`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_section: Option<String>,
}

/// Errors opening, creating or operating on maps. Operation failures carry the Linux
/// errno that programs see ([`MapError::errno`]).
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{op} `{path}`")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("map file `{path}` does not exist")]
    NotFound { path: PathBuf },
    #[error("map file `{path}` already exists")]
    AlreadyExists { path: PathBuf },
    #[error("`{path}` is not a gpubpf map file (bad magic)")]
    BadMagic { path: PathBuf },
    #[error(
        "map file `{path}` has format version {found}, this build reads versions {}..={expected} \
         (unload the policies that use it and load them again with this build)",
        layout::OLDEST_VERSION
    )]
    BadVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("map file `{path}` is corrupted: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid map definition: {reason}")]
    InvalidSpec { reason: String },
    #[error("map `{name}` is read-only for this process (the registry's owner declared it so, or its file is not writable)")]
    ReadOnly { name: String },
    #[error("key already exists")]
    KeyExists,
    #[error("key not found")]
    KeyNotFound,
    #[error("map is full")]
    Full,
    #[error("invalid argument: {reason}")]
    InvalidArgument { reason: &'static str },
    #[error("invalid argument: unknown update flags {flags:#x}")]
    UnknownFlags { flags: u64 },
    #[error("invalid argument: a record of {len} bytes does not fit a ring of {size}")]
    RecordTooLarge { len: u64, size: u64 },
    #[error("{what} is {actual} bytes, the map expects {expected}")]
    WrongSize {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("`{op}` is not supported on {map_type} maps")]
    Unsupported { op: &'static str, map_type: MapType },
    #[error("ring buffer is full")]
    RingFull,
}

impl MapError {
    /// The (positive) Linux errno a program sees for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MapError::KeyExists | MapError::AlreadyExists { .. } => libc::EEXIST,
            MapError::KeyNotFound | MapError::NotFound { .. } => libc::ENOENT,
            MapError::Full => libc::E2BIG,
            MapError::RingFull => libc::EAGAIN,
            MapError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            MapError::Unsupported { .. } => libc::EOPNOTSUPP,
            MapError::ReadOnly { .. } => libc::EPERM,
            _ => libc::EINVAL,
        }
    }
}

/// Rounds `v` up to a multiple of 8.
pub(crate) const fn round8(v: usize) -> usize {
    (v + 7) & !7
}

#[cfg(test)]
mod tests;

/// Writes the bits of `mask` from `value` into the `value.len()` bytes at `dst`, byte by
/// byte, leaving the other bits as they are.
///
/// # Safety
/// `dst` must be valid for reads and writes of `value.len()` bytes; `mask` must be as
/// long as `value`.
pub(crate) unsafe fn apply_masked(dst: *mut u8, value: &[u8], mask: &[u8]) {
    for (i, (&v, &m)) in value.iter().zip(mask).enumerate() {
        if m == 0 {
            continue;
        }
        // SAFETY: i < value.len(), within the caller's range. Volatile: the bytes live in
        // a shared mapping that other processes write.
        unsafe {
            let p = dst.add(i);
            let cur = if m == 0xff { 0 } else { p.read_volatile() };
            p.write_volatile((cur & !m) | (v & m));
        }
    }
}
