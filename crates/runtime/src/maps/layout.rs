//! The on-disk (in-memory) layout of map files, identical in every process.
//!
//! ```text
//! 0      FileHeader (immutable after creation, checksummed)
//! 512    shared mutable state of the map type (counters, free list, ring positions, locks)
//! 2048   lease generation words (format version 3)
//! 4096   metadata: JSON `MapMeta`, `meta_len` bytes, padded to a page
//! data   type-specific data, page aligned:
//!          array:   max_entries × round8(value_size)
//!          hash:    nbuckets × BUCKET_SIZE, then max_entries × entry_stride
//!          ringbuf: max_entries bytes (mapped twice in a row by every process)
//! ```

use std::path::Path;

use super::mapping::page_size;
use super::{round8, MapError, MapSpec, MapType};

/// First bytes of every map file.
pub const MAGIC: [u8; 8] = *b"GPUBPFMP";
/// Current format version: 3 since map locks are lease locks (`lock::MapLock`: a word
/// holding the owner's lease token, with the leases' generation words at
/// [`LEASE_GENS`]), where version 2 had robust pthread mutexes (2 also counts hash entries
/// per bucket; 1 in one shared counter).
pub const VERSION: u32 = 3;
/// Oldest format version still opened. A process of an older build would take a lease
/// lock's word for a pthread mutex (and this build a mutex for a lease lock): files of
/// different lock formats must never be shared, so older files are refused with a message
/// that says to load the policy again.
pub const OLDEST_VERSION: u32 = 3;
/// Offset of the type-specific shared state.
pub const STATE_OFFSET: usize = 512;
/// Offset of the lease generation words (`lease::LEASE_SLOTS` `u32`s, up to the metadata).
pub const LEASE_GENS: usize = 2048;
/// Offset of the metadata region.
pub const META_OFFSET: usize = 4096;
/// Largest metadata accepted (keeps a corrupted length from mapping gigabytes).
pub const MAX_META: usize = 1 << 20;
/// Bytes per hash bucket: its lock word, chain head and entry count (and 4 spare), four
/// buckets to a cache line (as Linux's 16-byte `htab` buckets): a map of 65 536 entries has
/// 1 MiB of buckets, not 4, so the bucket an update locks is more often in the cache.
pub const BUCKET_SIZE: usize = 16;
/// Offset of the chain head inside a bucket (after the 4-byte `lock::MapLock`).
pub const BUCKET_HEAD: usize = 4;
/// Offset of the bucket's entry count.
pub const BUCKET_COUNT: usize = BUCKET_HEAD + 4;
/// Bytes of entry header before the key (`next`, `free_next`, `hash`, `state`, `lru`).
pub const ENTRY_HDR: usize = 24;
/// Offsets in a hash entry's header: the next entry of its chain (`u32`), ...
pub const ENTRY_NEXT: usize = 0;
/// ... the next entry of the free list (`u32`, index + 1, 0 ends it), ...
pub const ENTRY_FREE_NEXT: usize = 4;
/// ... the key's hash (`u32`), ...
pub const ENTRY_HASH: usize = 8;
/// ... its state (`u32`: [`ENTRY_FREE`] or [`ENTRY_USED`]) ...
pub const ENTRY_STATE: usize = 12;
/// ... and its LRU stamp (`u64`).
pub const ENTRY_LRU: usize = 16;
/// `state` of an entry on the free list or on its way there.
pub const ENTRY_FREE: u32 = 0;
/// `state` of an entry visible to lookups (linked and published).
pub const ENTRY_USED: u32 = 1;
/// Flag of a chain link that ends the chain; the low bits name the bucket (Linux's
/// `hlist_nulls`).
pub const CHAIN_NULLS: u32 = 1 << 31;
/// Largest key or value (as in Linux, `KMALLOC_MAX_SIZE`-ish bounds are not needed here).
pub const MAX_KV_SIZE: u32 = 1 << 16;
/// Largest number of entries of a hash or array map.
pub const MAX_ENTRIES: u32 = 1 << 26;
/// Largest ring buffer.
pub const MAX_RING: u32 = 1 << 30;

/// The immutable header at offset 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub version: u32,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    pub file_size: u64,
    pub meta_len: u64,
    pub data_offset: u64,
    /// Hash: number of buckets (a power of two).
    pub nbuckets: u64,
    /// Hash: bytes per entry; array: bytes per value.
    pub stride: u64,
    /// Hash seed, random per map.
    pub seed: u64,
    /// FNV-1a of all fields above.
    pub checksum: u64,
}

