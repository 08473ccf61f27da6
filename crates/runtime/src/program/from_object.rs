//! Map definitions of a parsed [`Object`], with key/value types resolved from BTF into
//! self-contained [`TypeDesc`]s for typed dumps.

use crate::maps::{FieldDesc, MapMeta, MapSpec, MapType, TypeDesc};
use crate::object::btf::{Btf, BtfType};
use crate::object::{MapKind, Object};

use super::MapDef;

/// Nesting limit when resolving types (hostile BTF cannot recurse forever).
const MAX_DEPTH: usize = 16;

/// The map type of an object map kind.
pub fn map_type(kind: MapKind) -> MapType {
    match kind {
        MapKind::Hash => MapType::Hash,
        MapKind::Array => MapType::Array,
        MapKind::LruHash => MapType::LruHash,
        MapKind::RingBuf => MapType::RingBuf,
    }
}

/// The object's maps as binding definitions, in object order.
pub fn map_defs(obj: &Object) -> Vec<MapDef> {
    obj.maps
        .iter()
        .enumerate()
        .map(|(index, m)| {
            let btf = obj.btf.as_ref();
            let resolve = |r: &Option<crate::object::BtfTypeRef>| {
                r.as_ref()
                    .and_then(|t| btf.and_then(|b| type_desc(b, t.id, 0)))
            };
            let mut key_type = resolve(&m.key_type);
            let mut value_type = resolve(&m.value_type);
            if m.kind == MapKind::Array && key_type.is_none() {
                // Array keys are always a u32 index.
                key_type = Some(TypeDesc::Int {
                    name: "__u32".into(),
                    size: 4,
                    signed: false,
                    is_bool: false,
                });
            }
            if m.is_global() {
                value_type = global_value_type(obj, index, &m.name, m.value_size);
            }
            MapDef {
                name: m.name.clone(),
                spec: MapSpec {
                    map_type: map_type(m.kind),
                    key_size: m.key_size,
                    value_size: m.value_size,
                    max_entries: m.max_entries,
                    flags: m.flags,
                },
                meta: MapMeta {
                    name: m.name.clone(),
                    key_type,
                    value_type,
                    global_section: m.is_global().then(|| m.name.clone()),
                },
                initial: m.initial.clone(),
                pinned: m.pinned,
            }
        })
        .collect()
}

/// The value type of global-data map `index`: a struct named after the section with one
/// field per variable of [`Object::globals`], at the symbol table's offset. clang leaves
/// the sizes and variable offsets of a `DATASEC` at 0 (libbpf fills them in from the
/// section and the symbol table), so the `DATASEC` itself cannot be trusted; `inspect`
/// and `--set` use the same offsets. A variable without a usable BTF type is hex bytes.
fn global_value_type(obj: &Object, index: usize, section: &str, size: u32) -> Option<TypeDesc> {
    let btf = obj.btf.as_ref();
    let mut fields: Vec<FieldDesc> = obj
        .globals
        .iter()
        .filter(|g| g.map_index == index)
        .filter_map(|g| {
            let typed = btf
                .zip(g.btf_type)
                .and_then(|(b, t)| type_desc(b, t, 0))
                .filter(|t| t.size() == g.size);
            let ty = typed.unwrap_or_else(|| TypeDesc::Opaque {
                name: g.type_name.clone().unwrap_or_else(|| "?".into()),
                size: g.size,
            });
            Some(FieldDesc {
                name: g.name.clone(),
                bit_offset: g.offset.checked_mul(8)?,
                bit_size: 0,
                ty,
            })
        })
        .collect();
    if fields.is_empty() {
        return None;
    }
    fields.sort_by_key(|f| f.bit_offset);
    Some(TypeDesc::Struct {
        name: section.to_owned(),
        size,
        fields,
    })
}

