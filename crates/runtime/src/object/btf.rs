//! A small parser for the BPF Type Format (`.BTF` section).
//!
//! Only what the loader needs: every type kind is decoded (so that type ids stay aligned),
//! names are resolved eagerly, and the queries are type sizes, C-like type names, modifier
//! chains (`const volatile`), `DATASEC`/`VAR` (globals and `.maps`) and enum values. All
//! offsets in errors are byte offsets into the `.BTF` section.

use super::reader::{cstr_at, u16_at, u32_at, OutOfBounds};

/// BTF magic number.
pub const BTF_MAGIC: u16 = 0xeb9f;
/// Deepest chain of typedefs/modifiers/arrays followed before giving up (hostile loops).
const MAX_RESOLVE_DEPTH: usize = 32;
/// Most types accepted in one object (bounds memory on hostile input).
const MAX_TYPES: usize = 1 << 20;

/// An error in the `.BTF` section. `offset` is a byte offset into the section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    #[error("truncated at offset {offset}: reading {len} bytes for {what}")]
    Truncated {
        offset: usize,
        len: usize,
        what: &'static str,
    },
    #[error("bad magic {magic:#06x} (expected 0xeb9f; big-endian BTF is not supported)")]
    BadMagic { magic: u16 },
    #[error("unsupported version {version}")]
    UnsupportedVersion { version: u8 },
    #[error("header: {reason}")]
    BadHeader { reason: String },
    #[error("type {id} at offset {offset}: name offset {name_off} is outside the string table")]
    BadName {
        id: u32,
        offset: usize,
        name_off: u32,
    },
    #[error("type {id} at offset {offset}: unknown kind {kind}")]
    UnknownKind { id: u32, offset: usize, kind: u32 },
    #[error("more than {max} types")]
    TooManyTypes { max: usize },
    #[error("type id {id} does not exist (the section has {count} types)")]
    BadTypeId { id: u32, count: usize },
    #[error("type {id}: chain of typedefs, modifiers or arrays deeper than {max} (a loop?)")]
    TooDeep { id: u32, max: usize },
    #[error("type {id} (`{name}`) has no size")]
    NoSize { id: u32, name: String },
    #[error("type {id}: size overflows")]
    SizeOverflow { id: u32 },
}

fn trunc(what: &'static str) -> impl Fn(OutOfBounds) -> BtfError {
    move |e| BtfError::Truncated {
        offset: e.offset,
        len: e.len,
        what,
    }
}

/// Encoding bits of a BTF `INT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntEncoding {
    pub signed: bool,
    pub char: bool,
    pub bool: bool,
}

/// A member of a struct or union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub type_id: u32,
    /// Offset in bits (bitfield size in the upper 8 bits when the kind flag is set).
    pub offset: u32,
}

/// A function parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub type_id: u32,
}

/// A variable of a `DATASEC`: its `VAR` type id, offset and size in the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarSecInfo {
    pub type_id: u32,
    pub offset: u32,
    pub size: u32,
}

/// One BTF type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtfType {
    /// Type id 0.
    Void,
    Int {
        name: String,
        size: u32,
        encoding: IntEncoding,
        bit_offset: u8,
        bits: u8,
    },
    Ptr {
        target: u32,
    },
    Array {
        elem: u32,
        index: u32,
        nelems: u32,
    },
    Struct {
        name: String,
        size: u32,
        members: Vec<Member>,
    },
    Union {
        name: String,
        size: u32,
        members: Vec<Member>,
    },
    /// `ENUM` and `ENUM64`.
    Enum {
        name: String,
        size: u32,
        signed: bool,
        values: Vec<(String, i128)>,
    },
    Fwd {
        name: String,
        is_union: bool,
    },
    Typedef {
        name: String,
        target: u32,
    },
    Volatile {
        target: u32,
    },
    Const {
        target: u32,
    },
    Restrict {
        target: u32,
    },
    Func {
        name: String,
        proto: u32,
        linkage: u16,
    },
    FuncProto {
        ret: u32,
        params: Vec<Param>,
    },
    Var {
        name: String,
        target: u32,
        linkage: u32,
    },
    DataSec {
        name: String,
        size: u32,
        vars: Vec<VarSecInfo>,
    },
    Float {
        name: String,
        size: u32,
    },
    DeclTag {
        name: String,
        target: u32,
        component: i32,
    },
    TypeTag {
        name: String,
        target: u32,
    },
}

