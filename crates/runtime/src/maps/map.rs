//! [`Map`]: one opened map file, the process-local handle programs and helpers use.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::array::ArrayMap;
use super::hash::HashMap;
use super::layout::{self, FileHeader, Layout, META_OFFSET};
use super::lease::Lease;
use super::mapping::{self, Mapping};
use super::ringbuf::{RingBuf, RingBufStats};
use super::{MapError, MapMeta, MapSpec, MapType};

#[derive(Debug)]
enum Kind {
    Array(ArrayMap),
    Hash(HashMap),
    RingBuf(RingBuf),
}

/// An opened map. Its address is the map handle that prepared programs carry in `lddw`
/// and that helpers receive in `r1`; keep it alive (it is shared as `Arc<Map>`) for as long
/// as any program that references it may run.
#[derive(Debug)]
pub struct Map {
    // `kind` holds raw pointers into `mapping`; it is declared first so that it is
    // dropped before the mapping.
    kind: Kind,
    spec: MapSpec,
    meta: MapMeta,
    path: PathBuf,
    mapping: Mapping,
    /// Mapped read-write. A map file this process may only read (a system registry's map
    /// the operator declared read-only for applications) is mapped `PROT_READ`: every
    /// change is refused with [`MapError::ReadOnly`] before it touches memory.
    writable: bool,
}

// SAFETY: all shared state is accessed through atomics and shared map locks; the raw
// pointers point into `mapping`, owned by the same struct.
unsafe impl Send for Map {}
// SAFETY: see `Send`.
unsafe impl Sync for Map {}

/// One key/value pair copied out of a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ (u64::from(std::process::id()) << 32)
    }
}

impl Map {
    /// The hash map inside (unit tests of the repair path).
    #[cfg(test)]
    pub(super) fn hash_for_test(&self) -> &HashMap {
        match &self.kind {
            Kind::Hash(h) => h,
            _ => panic!("not a hash map"),
        }
    }