/// Resolves BTF type `id` into a [`TypeDesc`]; `None` for types without a printable form.
pub fn type_desc(btf: &Btf, id: u32, depth: usize) -> Option<TypeDesc> {
    if depth > MAX_DEPTH {
        return None;
    }
    let name = spelled_name(btf, id);
    let id = btf.skip_mods(id).ok()?;
    let t = btf.type_by_id(id).ok()?;
    Some(match t {
        BtfType::Int { size, encoding, .. } => TypeDesc::Int {
            name,
            size: *size,
            signed: encoding.signed,
            is_bool: encoding.bool,
        },
        BtfType::Enum {
            size,
            signed,
            values,
            ..
        } => TypeDesc::Enum {
            name,
            size: *size,
            signed: *signed,
            values: values
                .iter()
                .filter_map(|(n, v)| Some((n.clone(), i64::try_from(*v).ok()?)))
                .collect(),
        },
        BtfType::Struct { size, members, .. } | BtfType::Union { size, members, .. } => {
            TypeDesc::Struct {
                name: match t {
                    BtfType::Struct { name, .. } | BtfType::Union { name, .. } => name.clone(),
                    _ => String::new(),
                },
                size: *size,
                fields: members
                    .iter()
                    .filter_map(|m| member(btf, m.type_id, &m.name, m.offset, depth))
                    .collect(),
            }
        }
        BtfType::Array { elem, nelems, .. } => TypeDesc::Array {
            elem: Box::new(type_desc(btf, *elem, depth + 1)?),
            len: *nelems,
        },
        BtfType::DataSec { name, size, vars } => TypeDesc::Struct {
            name: name.clone(),
            size: *size,
            fields: vars
                .iter()
                .filter_map(|v| {
                    let (vname, target) = btf.var(v.type_id)?;
                    Some(FieldDesc {
                        name: vname.to_owned(),
                        bit_offset: v.offset.checked_mul(8)?,
                        bit_size: 0,
                        ty: type_desc(btf, target, depth + 1)?,
                    })
                })
                .collect(),
        },
        _ => TypeDesc::Opaque {
            name,
            size: u32::try_from(btf.size_of(id).ok()?).ok()?,
        },
    })
}

/// The name of type `id` as the source spells it: the first typedef's name (`__u32`, not
/// `unsigned int`), without `const`/`volatile`; else the type's own name.
fn spelled_name(btf: &Btf, mut id: u32) -> String {
    for _ in 0..MAX_DEPTH {
        match btf.type_by_id(id) {
            Ok(BtfType::Typedef { name, .. }) => return name.clone(),
            Ok(
                BtfType::Const { target }
                | BtfType::Volatile { target }
                | BtfType::Restrict { target }
                | BtfType::TypeTag { target, .. },
            ) => id = *target,
            _ => break,
        }
    }
    btf.type_name(id)
}

fn member(btf: &Btf, type_id: u32, name: &str, offset: u32, depth: usize) -> Option<FieldDesc> {
    let ty = type_desc(btf, type_id, depth + 1)?;
    // With the kind flag, the upper 8 bits hold a bitfield size; offsets that large
    // (16 MiB) do not occur otherwise.
    let (mut bit_offset, mut bit_size) = if offset >> 24 != 0 {
        (offset & 0x00ff_ffff, offset >> 24)
    } else {
        (offset, 0)
    };
    if bit_size == 0 {
        if let Ok(BtfType::Int {
            size,
            bit_offset: bo,
            bits,
            ..
        }) = btf.skip_mods(type_id).and_then(|r| btf.type_by_id(r))
        {
            if u32::from(*bits) < size * 8 {
                bit_offset += u32::from(*bo);
                bit_size = u32::from(*bits);
            }
        }
    }
    if bit_size == 0 && bit_offset % 8 != 0 {
        bit_size = ty.size().checked_mul(8)?;
    }
    Some(FieldDesc {
        name: name.to_owned(),
        bit_offset,
        bit_size,
        ty,
    })
}