/// Parsed BTF: types indexed by id (id 0 is `void`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Btf {
    types: Vec<BtfType>,
    strings: Vec<u8>,
}

impl Btf {
    /// Parses a `.BTF` section.
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        let magic = u16_at(data, 0).map_err(trunc("header"))?;
        if magic != BTF_MAGIC {
            return Err(BtfError::BadMagic { magic });
        }
        let version = super::reader::bytes(data, 2, 1).map_err(trunc("header"))?[0];
        if version != 1 {
            return Err(BtfError::UnsupportedVersion { version });
        }
        let hdr_len = u32_at(data, 4).map_err(trunc("header"))? as usize;
        let type_off = u32_at(data, 8).map_err(trunc("header"))? as usize;
        let type_len = u32_at(data, 12).map_err(trunc("header"))? as usize;
        let str_off = u32_at(data, 16).map_err(trunc("header"))? as usize;
        let str_len = u32_at(data, 20).map_err(trunc("header"))? as usize;
        if hdr_len < 24 {
            return Err(BtfError::BadHeader {
                reason: format!("header length {hdr_len} is shorter than 24"),
            });
        }
        let range = |off: usize, len: usize, what: &str| {
            hdr_len
                .checked_add(off)
                .and_then(|s| s.checked_add(len).map(|e| (s, e)))
                .filter(|&(_, e)| e <= data.len())
                .ok_or_else(|| BtfError::BadHeader {
                    reason: format!(
                        "{what} ({off}+{len} after the {hdr_len}-byte header) exceeds the section ({} bytes)",
                        data.len()
                    ),
                })
        };
        let (ts, te) = range(type_off, type_len, "type section")?;
        let (ss, se) = range(str_off, str_len, "string section")?;
        let strings = data[ss..se].to_vec();
        let mut btf = Btf {
            types: vec![BtfType::Void],
            strings,
        };
        let mut off = ts;
        while off < te {
            if btf.types.len() > MAX_TYPES {
                return Err(BtfError::TooManyTypes { max: MAX_TYPES });
            }
            let id = btf.types.len() as u32;
            let (ty, next) = btf.parse_type(&data[..te], off, id)?;
            btf.types.push(ty);
            off = next;
        }
        Ok(btf)
    }

    fn name(&self, name_off: u32, id: u32, offset: usize) -> Result<String, BtfError> {
        cstr_at(&self.strings, name_off as usize).ok_or(BtfError::BadName {
            id,
            offset,
            name_off,
        })
    }

    /// A string of the string table (used by `.BTF.ext`).
    pub fn string_at(&self, off: u32) -> Option<String> {
        cstr_at(&self.strings, off as usize)
    }

    fn parse_type(&self, d: &[u8], off: usize, id: u32) -> Result<(BtfType, usize), BtfError> {
        let t = trunc("a type");
        let name_off = u32_at(d, off).map_err(&t)?;
        let info = u32_at(d, off + 4).map_err(&t)?;
        let size_or_type = u32_at(d, off + 8).map_err(&t)?;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kflag = info >> 31 == 1;
        let mut p = off + 12;
        let name = || self.name(name_off, id, off);
        let ty = match kind {
            1 => {
                let v = u32_at(d, p).map_err(&t)?;
                p += 4;
                let enc = (v >> 24) & 0x0f;
                BtfType::Int {
                    name: name()?,
                    size: size_or_type,
                    encoding: IntEncoding {
                        signed: enc & 1 != 0,
                        char: enc & 2 != 0,
                        bool: enc & 4 != 0,
                    },
                    bit_offset: (v >> 16) as u8,
                    bits: v as u8,
                }
            }
            2 => BtfType::Ptr {
                target: size_or_type,
            },
            3 => {
                let elem = u32_at(d, p).map_err(&t)?;
                let index = u32_at(d, p + 4).map_err(&t)?;
                let nelems = u32_at(d, p + 8).map_err(&t)?;
                p += 12;
                BtfType::Array {
                    elem,
                    index,
                    nelems,
                }
            }
            4 | 5 => {
                let mut members = Vec::with_capacity(vlen.min(1024));
                for _ in 0..vlen {
                    let m_name = u32_at(d, p).map_err(&t)?;
                    members.push(Member {
                        name: self.name(m_name, id, p)?,
                        type_id: u32_at(d, p + 4).map_err(&t)?,
                        offset: u32_at(d, p + 8).map_err(&t)?,
                    });
                    p += 12;
                }
                let (name, size) = (name()?, size_or_type);
                if kind == 4 {
                    BtfType::Struct {
                        name,
                        size,
                        members,
                    }
                } else {
                    BtfType::Union {
                        name,
                        size,
                        members,
                    }
                }
            }
            6 | 19 => {
                let mut values = Vec::with_capacity(vlen.min(1024));
                for _ in 0..vlen {
                    let v_name = u32_at(d, p).map_err(&t)?;
                    let lo = u32_at(d, p + 4).map_err(&t)?;
                    let value = if kind == 6 {
                        p += 8;
                        if kflag {
                            i128::from(lo as i32)
                        } else {
                            i128::from(lo)
                        }
                    } else {
                        let hi = u32_at(d, p + 8).map_err(&t)?;
                        p += 12;
                        let v = (u64::from(hi) << 32) | u64::from(lo);
                        if kflag {
                            i128::from(v as i64)
                        } else {
                            i128::from(v)
                        }
                    };
                    values.push((self.name(v_name, id, p)?, value));
                }
                BtfType::Enum {
                    name: name()?,
                    size: size_or_type,
                    signed: kflag,
                    values,
                }
            }
            7 => BtfType::Fwd {
                name: name()?,
                is_union: kflag,
            },
            8 => BtfType::Typedef {
                name: name()?,
                target: size_or_type,
            },
            9 => BtfType::Volatile {
                target: size_or_type,
            },
            10 => BtfType::Const {
                target: size_or_type,
            },
            11 => BtfType::Restrict {
                target: size_or_type,
            },
            12 => BtfType::Func {
                name: name()?,
                proto: size_or_type,
                linkage: vlen as u16,
            },
            13 => {
                let mut params = Vec::with_capacity(vlen.min(1024));
                for _ in 0..vlen {
                    let p_name = u32_at(d, p).map_err(&t)?;
                    params.push(Param {
                        name: self.name(p_name, id, p)?,
                        type_id: u32_at(d, p + 4).map_err(&t)?,
                    });
                    p += 8;
                }
                BtfType::FuncProto {
                    ret: size_or_type,
                    params,
                }
            }
            14 => {
                let linkage = u32_at(d, p).map_err(&t)?;
                p += 4;
                BtfType::Var {
                    name: name()?,
                    target: size_or_type,
                    linkage,
                }
            }
            15 => {
                let mut vars = Vec::with_capacity(vlen.min(1024));
                for _ in 0..vlen {
                    vars.push(VarSecInfo {
                        type_id: u32_at(d, p).map_err(&t)?,
                        offset: u32_at(d, p + 4).map_err(&t)?,
                        size: u32_at(d, p + 8).map_err(&t)?,
                    });
                    p += 12;
                }
                BtfType::DataSec {
                    name: name()?,
                    size: size_or_type,
                    vars,
                }
            }
            16 => BtfType::Float {
                name: name()?,
                size: size_or_type,
            },
            17 => {
                let component = u32_at(d, p).map_err(&t)? as i32;
                p += 4;
                BtfType::DeclTag {
                    name: name()?,
                    target: size_or_type,
                    component,
                }
            }
            18 => BtfType::TypeTag {
                name: name()?,
                target: size_or_type,
            },
            _ => {
                return Err(BtfError::UnknownKind {
                    id,
                    offset: off,
                    kind,
                })
            }
        };
        Ok((ty, p))
    }

    /// Number of types including `void` (valid ids are `0..len()`).
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether only `void` is present.
    pub fn is_empty(&self) -> bool {
        self.types.len() <= 1
    }

    /// The type with this id.
    pub fn type_by_id(&self, id: u32) -> Result<&BtfType, BtfError> {
        self.types.get(id as usize).ok_or(BtfError::BadTypeId {
            id,
            count: self.types.len(),
        })
    }

    /// All types with their ids.
    pub fn types(&self) -> impl Iterator<Item = (u32, &BtfType)> {
        self.types.iter().enumerate().map(|(i, t)| (i as u32, t))
    }

    /// Follows typedefs and modifiers (`const`, `volatile`, `restrict`, type tags).
    pub fn skip_mods(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..MAX_RESOLVE_DEPTH {
            match self.type_by_id(id)? {
                BtfType::Typedef { target, .. }
                | BtfType::Volatile { target }
                | BtfType::Const { target }
                | BtfType::Restrict { target }
                | BtfType::TypeTag { target, .. } => id = *target,
                _ => return Ok(id),
            }
        }
        Err(BtfError::TooDeep {
            id,
            max: MAX_RESOLVE_DEPTH,
        })
    }

    /// Whether the modifier chain of `id` (before the first non-modifier) has both `const`
    /// and `volatile` — the mark of a load-time-settable `.rodata` global.
    pub fn is_const_volatile(&self, mut id: u32) -> Result<bool, BtfError> {
        let (mut c, mut v) = (false, false);
        for _ in 0..MAX_RESOLVE_DEPTH {
            match self.type_by_id(id)? {
                BtfType::Const { target } => {
                    c = true;
                    id = *target;
                }
                BtfType::Volatile { target } => {
                    v = true;
                    id = *target;
                }
                BtfType::Typedef { target, .. }
                | BtfType::Restrict { target }
                | BtfType::TypeTag { target, .. } => id = *target,
                // `const volatile char s[64]` qualifies the elements: C has no qualified
                // array types.
                BtfType::Array { elem, .. } => id = *elem,
                _ => return Ok(c && v),
            }
        }
        Err(BtfError::TooDeep {
            id,
            max: MAX_RESOLVE_DEPTH,
        })
    }

    /// Size in bytes of a type.
    pub fn size_of(&self, id: u32) -> Result<u64, BtfError> {
        self.size_of_depth(id, 0)
    }

    fn size_of_depth(&self, id: u32, depth: usize) -> Result<u64, BtfError> {
        if depth > MAX_RESOLVE_DEPTH {
            return Err(BtfError::TooDeep {
                id,
                max: MAX_RESOLVE_DEPTH,
            });
        }
        let r = self.skip_mods(id)?;
        match self.type_by_id(r)? {
            BtfType::Int { size, .. }
            | BtfType::Struct { size, .. }
            | BtfType::Union { size, .. }
            | BtfType::Enum { size, .. }
            | BtfType::Float { size, .. }
            | BtfType::DataSec { size, .. } => Ok(u64::from(*size)),
            BtfType::Ptr { .. } => Ok(8),
            BtfType::Array { elem, nelems, .. } => self
                .size_of_depth(*elem, depth + 1)?
                .checked_mul(u64::from(*nelems))
                .ok_or(BtfError::SizeOverflow { id: r }),
            BtfType::Var { target, .. } => self.size_of_depth(*target, depth + 1),
            _ => Err(BtfError::NoSize {
                id: r,
                name: self.type_name(r),
            }),
        }
    }

    /// A C-like spelling of a type (`const volatile __u64`, `struct event *`, `char[4]`);
    /// never fails (unknown ids print as `<bad type N>`).
    pub fn type_name(&self, id: u32) -> String {
        self.type_name_depth(id, 0)
    }

    fn type_name_depth(&self, id: u32, depth: usize) -> String {
        if depth > MAX_RESOLVE_DEPTH {
            return "<…>".to_string();
        }
        let Ok(t) = self.type_by_id(id) else {
            return format!("<bad type {id}>");
        };
        let named = |kw: &str, name: &str| {
            if name.is_empty() {
                format!("{kw} <anon>")
            } else {
                format!("{kw} {name}")
            }
        };
        let inner = |t: u32| self.type_name_depth(t, depth + 1);
        match t {
            BtfType::Void => "void".to_string(),
            BtfType::Int { name, .. }
            | BtfType::Typedef { name, .. }
            | BtfType::Float { name, .. }
            | BtfType::Func { name, .. }
            | BtfType::Var { name, .. }
            | BtfType::DataSec { name, .. } => name.clone(),
            BtfType::Ptr { target } => format!("{} *", inner(*target)),
            BtfType::Array { elem, nelems, .. } => format!("{}[{nelems}]", inner(*elem)),
            BtfType::Struct { name, .. } => named("struct", name),
            BtfType::Union { name, .. } => named("union", name),
            BtfType::Enum { name, .. } => named("enum", name),
            BtfType::Fwd { name, is_union } => {
                named(if *is_union { "union" } else { "struct" }, name)
            }
            BtfType::Volatile { target } => format!("volatile {}", inner(*target)),
            BtfType::Const { target } => format!("const {}", inner(*target)),
            BtfType::Restrict { target } => format!("{} restrict", inner(*target)),
            BtfType::FuncProto { .. } => "fn".to_string(),
            BtfType::DeclTag { target, .. } | BtfType::TypeTag { target, .. } => inner(*target),
        }
    }

    /// The `DATASEC` named `name`, if any: its vars.
    pub fn datasec(&self, name: &str) -> Option<&[VarSecInfo]> {
        self.types.iter().find_map(|t| match t {
            BtfType::DataSec { name: n, vars, .. } if n == name => Some(vars.as_slice()),
            _ => None,
        })
    }

    /// Name and target type of a `VAR`.
    pub fn var(&self, id: u32) -> Option<(&str, u32)> {
        match self.types.get(id as usize)? {
            BtfType::Var { name, target, .. } => Some((name, *target)),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a `.BTF` section from raw type words and a string table (test helper).
    pub(crate) fn build(types: &[u32], strings: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        let tlen = (types.len() * 4) as u32;
        for v in [24u32, 0, tlen, tlen, strings.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for w in types {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(strings);
        out
    }

    const fn info(kind: u32, vlen: u32) -> u32 {
        (kind << 24) | vlen
    }

    #[test]
    fn parses_ints_modifiers_arrays_and_names() {
        // strings: 0 "", 1 "__u64", 7 "x"
        let strings = b"\0__u64\0x\0";
        let types = [
            1,
            info(1, 0),
            8,
            64, // 1: int __u64
            0,
            info(9, 0),
            1, // 2: volatile __u64
            0,
            info(10, 0),
            2, // 3: const volatile __u64
            0,
            info(3, 0),
            0,
            1,
            1,
            4, // 4: __u64[4]
            7,
            info(2, 0),
            4, // 5: ptr (named "x", ignored)
        ];
        let btf = Btf::parse(&build(&types, strings)).unwrap();
        assert_eq!(btf.len(), 6);
        assert_eq!(btf.size_of(3).unwrap(), 8);
        assert_eq!(btf.size_of(4).unwrap(), 32);
        assert_eq!(btf.size_of(5).unwrap(), 8);
        assert!(btf.is_const_volatile(3).unwrap());
        assert!(!btf.is_const_volatile(2).unwrap());
        assert_eq!(btf.type_name(3), "const volatile __u64");
        assert_eq!(btf.type_name(5), "__u64[4] *");
        assert_eq!(btf.type_name(99), "<bad type 99>");
    }

    #[test]
    fn rejects_hostile_input_with_offsets() {
        assert!(matches!(
            Btf::parse(&[0x9f, 0xeb]),
            Err(BtfError::Truncated { offset: 2, .. })
        ));
        assert_eq!(
            Btf::parse(&[0x9f, 0xeb, 2, 0]),
            Err(BtfError::UnsupportedVersion { version: 2 })
        );
        let mut b = build(&[0, info(1, 0), 4], b"\0");
        assert!(matches!(
            Btf::parse(&b),
            Err(BtfError::Truncated { offset: 36, .. })
        ));
        b = build(&[500, info(1, 0), 4, 32], b"\0");
        assert!(matches!(
            Btf::parse(&b),
            Err(BtfError::BadName { id: 1, .. })
        ));
        b = build(&[0, info(30, 0), 4], b"\0");
        assert!(matches!(
            Btf::parse(&b),
            Err(BtfError::UnknownKind { kind: 30, .. })
        ));
        // A typedef loop: 1 -> 2 -> 1.
        b = build(&[0, info(8, 0), 2, 0, info(8, 0), 1], b"\0");
        let btf = Btf::parse(&b).unwrap();
        assert!(matches!(btf.size_of(1), Err(BtfError::TooDeep { .. })));
        // Array of arrays that overflows.
        b = build(
            &[
                0,
                info(1, 0),
                8,
                64,
                0,
                info(3, 0),
                0,
                1,
                1,
                u32::MAX,
                0,
                info(3, 0),
                0,
                2,
                1,
                u32::MAX,
            ],
            b"\0",
        );
        let btf = Btf::parse(&b).unwrap();
        assert!(matches!(btf.size_of(3), Err(BtfError::SizeOverflow { .. })));
    }
}
