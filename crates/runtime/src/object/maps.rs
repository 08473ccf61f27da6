//! Map definitions: BTF-defined (`.maps`, libbpf's `__uint`/`__type` encoding) and legacy
//! (`maps`, `struct bpf_map_def`).

use super::btf::{Btf, BtfType};
use super::elf::{RawElf, STT_OBJECT};
use super::error::ObjectError;
use super::reader::u32_at;
use super::section::{DataKind, SectionKind};

/// Largest global-data section accepted (its bytes are copied into the map definition).
pub const MAX_GLOBAL_DATA: u64 = 256 << 20;

/// `BPF_F_RDONLY_PROG`: programs may only read the map.
pub const BPF_F_RDONLY_PROG: u32 = 1 << 7;
/// `BPF_F_MMAPABLE`: the map's memory is mapped by user space.
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// The map types gpubpf implements (Linux numbering in [`MapKind::linux_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapKind {
    Hash,
    Array,
    LruHash,
    RingBuf,
}

impl MapKind {
    /// The kind of a Linux `BPF_MAP_TYPE_*` value.
    pub fn from_linux_type(t: u32) -> Option<MapKind> {
        Some(match t {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            9 => MapKind::LruHash,
            27 => MapKind::RingBuf,
            _ => return None,
        })
    }

    /// The Linux `BPF_MAP_TYPE_*` value.
    pub const fn linux_type(self) -> u32 {
        match self {
            MapKind::Hash => 1,
            MapKind::Array => 2,
            MapKind::LruHash => 9,
            MapKind::RingBuf => 27,
        }
    }

    /// Lower-case name (`hash`, `array`, `lru_hash`, `ringbuf`).
    pub const fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash",
            MapKind::Array => "array",
            MapKind::LruHash => "lru_hash",
            MapKind::RingBuf => "ringbuf",
        }
    }
}

/// Where a map definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "section")]
pub enum MapOrigin {
    /// A variable in `.maps`.
    Btf,
    /// A `struct bpf_map_def` in `maps`.
    Legacy,
    /// A global-data section (`.rodata`, `.data`, `.bss` and their `.*` variants).
    Global(DataKind),
}

/// A BTF type reference: id and C spelling.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BtfTypeRef {
    pub id: u32,
    pub name: String,
}

/// One map of an object. Programs refer to maps by their index in `Object::maps`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MapDef {
    /// Variable name, or the section name for global data (`.rodata`, `.bss`, …).
    pub name: String,
    pub kind: MapKind,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    /// BTF type of the key, when declared with `__type(key, …)`.
    pub key_type: Option<BtfTypeRef>,
    /// BTF type of the value (`__type(value, …)`, or the `DATASEC` of global data).
    pub value_type: Option<BtfTypeRef>,
    pub origin: MapOrigin,
    /// `__uint(pinning, LIBBPF_PIN_BY_NAME)`: shared by name across objects and kept after
    /// unload (libbpf's pinning); otherwise private to its object.
    pub pinned: bool,
    /// Initial contents of the single value of a global-data map (`value_size` bytes).
    #[serde(skip)]
    pub initial: Option<Vec<u8>>,
    /// ELF section and offset of the definition (used to resolve relocations).
    #[serde(skip)]
    pub(crate) sym: (usize, u64),
}

impl MapDef {
    /// Whether this map backs global data.
    pub fn is_global(&self) -> bool {
        matches!(self.origin, MapOrigin::Global(_))
    }