const _: () = assert!(std::mem::size_of::<FileHeader>() <= STATE_OFFSET);

impl FileHeader {
    fn fields_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96);
        v.extend_from_slice(&self.magic);
        for x in [
            self.version,
            self.map_type,
            self.key_size,
            self.value_size,
            self.max_entries,
            self.flags,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in [
            self.file_size,
            self.meta_len,
            self.data_offset,
            self.nbuckets,
            self.stride,
            self.seed,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    /// The checksum the header should carry.
    pub fn compute_checksum(&self) -> u64 {
        fnv1a(&self.fields_bytes())
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Sizes derived from a spec; recomputed on open and compared with the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub meta_len: usize,
    pub data_offset: usize,
    pub nbuckets: usize,
    pub stride: usize,
    pub file_size: usize,
}

/// Checks a definition and computes its layout with `meta_len` bytes of metadata.
pub fn compute(spec: &MapSpec, meta_len: usize) -> Result<Layout, MapError> {
    let bad = |reason: String| MapError::InvalidSpec { reason };
    let page = page_size();
    if meta_len > MAX_META {
        return Err(bad(format!("metadata of {meta_len} bytes is too large")));
    }
    let data_offset = META_OFFSET + round_up(meta_len.max(1), page);
    let n = spec.max_entries as usize;
    let (nbuckets, stride, data_len) = match spec.map_type {
        MapType::Array | MapType::Hash | MapType::LruHash => {
            if spec.value_size == 0 || spec.value_size > MAX_KV_SIZE {
                return Err(bad(format!(
                    "value size {} is outside 1..={MAX_KV_SIZE}",
                    spec.value_size
                )));
            }
            if spec.max_entries == 0 || spec.max_entries > MAX_ENTRIES {
                return Err(bad(format!(
                    "max_entries {} is outside 1..={MAX_ENTRIES}",
                    spec.max_entries
                )));
            }
            if spec.map_type == MapType::Array {
                if spec.key_size != 4 {
                    return Err(bad(format!(
                        "array maps have 4-byte keys, not {}",
                        spec.key_size
                    )));
                }
                let stride = round8(spec.value_size as usize);
                (0, stride, stride * n)
            } else {
                if spec.key_size == 0 || spec.key_size > MAX_KV_SIZE {
                    return Err(bad(format!(
                        "key size {} is outside 1..={MAX_KV_SIZE}",
                        spec.key_size
                    )));
                }
                let stride =
                    ENTRY_HDR + round8(spec.key_size as usize) + round8(spec.value_size as usize);
                let nb = n.next_power_of_two();
                (nb, stride, nb * BUCKET_SIZE + stride * n)
            }
        }
        MapType::RingBuf => {
            if spec.key_size != 0 || spec.value_size != 0 {
                return Err(bad("ring buffers have no key or value size".into()));
            }
            let sz = spec.max_entries;
            if !sz.is_power_of_two() || (sz as usize) % page != 0 || sz > MAX_RING {
                return Err(bad(format!(
                    "ring buffer size {sz} must be a power of two multiple of the page size \
                     ({page}) and at most {MAX_RING}"
                )));
            }
            (0, 0, sz as usize)
        }
    };
    let file_size = data_offset + round_up(data_len, page);
    Ok(Layout {
        meta_len,
        data_offset,
        nbuckets,
        stride,
        file_size,
    })
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// Builds the header of a new map.
pub fn new_header(spec: &MapSpec, layout: &Layout, seed: u64) -> FileHeader {
    let mut h = FileHeader {
        magic: MAGIC,
        version: VERSION,
        map_type: spec.map_type.linux_id(),
        key_size: spec.key_size,
        value_size: spec.value_size,
        max_entries: spec.max_entries,
        flags: spec.flags,
        file_size: layout.file_size as u64,
        meta_len: layout.meta_len as u64,
        data_offset: layout.data_offset as u64,
        nbuckets: layout.nbuckets as u64,
        stride: layout.stride as u64,
        seed,
        checksum: 0,
    };
    h.checksum = h.compute_checksum();
    h
}

/// Checks a header read from `path` (whose length is `actual_len`) and returns the spec and
/// layout it describes. Nothing in the header is trusted until this succeeds.
pub fn validate(
    path: &Path,
    h: &FileHeader,
    actual_len: u64,
) -> Result<(MapSpec, Layout), MapError> {
    let corrupt = |reason: String| MapError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    if h.magic != MAGIC {
        return Err(MapError::BadMagic {
            path: path.to_path_buf(),
        });
    }
    if !(OLDEST_VERSION..=VERSION).contains(&h.version) {
        return Err(MapError::BadVersion {
            path: path.to_path_buf(),
            found: h.version,
            expected: VERSION,
        });
    }
    if h.checksum != h.compute_checksum() {
        return Err(corrupt("header checksum mismatch".into()));
    }
    let map_type = MapType::from_linux_id(h.map_type)
        .ok_or_else(|| corrupt(format!("unknown map type {}", h.map_type)))?;
    let spec = MapSpec {
        map_type,
        key_size: h.key_size,
        value_size: h.value_size,
        max_entries: h.max_entries,
        flags: h.flags,
    };
    let meta_len = usize::try_from(h.meta_len)
        .map_err(|_| corrupt(format!("metadata length {}", h.meta_len)))?;
    let layout = compute(&spec, meta_len).map_err(|e| corrupt(e.to_string()))?;
    let expect = |field: &str, stored: u64, computed: usize| {
        if stored != computed as u64 {
            Err(corrupt(format!(
                "{field} is {stored}, the definition implies {computed}"
            )))
        } else {
            Ok(())
        }
    };
    expect("data offset", h.data_offset, layout.data_offset)?;
    expect("bucket count", h.nbuckets, layout.nbuckets)?;
    expect("stride", h.stride, layout.stride)?;
    expect("file size", h.file_size, layout.file_size)?;
    if actual_len != h.file_size {
        return Err(corrupt(format!(
            "file is {actual_len} bytes, its header says {}",
            h.file_size
        )));
    }
    Ok((spec, layout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(t: MapType, k: u32, v: u32, n: u32) -> MapSpec {
        MapSpec {
            map_type: t,
            key_size: k,
            value_size: v,
            max_entries: n,
            flags: 0,
        }
    }

    #[test]
    fn layouts_and_rejections() {
        let l = compute(&spec(MapType::Array, 4, 12, 10), 10).unwrap();
        assert_eq!(l.stride, 16);
        assert_eq!(l.data_offset % page_size(), 0);
        let l = compute(&spec(MapType::Hash, 6, 8, 100), 10).unwrap();
        assert_eq!(l.nbuckets, 128);
        assert_eq!(l.stride, ENTRY_HDR + 8 + 8);
        for bad in [
            spec(MapType::Array, 8, 8, 1),
            spec(MapType::Array, 4, 0, 1),
            spec(MapType::Hash, 0, 8, 1),
            spec(MapType::Hash, 4, 8, 0),
            spec(MapType::RingBuf, 0, 0, 4097),
            spec(MapType::RingBuf, 4, 0, 4096),
        ] {
            assert!(
                matches!(compute(&bad, 0), Err(MapError::InvalidSpec { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn header_validation_detects_every_field() {
        let s = spec(MapType::Hash, 4, 8, 16);
        let l = compute(&s, 20).unwrap();
        let h = new_header(&s, &l, 7);
        let p = Path::new("x");
        assert_eq!(validate(p, &h, l.file_size as u64).unwrap(), (s, l));
        let mut m = h;
        m.magic[0] = b'X';
        assert!(matches!(
            validate(p, &m, l.file_size as u64),
            Err(MapError::BadMagic { .. })
        ));
        assert_eq!(h.version, VERSION);
        let mut m = h;
        m.version = OLDEST_VERSION;
        m.checksum = m.compute_checksum();
        assert!(
            validate(p, &m, l.file_size as u64).is_ok(),
            "the oldest version is read"
        );
        // Version 2 files lock with pthread mutexes: refused, never shared.
        let mut m = h;
        m.version = 2;
        m.checksum = m.compute_checksum();
        assert!(matches!(
            validate(p, &m, l.file_size as u64),
            Err(MapError::BadVersion { found: 2, .. })
        ));
        let mut m = h;
        m.version = 99;
        assert!(matches!(
            validate(p, &m, l.file_size as u64),
            Err(MapError::BadVersion { found: 99, .. })
        ));
        let mut m = h;
        m.value_size = 16;
        assert!(matches!(
            validate(p, &m, l.file_size as u64),
            Err(MapError::Corrupt { .. })
        ));
        // Consistent checksum but sizes that disagree with the definition.
        let mut m = h;
        m.stride += 8;
        m.checksum = m.compute_checksum();
        assert!(matches!(
            validate(p, &m, l.file_size as u64),
            Err(MapError::Corrupt { .. })
        ));
        assert!(matches!(
            validate(p, &h, l.file_size as u64 - 4096),
            Err(MapError::Corrupt { .. })
        ));
    }
}