    /// Creates the map file at `path` atomically (built under a temporary name, then
    /// renamed into place without replacing anything). Fails with
    /// [`MapError::AlreadyExists`] when `path` exists.
    pub fn create(path: &Path, spec: &MapSpec, meta: &MapMeta) -> Result<Map, MapError> {
        let meta_json = serde_json::to_vec(meta).map_err(|e| MapError::InvalidSpec {
            reason: format!("metadata: {e}"),
        })?;
        let lay = layout::compute(spec, meta_json.len())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), file_name));
        let _ = std::fs::remove_file(&tmp);
        let result = Self::build(&tmp, path, spec, meta, &meta_json, &lay);
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn build(
        tmp: &Path,
        path: &Path,
        spec: &MapSpec,
        meta: &MapMeta,
        meta_json: &[u8],
        lay: &Layout,
    ) -> Result<Map, MapError> {
        let io = |op: &'static str| {
            move |source| MapError::Io {
                path: tmp.to_path_buf(),
                op,
                source,
            }
        };
        let mut file = mapping::create_new(tmp)?;
        file.set_len(lay.file_size as u64).map_err(io("resize"))?;
        if spec.map_type == MapType::RingBuf {
            // Allocated now rather than by the policed calls that first write each page
            // (on tmpfs a first write to a hole allocates and zeroes a page: ~2.4 µs here,
            // against ~1 µs to map a page that exists; the mappings then populate them,
            // mapping.rs). A filesystem without fallocate keeps the file sparse.
            // SAFETY: `file` is an open descriptor we own; fallocate takes no pointers.
            let rc =
                unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, lay.file_size as libc::off_t) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(io("allocate")(e));
                }
            }
        }
        let header = layout::new_header(spec, lay, random_seed());
        // SAFETY: FileHeader is repr(C) plain data; viewing it as bytes is sound.
        let hb = unsafe {
            std::slice::from_raw_parts(
                (&header as *const FileHeader).cast::<u8>(),
                std::mem::size_of::<FileHeader>(),
            )
        };
        file.write_all(hb).map_err(io("write header"))?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(META_OFFSET as u64))
            .map_err(io("seek"))?;
        file.write_all(meta_json).map_err(io("write metadata"))?;
        let map = Self::from_file(&file, tmp, *spec, meta.clone(), lay, &header, true)?;
        // SAFETY: the file is still private to us (temporary name).
        unsafe { map.init_shared()? };
        mapping::rename_noreplace(tmp, path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                MapError::AlreadyExists {
                    path: path.to_path_buf(),
                }
            } else {
                MapError::Io {
                    path: path.to_path_buf(),
                    op: "publish",
                    source,
                }
            }
        })?;
        let mut map = Map {
            path: path.to_path_buf(),
            ..map
        };
        // A forked child claims its lease again through the file's published name.
        match &mut map.kind {
            Kind::Array(a) => a.lease.renamed(path),
            Kind::Hash(h) => h.lease.renamed(path),
            Kind::RingBuf(r) => r.lease.renamed(path),
        }
        Ok(map)
    }

    /// Opens and validates an existing map file: magic, version, checksum, type, sizes,
    /// file length and metadata are all checked before anything is mapped for use.
    pub fn open(path: &Path) -> Result<Map, MapError> {
        // A file we may not write (permission denied) is opened for reading.
        let (mut file, writable) = match mapping::open_rw(path) {
            Ok(f) => (f, true),
            Err(MapError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                (mapping::open_ro(path)?, false)
            }
            Err(e) => return Err(e),
        };
        let io = |op: &'static str| {
            move |source| MapError::Io {
                path: path.to_path_buf(),
                op,
                source,
            }
        };
        let len = file.metadata().map_err(io("stat"))?.len();
        let mut hb = [0u8; std::mem::size_of::<FileHeader>()];
        std::io::Read::read_exact(&mut file, &mut hb).map_err(|_| MapError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("file is only {len} bytes"),
        })?;
        // SAFETY: FileHeader is repr(C) plain data made of integers and a byte array:
        // every bit pattern is a valid value.
        let header: FileHeader = unsafe { std::ptr::read_unaligned(hb.as_ptr().cast()) };
        let (spec, lay) = layout::validate(path, &header, len)?;
        let mut meta_json = vec![0u8; lay.meta_len];
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(META_OFFSET as u64))
            .map_err(io("seek"))?;
        std::io::Read::read_exact(&mut file, &mut meta_json).map_err(io("read metadata"))?;
        let mut meta: MapMeta =
            serde_json::from_slice(&meta_json).map_err(|e| MapError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("metadata: {e}"),
            })?;
        // The file name is the map's name: a map taken over by a replacing object
        // (`load --replace`) is the same file under a second name.
        if let Some(n) = path.file_name().and_then(|n| n.to_str()) {
            n.clone_into(&mut meta.name);
        }
        Self::from_file(&file, path, spec, meta, &lay, &header, writable)
    }

    fn from_file(
        file: &std::fs::File,
        path: &Path,
        spec: MapSpec,
        meta: MapMeta,
        lay: &Layout,
        header: &FileHeader,
        writable: bool,
    ) -> Result<Map, MapError> {
        let seed = header.seed;
        let mirror = (spec.map_type == MapType::RingBuf)
            .then_some((lay.data_offset, spec.max_entries as usize));
        let mapping = if writable {
            Mapping::map(file, path, lay.file_size, mirror)?
        } else {
            Mapping::map_read_only(file, path, lay.file_size, mirror)?
        };
        let base = mapping.base();
        // SAFETY: data_offset < file_size (validated layout).
        let data = unsafe { base.add(lay.data_offset) };
        let name = meta.name.clone();
        let lease = if writable {
            // SAFETY: the generation words lie in the header page of the mapping, which the
            // returned `Map` owns along with the lease (its kind holds it).
            unsafe { Lease::claim(path, base.add(layout::LEASE_GENS).cast()) }
        } else {
            Lease::none()
        };
        let kind = match spec.map_type {
            MapType::Array => Kind::Array(ArrayMap {
                data,
                stride: lay.stride,
                value_size: spec.value_size as usize,
                max_entries: spec.max_entries,
                // SAFETY: the state region lies inside the header page.
                state: unsafe { base.add(layout::STATE_OFFSET) },
                lease,
            }),
            MapType::Hash | MapType::LruHash => Kind::Hash(HashMap {
                base,
                buckets: data,
                // SAFETY: the entries follow the buckets inside the data region.
                entries: unsafe { data.add(lay.nbuckets * layout::BUCKET_SIZE) },
                nbuckets: lay.nbuckets as u32,
                stride: lay.stride,
                key_size: spec.key_size as usize,
                value_size: spec.value_size as usize,
                max_entries: spec.max_entries,
                seed,
                lease,
                lru: spec.map_type == MapType::LruHash,
                writable,
                name,
            }),
            MapType::RingBuf => Kind::RingBuf(RingBuf {
                base,
                data,
                size: u64::from(spec.max_entries),
                name,
                lease,
                warned_full: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        Ok(Map {
            kind,
            spec,
            meta,
            path: path.to_path_buf(),
            mapping,
            writable,
        })
    }

    /// # Safety
    /// Only on a freshly created file nobody else has mapped.
    unsafe fn init_shared(&self) -> Result<(), MapError> {
        match &self.kind {
            // SAFETY: forwarded contract.
            Kind::Hash(h) => unsafe { h.init() },
            // Arrays and rings start as zeroes: free locks, zero positions.
            Kind::Array(_) | Kind::RingBuf(_) => Ok(()),
        }
    }

    /// Whether this process mapped the map read-write (see [`MapError::ReadOnly`]).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    fn must_write(&self) -> Result<(), MapError> {
        if self.writable {
            Ok(())
        } else {
            Err(MapError::ReadOnly {
                name: self.meta.name.clone(),
            })
        }
    }

    /// The definition.
    pub fn spec(&self) -> &MapSpec {
        &self.spec
    }

    /// Metadata (name, BTF types).
    pub fn meta(&self) -> &MapMeta {
        &self.meta
    }

    /// Map name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// Path of the map file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the mapped file in bytes.
    pub fn file_size(&self) -> usize {
        self.mapping.len()
    }

    /// Address and length of all the memory this map has mapped (header, metadata, data and
    /// a ring buffer's mirror): every pointer a program gets from the map (a value, a
    /// reserved record, a global) lies inside it. For callers that check accesses, like the
    /// interpreter's checked mode.
    pub fn memory_range(&self) -> (u64, usize) {
        (self.mapping.base() as u64, self.mapping.reserved_len())
    }

    /// The handle value programs carry: the address of this `Map`.
    pub fn handle(&self) -> u64 {
        self as *const Map as u64
    }

    fn check(&self, what: &'static str, expected: u32, actual: usize) -> Result<(), MapError> {
        if expected as usize != actual {
            return Err(MapError::WrongSize {
                what,
                expected: expected as usize,
                actual,
            });
        }
        Ok(())
    }

    /// Program-side lookup: the address of the value in shared memory, or null.
    ///
    /// # Safety
    /// `key` must be readable for `key_size` bytes.
    #[inline(always)]
    pub unsafe fn lookup_ptr(&self, key: *const u8) -> *mut u8 {
        match &self.kind {
            // SAFETY: forwarded contract (array keys are 4 bytes).
            Kind::Array(a) => unsafe { a.lookup(key) },
            Kind::Hash(h) => {
                // SAFETY: forwarded contract.
                let k = unsafe { std::slice::from_raw_parts(key, h.key_size) };
                h.lookup(k)
            }
            Kind::RingBuf(_) => std::ptr::null_mut(),
        }
    }

    /// The layout the JIT needs to inline this map's lookups ([`crate::jit::InlineMap`]):
    /// arrays, and hash maps (not LRU: a hit stamps the entry) with 4- or 8-byte keys;
    /// `None` for other maps. The buckets, entries or values stay mapped at those addresses
    /// for as long as this `Map` lives.
    pub fn inline_map(&self) -> Option<crate::jit::InlineMap> {
        match &self.kind {
            Kind::Array(_) => self.inline_array().map(crate::jit::InlineMap::Array),
            Kind::Hash(h) if !h.lru && matches!(h.key_size, 4 | 8) => {
                Some(crate::jit::InlineMap::Hash(crate::jit::InlineHash {
                    handle: self.handle(),
                    buckets: h.buckets as u64,
                    entries: h.entries as u64,
                    nbuckets: h.nbuckets,
                    max_entries: h.max_entries,
                    stride: u32::try_from(h.stride).ok()?,
                    key_size: h.key_size as u32,
                    value_offset: u32::try_from(h.value_offset()).ok()?,
                    seed: h.seed,
                }))
            }
            _ => None,
        }
    }

    /// An array map's layout for the JIT's inlined lookups; `None` for other maps. The
    /// values stay mapped at that address for as long as this `Map` lives.
    pub fn inline_array(&self) -> Option<crate::jit::InlineArray> {
        match &self.kind {
            Kind::Array(a) => Some(crate::jit::InlineArray {
                handle: self.handle(),
                data: a.data as u64,
                max_entries: a.max_entries,
                stride: u32::try_from(a.stride).ok()?,
            }),
            _ => None,
        }
    }

    /// Address of the value at `index` of an array map (global data), or `None`.
    pub fn array_value_ptr(&self, index: u32) -> Option<*mut u8> {
        match &self.kind {
            Kind::Array(a) => {
                // SAFETY: the key is a 4-byte local.
                let p = unsafe { a.lookup(index.to_ne_bytes().as_ptr()) };
                (!p.is_null()).then_some(p)
            }
            _ => None,
        }
    }

    /// Copies the value stored under `key`.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>, MapError> {
        if self.spec.map_type == MapType::RingBuf {
            return Err(MapError::Unsupported {
                op: "lookup",
                map_type: self.spec.map_type,
            });
        }
        self.check("key", self.spec.key_size, key.len())?;
        // SAFETY: key has key_size bytes.
        let p = unsafe { self.lookup_ptr(key.as_ptr()) };
        if p.is_null() {
            return Ok(None);
        }
        let mut v = vec![0u8; self.spec.value_size as usize];
        // SAFETY: p points at value_size bytes of the mapping.
        unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), v.len()) };
        Ok(Some(v))
    }

    /// Inserts or updates (`BPF_ANY`, `BPF_NOEXIST`, `BPF_EXIST`).
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        self.update_inner(key, value, None, flags)
    }

    /// Inserts or updates some bits of a value: an existing value changes only where
    /// `mask` has bits set (taking them from `value`), a read-modify-write under the
    /// map's lock (the bucket lock of a hash, the writer lock of an array); a new entry
    /// is `value` as it is. Other bits keep what they hold, including concurrent changes
    /// by programs.
    pub fn update_masked(
        &self,
        key: &[u8],
        value: &[u8],
        mask: &[u8],
        flags: u64,
    ) -> Result<(), MapError> {
        self.check("mask", self.spec.value_size, mask.len())?;
        self.update_inner(key, value, Some(mask), flags)
    }

    fn update_inner(
        &self,
        key: &[u8],
        value: &[u8],
        mask: Option<&[u8]>,
        flags: u64,
    ) -> Result<(), MapError> {
        self.must_write()?;
        self.check("key", self.spec.key_size, key.len())?;
        self.check("value", self.spec.value_size, value.len())?;
        // SAFETY: writable and both sizes checked just above.
        unsafe { self.update_checked(key, value, mask, flags) }
    }

    /// [`Map::update_inner`] once the map is known writable and `key` and `value` have the
    /// map's sizes (program-side updates know both without checking again).
    ///
    /// # Safety
    /// The map is writable, `key` has its key size and `value` its value size (an array
    /// writes `value_size` bytes from `value` at the slot `key` names).
    #[inline(always)]
    unsafe fn update_checked(
        &self,
        key: &[u8],
        value: &[u8],
        mask: Option<&[u8]>,
        flags: u64,
    ) -> Result<(), MapError> {
        match &self.kind {
            // SAFETY: this function's contract: the slices have the map's sizes.
            Kind::Array(a) => unsafe { a.update(key.as_ptr(), value.as_ptr(), mask, flags) },
            Kind::Hash(h) => h.update(key, value, mask, flags),
            Kind::RingBuf(_) => Err(MapError::Unsupported {
                op: "update",
                map_type: self.spec.map_type,
            }),
        }
    }

    /// Deletes the entry under `key` (arrays: `EINVAL`, as in Linux).
    pub fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        self.must_write()?;
        self.check("key", self.spec.key_size, key.len())?;
        match &self.kind {
            Kind::Hash(h) => h.delete(key),
            Kind::Array(_) => Err(MapError::InvalidArgument {
                reason: "array elements cannot be deleted",
            }),
            Kind::RingBuf(_) => Err(MapError::Unsupported {
                op: "delete",
                map_type: self.spec.map_type,
            }),
        }
    }

    /// Program-side update through raw pointers; returns 0 or a negative errno. Refusals
    /// a program may meet on every call (a read-only map, unknown flags, a full map) build
    /// no message: nothing on a program's path allocates.
    ///
    /// # Safety
    /// `key` and `value` must be readable for the map's key and value sizes.
    pub unsafe fn update_raw(&self, key: *const u8, value: *const u8, flags: u64) -> i64 {
        if !self.writable {
            return -i64::from(libc::EPERM);
        }
        // SAFETY: forwarded contract.
        let (k, v) = unsafe {
            (
                std::slice::from_raw_parts(key, self.spec.key_size as usize),
                std::slice::from_raw_parts(value, self.spec.value_size as usize),
            )
        };
        // SAFETY: writable (checked above) and the slices have the map's sizes by
        // construction.
        match unsafe { self.update_checked(k, v, None, flags) } {
            Ok(()) => 0,
            Err(e) => -i64::from(e.errno()),
        }
    }

    /// Program-side delete; returns 0 or a negative errno (without allocating, as
    /// [`Map::update_raw`]).
    ///
    /// # Safety
    /// `key` must be readable for the map's key size.
    pub unsafe fn delete_raw(&self, key: *const u8) -> i64 {
        if !self.writable {
            return -i64::from(libc::EPERM);
        }
        // Arrays' elements cannot be deleted, ring buffers have none (as `delete`).
        match self.kind {
            Kind::Hash(_) => {}
            Kind::Array(_) => return -i64::from(libc::EINVAL),
            Kind::RingBuf(_) => return -i64::from(libc::EOPNOTSUPP),
        }
        // SAFETY: forwarded contract.
        let k = unsafe { std::slice::from_raw_parts(key, self.spec.key_size as usize) };
        match self.delete(k) {
            Ok(()) => 0,
            Err(e) => -i64::from(e.errno()),
        }
    }

    /// Copies out every entry (arrays: every index; hashes: used entries in storage
    /// order). Concurrent writers may be observed half-way, as with any dump.
    pub fn entries(&self) -> Result<Vec<MapEntry>, MapError> {
        let vs = self.spec.value_size as usize;
        let copy = |p: *const u8, n: usize| {
            let mut v = vec![0u8; n];
            // SAFETY: p points at n bytes inside the mapping.
            unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), n) };
            v
        };
        match &self.kind {
            Kind::Array(a) => Ok((0..a.max_entries)
                .map(|i| MapEntry {
                    key: i.to_ne_bytes().to_vec(),
                    // SAFETY: i < max_entries keeps the offset in the data region.
                    value: copy(unsafe { a.data.add(i as usize * a.stride) }, vs),
                })
                .collect()),
            Kind::Hash(h) => Ok(h
                .used()
                .into_iter()
                .map(|i| MapEntry {
                    key: copy(h.e_key(i), h.key_size),
                    value: copy(h.e_value(i), vs),
                })
                .collect()),
            Kind::RingBuf(_) => Err(MapError::Unsupported {
                op: "dump",
                map_type: self.spec.map_type,
            }),
        }
    }

    /// Number of entries (arrays: `max_entries`; ring buffers: pending bytes).
    pub fn len(&self) -> u64 {
        match &self.kind {
            Kind::Array(a) => u64::from(a.max_entries),
            Kind::Hash(h) => u64::from(h.count()),
            Kind::RingBuf(r) => r.stats().pending,
        }
    }

    /// Whether [`Map::len`] is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry (arrays: zeroes every value; ring buffers: drops pending
    /// records).
    pub fn clear(&self) -> Result<(), MapError> {
        self.must_write()?;
        match &self.kind {
            Kind::Array(a) => {
                a.clear();
                Ok(())
            }
            Kind::Hash(h) => h.clear(),
            Kind::RingBuf(r) => r.clear(),
        }
    }

    fn ring(&self, op: &'static str) -> Result<&RingBuf, MapError> {
        // Every ring operation writes (a record, or the consumer position).
        self.must_write()?;
        match &self.kind {
            Kind::RingBuf(r) => Ok(r),
            _ => Err(MapError::Unsupported {
                op,
                map_type: self.spec.map_type,
            }),
        }
    }

    /// Ring buffer: copies `data` into a new record ([`MapError::RingFull`] when full,
    /// counted as a drop).
    pub fn ringbuf_output(&self, data: &[u8]) -> Result<(), MapError> {
        self.ring("output")?.output(data)
    }

    /// Ring buffer: reserves `len` bytes; commit with [`Map::ringbuf_commit`].
    pub fn ringbuf_reserve(&self, len: u64) -> Result<*mut u8, MapError> {
        self.ring("reserve")?.reserve(len)
    }

    /// `bpf_ringbuf_reserve`: [`Map::ringbuf_reserve`] without an error value (null when
    /// nothing was reserved: not a writable ring buffer, a record too large, a full ring,
    /// whose drop is counted), so that a program meeting a full ring on every call neither
    /// builds nor drops an error.
    // Per-call code, kept on the pages of the shim's hot path (crates/shim/build.rs).
    #[link_section = ".text.hot.gpubpf"]
    pub fn ringbuf_reserve_raw(&self, len: u64) -> *mut u8 {
        match &self.kind {
            Kind::RingBuf(r) if self.writable => r.reserve_raw(len).unwrap_or(std::ptr::null_mut()),
            _ => std::ptr::null_mut(),
        }
    }

    /// `bpf_ringbuf_output`: [`Map::ringbuf_output`] returning 0 or a negative errno
    /// without allocating (see [`Map::ringbuf_reserve_raw`]).
    pub fn ringbuf_output_raw(&self, data: &[u8]) -> i64 {
        let errno = match &self.kind {
            Kind::RingBuf(_) if !self.writable => libc::EPERM,
            Kind::RingBuf(r) => match r.output_raw(data) {
                Ok(()) => return 0,
                Err(refusal) => refusal.errno(),
            },
            _ => libc::EOPNOTSUPP,
        };
        -i64::from(errno)
    }

    /// Ring buffer: submits (or discards) a reserved record.
    ///
    /// # Safety
    /// `sample` must come from `ringbuf_reserve` of a map that is still mapped and must not
    /// have been committed before.
    pub unsafe fn ringbuf_commit(sample: *mut u8, discard: bool) {
        // SAFETY: forwarded contract.
        unsafe { RingBuf::commit(sample, discard) }
    }

    /// Ring buffer: consumes submitted records in order.
    pub fn ringbuf_consume(&self, f: impl FnMut(&[u8])) -> Result<usize, MapError> {
        self.ring("consume")?.consume(f)
    }

    /// Ring buffer counters.
    pub fn ringbuf_stats(&self) -> Option<RingBufStats> {
        match &self.kind {
            Kind::RingBuf(r) => Some(r.stats()),
            _ => None,
        }
    }
}
