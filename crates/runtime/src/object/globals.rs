//! Global variables of `.rodata`/`.data`/`.bss` (and their `.*` variants): discovery from
//! the symbol table and BTF `DATASEC`s, load-time setting, and display.

use super::btf::{Btf, BtfType};
use super::elf::{RawElf, STT_OBJECT};
use super::error::GlobalError;
use super::maps::MapDef;
use super::section::{DataKind, SectionKind};
use super::value::{self, ScalarType};

/// One global variable.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Global {
    /// Symbol name (static locals look like `func.name`).
    pub name: String,
    /// Section holding it (`.rodata`, `.data.counters`, …).
    pub section: String,
    /// Index of the backing one-entry array map in `Object::maps`.
    pub map_index: usize,
    /// Byte offset in the section (and in the map value).
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// BTF type id of the variable (the `VAR`'s target), when BTF describes it.
    pub btf_type: Option<u32>,
    /// C spelling of the type (`const volatile __u64`), when known.
    pub type_name: Option<String>,
    /// The value in the object file (zeroes for `.bss`).
    pub default: Vec<u8>,
    /// Whether `Object::set_global` accepts it.
    pub settable: bool,
}

impl Global {
    /// The default value rendered for people (`8589934592`, `true`, `"fmt"`, `[00 01]`).
    pub fn default_display(&self, btf: Option<&Btf>) -> String {
        render_value(&self.default, self.btf_type, btf)
    }
}

/// Renders `bytes` as a value of BTF type `ty`.
pub fn render_value(bytes: &[u8], ty: Option<u32>, btf: Option<&Btf>) -> String {
    if btf
        .zip(ty)
        .and_then(|(b, t)| char_array_len(b, t))
        .is_some_and(|n| n as usize == bytes.len())
    {
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        return format!("{:?}", String::from_utf8_lossy(&bytes[..end]));
    }
    let scalar = btf.zip(ty).and_then(|(b, t)| scalar_type(b, t).ok());
    value::render(bytes, scalar.as_ref())
}

/// Finds the globals of every data section that has a map.
pub(crate) fn collect_globals(elf: &RawElf<'_>, btf: Option<&Btf>, maps: &[MapDef]) -> Vec<Global> {
    let mut out = Vec::new();
    for (map_index, m) in maps.iter().enumerate() {
        if !m.is_global() {
            continue;
        }
        let (sec_idx, _) = m.sym;
        let Some(sec) = elf.sections.get(sec_idx) else {
            continue;
        };
        let kind = match sec.kind {
            SectionKind::Data(k) => k,
            _ => continue,
        };
        let initial = m.initial.as_deref().unwrap_or(&[]);
        let vars = btf.and_then(|b| b.datasec(&sec.name)).unwrap_or(&[]);
        let mut syms: Vec<_> = elf
            .symbols
            .iter()
            .filter(|s| s.section == Some(sec_idx) && s.st_type == STT_OBJECT && !s.name.is_empty())
            .collect();
        syms.sort_by_key(|s| s.value);
        for s in syms {
            let (Ok(offset), Ok(size)) = (u32::try_from(s.value), u32::try_from(s.size)) else {
                continue;
            };
            let Some(default) = (offset as usize)
                .checked_add(size as usize)
                .and_then(|end| initial.get(offset as usize..end))
            else {
                continue;
            };
            // Static locals are `func.name` in the symbol table but `name` in BTF.
            let short = s.name.rsplit('.').next().unwrap_or(&s.name);
            let btf_type = btf.and_then(|b| {
                vars.iter().find_map(|v| {
                    let (n, t) = b.var(v.type_id)?;
                    (n == s.name || (n == short && v.offset == offset)).then_some(t)
                })
            });
            let type_name = btf.zip(btf_type).map(|(b, t)| b.type_name(t));
            let settable = btf.zip(btf_type).is_some_and(|(b, t)| {
                (scalar_type(b, t).is_ok_and(|st| st.size == size)
                    || char_array_len(b, t) == Some(size))
                    && (kind != DataKind::Rodata || b.is_const_volatile(t).unwrap_or(false))
            });
            out.push(Global {
                name: s.name.clone(),
                section: sec.name.clone(),
                map_index,
                offset,
                size,
                btf_type,
                type_name,
                default: default.to_vec(),
                settable,
            });
        }
    }
    out
}