    /// Basic sanity of a definition (the map implementation checks the rest).
    fn validate(&self, section: &str) -> Result<(), ObjectError> {
        let bad = |reason: String| ObjectError::BadMap {
            map: self.name.clone(),
            section: section.to_string(),
            offset: self.sym.1,
            reason,
        };
        match self.kind {
            MapKind::RingBuf => {
                if self.key_size != 0 || self.value_size != 0 {
                    return Err(bad("a ring buffer has no key or value".into()));
                }
                if !self.max_entries.is_power_of_two() || self.max_entries < 4096 {
                    return Err(bad(format!(
                        "ring buffer size {} must be a power of two of at least 4096",
                        self.max_entries
                    )));
                }
            }
            MapKind::Array | MapKind::Hash | MapKind::LruHash => {
                if self.kind == MapKind::Array && self.key_size != 4 {
                    return Err(bad(format!(
                        "array key size is {}, must be 4",
                        self.key_size
                    )));
                }
                if self.key_size == 0 || self.value_size == 0 || self.max_entries == 0 {
                    return Err(bad(format!(
                        "key size {}, value size {} and max entries {} must all be non-zero",
                        self.key_size, self.value_size, self.max_entries
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Reads all maps of the object: `.maps`, then `maps`, then global-data sections (in
/// section order). Global-data maps carry their initial bytes.
pub(crate) fn collect_maps(
    elf: &RawElf<'_>,
    btf: Option<&Btf>,
) -> Result<Vec<MapDef>, ObjectError> {
    let mut maps = Vec::new();
    for (idx, sec) in elf.sections.iter().enumerate() {
        match sec.kind {
            SectionKind::BtfMaps => btf_maps(elf, idx, btf, &mut maps)?,
            SectionKind::LegacyMaps => legacy_maps(elf, idx, &mut maps)?,
            _ => {}
        }
    }
    for (idx, sec) in elf.sections.iter().enumerate() {
        if let SectionKind::Data(kind) = sec.kind {
            if let Some(m) = global_map(sec.name.clone(), idx, kind, sec.data, sec.size, btf)? {
                maps.push(m);
            }
        }
    }
    for (i, m) in maps.iter().enumerate() {
        if maps[..i].iter().any(|o| o.name == m.name) {
            return Err(ObjectError::DuplicateMap {
                name: m.name.clone(),
            });
        }
    }
    Ok(maps)
}

fn global_map(
    name: String,
    section: usize,
    kind: DataKind,
    data: &[u8],
    size: u64,
    btf: Option<&Btf>,
) -> Result<Option<MapDef>, ObjectError> {
    if size == 0 {
        return Ok(None);
    }
    let value_size = u32::try_from(size)
        .ok()
        .filter(|_| size <= MAX_GLOBAL_DATA)
        .ok_or_else(|| ObjectError::BadSectionData {
            section: name.clone(),
            reason: format!(
                "size {size} exceeds the {MAX_GLOBAL_DATA}-byte limit of a global-data map"
            ),
        })?;
    let initial = match kind {
        DataKind::Bss => vec![0u8; value_size as usize],
        DataKind::Rodata | DataKind::Data => {
            if data.len() as u64 != size {
                return Err(ObjectError::BadSectionData {
                    section: name,
                    reason: format!("has {} bytes of data for size {size}", data.len()),
                });
            }
            data.to_vec()
        }
    };
    let value_type = btf.and_then(|b| {
        b.types().find_map(|(id, t)| match t {
            BtfType::DataSec { name: n, .. } if *n == name => Some(BtfTypeRef {
                id,
                name: n.clone(),
            }),
            _ => None,
        })
    });
    let flags = match kind {
        DataKind::Rodata => BPF_F_RDONLY_PROG | BPF_F_MMAPABLE,
        DataKind::Data | DataKind::Bss => BPF_F_MMAPABLE,
    };
    Ok(Some(MapDef {
        name,
        kind: MapKind::Array,
        key_size: 4,
        value_size,
        max_entries: 1,
        flags,
        key_type: None,
        value_type,
        origin: MapOrigin::Global(kind),
        pinned: false,
        initial: Some(initial),
        sym: (section, 0),
    }))
}

/// Symbols defining objects in section `idx`, sorted by offset.
fn object_symbols(elf: &RawElf<'_>, idx: usize) -> Vec<(String, u64, u64)> {
    let mut syms: Vec<_> = elf
        .symbols
        .iter()
        .filter(|s| s.section == Some(idx) && s.st_type == STT_OBJECT && !s.name.is_empty())
        .map(|s| (s.name.clone(), s.value, s.size))
        .collect();
    syms.sort_by_key(|s| s.1);
    syms
}

fn legacy_maps(elf: &RawElf<'_>, idx: usize, maps: &mut Vec<MapDef>) -> Result<(), ObjectError> {
    let sec = &elf.sections[idx];
    for (name, offset, size) in object_symbols(elf, idx) {
        let bad = |reason: String| ObjectError::BadMap {
            map: name.clone(),
            section: sec.name.clone(),
            offset,
            reason,
        };
        if size < 16 {
            return Err(bad(format!(
                "definition is {size} bytes; `struct bpf_map_def` needs at least 16"
            )));
        }
        let field = |i: u64| -> Result<u32, ObjectError> {
            if i * 4 + 4 > size {
                return Ok(0);
            }
            usize::try_from(offset + i * 4)
                .ok()
                .and_then(|o| u32_at(sec.data, o).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "definition of {size} bytes runs past the section end"
                    ))
                })
        };
        let map_type = field(0)?;
        for extra in 5..size / 4 {
            if field(extra)? != 0 {
                return Err(bad(format!(
                    "field {extra} of the definition is not zero (only type, key_size, value_size, max_entries and map_flags are supported)"
                )));
            }
        }
        let kind = MapKind::from_linux_type(map_type).ok_or(ObjectError::UnsupportedMapType {
            map: name.clone(),
            map_type,
        })?;
        let m = MapDef {
            name: name.clone(),
            kind,
            key_size: field(1)?,
            value_size: field(2)?,
            max_entries: field(3)?,
            flags: field(4)?,
            key_type: None,
            value_type: None,
            origin: MapOrigin::Legacy,
            pinned: false,
            initial: None,
            sym: (idx, offset),
        };
        m.validate(&sec.name)?;
        maps.push(m);
    }
    Ok(())
}

fn btf_maps(
    elf: &RawElf<'_>,
    idx: usize,
    btf: Option<&Btf>,
    maps: &mut Vec<MapDef>,
) -> Result<(), ObjectError> {
    let sec = &elf.sections[idx];
    let btf = btf.ok_or_else(|| ObjectError::MissingBtf {
        section: sec.name.clone(),
    })?;
    let vars = btf
        .datasec(".maps")
        .ok_or_else(|| ObjectError::MissingDatasec {
            section: sec.name.clone(),
        })?;
    let syms = object_symbols(elf, idx);
    for (name, offset, _) in &syms {
        let bad = |reason: String| ObjectError::BadMap {
            map: name.clone(),
            section: sec.name.clone(),
            offset: *offset,
            reason,
        };
        let var_type = vars
            .iter()
            .find_map(|v| {
                btf.var(v.type_id)
                    .filter(|(n, _)| n == name)
                    .map(|(_, t)| t)
            })
            .ok_or_else(|| bad("no BTF `VAR` describes this map (compile with -g)".into()))?;
        let m = decode_btf_map(btf, name, var_type, idx, *offset).map_err(bad)?;
        m.validate(&sec.name)?;
        maps.push(m);
    }
    Ok(())
}

/// Decodes one `struct { __uint(type, …); __type(key, …); … }` map definition.
fn decode_btf_map(
    btf: &Btf,
    name: &str,
    var_type: u32,
    section: usize,
    offset: u64,
) -> Result<MapDef, String> {
    let err = |e: super::btf::BtfError| e.to_string();
    let st = btf.skip_mods(var_type).map_err(err)?;
    let BtfType::Struct { members, .. } = btf.type_by_id(st).map_err(err)? else {
        return Err(format!(
            "definition has type `{}`, expected a struct",
            btf.type_name(st)
        ));
    };
    // `__uint(name, N)` is `int (*name)[N]`.
    let uint = |member: &str, ty: u32| -> Result<u32, String> {
        let p = btf.skip_mods(ty).map_err(err)?;
        if let BtfType::Ptr { target } = btf.type_by_id(p).map_err(err)? {
            let a = btf.skip_mods(*target).map_err(err)?;
            if let BtfType::Array { nelems, .. } = btf.type_by_id(a).map_err(err)? {
                return Ok(*nelems);
            }
        }
        Err(format!(
            "attribute `{member}` is not declared with `__uint`"
        ))
    };
    // `__type(name, T)` is `typeof(T) *name`.
    let typed = |member: &str, ty: u32| -> Result<(BtfTypeRef, u32), String> {
        let p = btf.skip_mods(ty).map_err(err)?;
        if let BtfType::Ptr { target } = btf.type_by_id(p).map_err(err)? {
            let size = btf.size_of(*target).map_err(err)?;
            let size = u32::try_from(size).map_err(|_| format!("`{member}` type is too large"))?;
            return Ok((
                BtfTypeRef {
                    id: *target,
                    name: btf.type_name(*target),
                },
                size,
            ));
        }
        Err(format!(
            "attribute `{member}` is not declared with `__type`"
        ))
    };
    let (mut map_type, mut key_size, mut value_size, mut max_entries, mut flags) =
        (None, None, None, None, 0u32);
    let (mut key_type, mut value_type) = (None, None);
    let mut pinned = false;
    let set = |slot: &mut Option<u32>, v: u32, what: &str| -> Result<(), String> {
        match *slot {
            Some(old) if old != v => Err(format!("{what} given as both {old} and {v}")),
            _ => {
                *slot = Some(v);
                Ok(())
            }
        }
    };
    for m in members {
        match m.name.as_str() {
            "type" => map_type = Some(uint("type", m.type_id)?),
            "max_entries" => max_entries = Some(uint("max_entries", m.type_id)?),
            "map_flags" => flags = uint("map_flags", m.type_id)?,
            "key_size" => set(&mut key_size, uint("key_size", m.type_id)?, "key size")?,
            "value_size" => set(
                &mut value_size,
                uint("value_size", m.type_id)?,
                "value size",
            )?,
            "key" => {
                let (t, s) = typed("key", m.type_id)?;
                set(&mut key_size, s, "key size")?;
                key_type = Some(t);
            }
            "value" => {
                let (t, s) = typed("value", m.type_id)?;
                set(&mut value_size, s, "value size")?;
                value_type = Some(t);
            }
            "pinning" => {
                pinned = match uint("pinning", m.type_id)? {
                    0 => false,
                    1 => true,
                    other => {
                        return Err(format!(
                            "unsupported pinning {other}: use LIBBPF_PIN_NONE (0) or \
                             LIBBPF_PIN_BY_NAME (1)"
                        ))
                    }
                };
            }
            "numa_node" => {
                uint(&m.name, m.type_id)?;
            }
            "values" => return Err("map-in-map (`__array(values, …)`) is not supported".into()),
            other => return Err(format!("unknown map attribute `{other}`")),
        }
    }
    let map_type = map_type.ok_or("missing `__uint(type, …)`")?;
    let kind = MapKind::from_linux_type(map_type).ok_or_else(|| {
        format!("unsupported map type {map_type}; supported: hash (1), array (2), lru_hash (9), ringbuf (27)")
    })?;
    Ok(MapDef {
        name: name.to_string(),
        kind,
        key_size: key_size.unwrap_or(0),
        value_size: value_size.unwrap_or(0),
        max_entries: max_entries.ok_or("missing `__uint(max_entries, …)`")?,
        flags,
        key_type,
        value_type,
        origin: MapOrigin::Btf,
        pinned,
        initial: None,
        sym: (section, offset),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_kind_numbering_round_trips() {
        for k in [
            MapKind::Hash,
            MapKind::Array,
            MapKind::LruHash,
            MapKind::RingBuf,
        ] {
            assert_eq!(MapKind::from_linux_type(k.linux_type()), Some(k));
        }
        assert_eq!(MapKind::from_linux_type(6), None);
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        let mut m = MapDef {
            name: "m".into(),
            kind: MapKind::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: 4096,
            flags: 0,
            key_type: None,
            value_type: None,
            origin: MapOrigin::Btf,
            pinned: false,
            initial: None,
            sym: (1, 0),
        };
        assert!(m.validate(".maps").is_ok());
        m.max_entries = 5000;
        assert!(m
            .validate(".maps")
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        m.kind = MapKind::Array;
        m.key_size = 8;
        m.value_size = 8;
        assert!(m
            .validate(".maps")
            .unwrap_err()
            .to_string()
            .contains("must be 4"));
        m.kind = MapKind::Hash;
        m.max_entries = 0;
        assert!(m.validate(".maps").is_err());
    }
}