/// The scalar shape of an integer, bool or enum type; the C spelling otherwise.
pub(crate) fn scalar_type(btf: &Btf, ty: u32) -> Result<ScalarType, String> {
    let r = btf.skip_mods(ty).map_err(|e| e.to_string())?;
    match btf.type_by_id(r).map_err(|e| e.to_string())? {
        BtfType::Int { size, encoding, .. } if matches!(size, 1 | 2 | 4 | 8) => Ok(ScalarType {
            size: *size,
            signed: encoding.signed,
            is_bool: encoding.bool,
            enumerators: vec![],
        }),
        BtfType::Enum {
            size,
            signed,
            values,
            ..
        } if matches!(size, 1 | 2 | 4 | 8) => Ok(ScalarType {
            size: *size,
            signed: *signed,
            is_bool: false,
            enumerators: values.clone(),
        }),
        _ => Err(btf.type_name(ty)),
    }
}

/// The length of a `char` array type (a string knob: `const volatile char name[64]`).
pub(crate) fn char_array_len(btf: &Btf, ty: u32) -> Option<u32> {
    let r = btf.skip_mods(ty).ok()?;
    let BtfType::Array { elem, nelems, .. } = btf.type_by_id(r).ok()? else {
        return None;
    };
    let e = btf.skip_mods(*elem).ok()?;
    matches!(btf.type_by_id(e).ok()?, BtfType::Int { size: 1, .. }).then_some(*nelems)
}

/// The bytes of string knob `text` in a `char[len]`: the text, then NULs (at least one).
fn encode_string(text: &str, len: u32) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    if bytes.contains(&0) {
        return Err("a string knob cannot contain a NUL byte".into());
    }
    if bytes.len() >= len as usize {
        return Err(format!(
            "{} bytes do not fit char[{len}] with its terminating NUL (at most {})",
            bytes.len(),
            len.saturating_sub(1)
        ));
    }
    let mut v = bytes.to_vec();
    v.resize(len as usize, 0);
    Ok(v)
}

/// Parses `text` for `global` and writes it into the map's initial bytes.
pub(crate) fn set_global(
    global: &Global,
    btf: Option<&Btf>,
    map: &mut MapDef,
    text: &str,
) -> Result<(), GlobalError> {
    let name = global.name.clone();
    let (Some(btf), Some(ty)) = (btf, global.btf_type) else {
        return Err(GlobalError::NoBtf { name });
    };
    let type_name = global.type_name.clone().unwrap_or_default();
    let string_len = char_array_len(btf, ty);
    let st = match (scalar_type(btf, ty), string_len) {
        (Ok(st), _) => Some(st),
        (Err(_), Some(_)) => None,
        (Err(type_name), None) => {
            return Err(GlobalError::UnsupportedType {
                name: name.clone(),
                type_name,
            })
        }
    };
    if map.origin == super::maps::MapOrigin::Global(DataKind::Rodata)
        && !btf.is_const_volatile(ty).unwrap_or(false)
    {
        return Err(GlobalError::NotConstVolatile {
            name,
            section: global.section.clone(),
        });
    }
    let size = st.as_ref().map_or(string_len.unwrap_or(0), |st| st.size);
    if size != global.size {
        return Err(GlobalError::Inconsistent {
            name,
            reason: format!("BTF says {size} bytes, the symbol table {}", global.size),
        });
    }
    let bad = |reason: String| GlobalError::BadValue {
        name: name.clone(),
        type_name: type_name.clone(),
        reason,
    };
    let bytes = match &st {
        Some(st) => value::encode(value::parse_scalar(text, st).map_err(bad)?, st.size),
        None => encode_string(text, size).map_err(bad)?,
    };
    let start = global.offset as usize;
    let slot = map
        .initial
        .as_mut()
        .and_then(|init| init.get_mut(start..start + bytes.len()))
        .ok_or_else(|| GlobalError::Inconsistent {
            name: name.clone(),
            reason: format!(
                "offset {} + size {} lies outside its map `{}`",
                global.offset, global.size, map.name
            ),
        })?;
    slot.copy_from_slice(&bytes);
    Ok(())
}
