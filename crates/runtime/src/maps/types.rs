//! Key and value types (from BTF) for typed dumps and typed input.
//!
//! A [`TypeDesc`] is a self-contained, serialisable description of a C type, resolved from
//! the object's BTF by the loader and stored in the map file's metadata, so that the CLI can
//! print `struct { __u64 calls; __u64 bytes; }` values as `{"calls": 3, "bytes": 4096}`
//! without the object at hand. Without a type, keys and values are hex bytes.

use serde_json::{Map as JsonMap, Value};

/// A C type, as far as dumping and parsing values needs it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TypeDesc {
    /// An integer (`char`, `_Bool` and enums without names included).
    Int {
        name: String,
        size: u32,
        signed: bool,
        /// `_Bool` (BTF's bool encoding): printed as `true`/`false`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_bool: bool,
    },
    /// An enumeration: printed by name when a value matches.
    Enum {
        name: String,
        size: u32,
        signed: bool,
        values: Vec<(String, i64)>,
    },
    /// A struct or union: printed as a JSON object.
    Struct {
        name: String,
        size: u32,
        fields: Vec<FieldDesc>,
    },
    /// A fixed-size array: printed as a JSON array (`char` arrays as strings).
    Array { elem: Box<TypeDesc>, len: u32 },
    /// Anything else (pointers, floats, …): printed as hex.
    Opaque { name: String, size: u32 },
}

/// A member of a struct or union.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FieldDesc {
    /// Member name (empty for anonymous members).
    pub name: String,
    /// Offset in bits from the start of the struct.
    pub bit_offset: u32,
    /// Bitfield width, 0 for an ordinary member.
    #[serde(default)]
    pub bit_size: u32,
    /// Member type.
    #[serde(rename = "type")]
    pub ty: TypeDesc,
}

/// Errors turning text into bytes of a typed value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("expected {expected} bytes, got {actual}")]
    Size { expected: usize, actual: usize },
    #[error("invalid hex byte `{token}`")]
    Hex { token: String },
    #[error("`{input}` is not a valid {what}")]
    Parse { input: String, what: String },
    #[error("`{input}` is not a valid {what}: {reason}")]
    Number {
        input: String,
        what: String,
        reason: String,
    },
    #[error("value {value} does not fit {what}")]
    Range { value: String, what: String },
    #[error("struct `{strukt}` has no field `{field}`")]
    NoField { strukt: String, field: String },
    #[error("without BTF type information, give hex bytes (`hex:0a000000` or `0a 00 00 00`) or an integer for 1/2/4/8-byte values")]
    Untyped,
}

impl TypeDesc {
    /// Size in bytes.
    pub fn size(&self) -> u32 {
        match self {
            TypeDesc::Int { size, .. }
            | TypeDesc::Enum { size, .. }
            | TypeDesc::Struct { size, .. }
            | TypeDesc::Opaque { size, .. } => *size,
            TypeDesc::Array { elem, len } => elem.size().saturating_mul(*len),
        }
    }

    fn is_char(&self) -> bool {
        matches!(self, TypeDesc::Int { name, size: 1, .. } if name.contains("char"))
    }

    /// The type as the C source spells it (typedef names kept: `__u32`, `struct usage`),
    /// the spelling `inspect` and `maps show` share; a global-data section's value is
    /// spelled by its section name (`.rodata`), as BTF names its `DATASEC`.
    pub fn c_name(&self) -> String {
        match self {
            TypeDesc::Int { name, .. }
            | TypeDesc::Enum { name, .. }
            | TypeDesc::Opaque { name, .. } => name.clone(),
            TypeDesc::Struct { name, .. } => {
                if name.starts_with('.') {
                    name.clone()
                } else if name.is_empty() {
                    "struct <anon>".into()
                } else {
                    format!("struct {name}")
                }
            }
            TypeDesc::Array { elem, len } => format!("{}[{len}]", elem.c_name()),
        }
    }
}

/// Hex rendering of bytes: `"0a 00 00 00"`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn read_uint(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = bytes.len().min(8);
    w[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(w)
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    if bits == 0 || bits >= 64 {
        return v as i64;
    }
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// Renders `bytes` as JSON following `ty`; falls back to hex where the type does not fit
/// the bytes (a type is a hint, never trusted to index memory).
pub fn format_value(ty: Option<&TypeDesc>, bytes: &[u8]) -> Value {
    match ty {
        Some(t) if t.size() as usize == bytes.len() => format_typed(t, bytes),
        _ => Value::String(hex(bytes)),
    }
}

fn format_typed(ty: &TypeDesc, bytes: &[u8]) -> Value {
    match ty {
        TypeDesc::Int {
            size,
            signed,
            is_bool,
            ..
        } if matches!(size, 1 | 2 | 4 | 8) => {
            let v = read_uint(bytes);
            if *is_bool && v <= 1 {
                Value::Bool(v == 1)
            } else if *signed {
                Value::from(sign_extend(v, size * 8))
            } else {
                Value::from(v)
            }
        }
        TypeDesc::Enum {
            size,
            signed,
            values,
            ..
        } if matches!(size, 1 | 2 | 4 | 8) => {
            let raw = read_uint(bytes);
            let v = if *signed {
                sign_extend(raw, size * 8)
            } else {
                raw as i64
            };
            match values.iter().find(|(_, x)| *x == v) {
                Some((n, _)) => Value::String(n.clone()),
                None => Value::from(v),
            }
        }
        TypeDesc::Struct { fields, .. } => {
            let mut obj = JsonMap::new();
            for (k, f) in fields.iter().enumerate() {
                let name = if f.name.is_empty() {
                    format!("<anon{k}>")
                } else {
                    f.name.clone()
                };
                obj.insert(name, format_field(f, bytes));
            }
            Value::Object(obj)
        }
        TypeDesc::Array { elem, len } => {
            let es = elem.size() as usize;
            if elem.is_char() {
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                if let Ok(s) = std::str::from_utf8(&bytes[..end]) {
                    return Value::String(s.to_owned());
                }
            }
            if es == 0 {
                return Value::Array(Vec::new());
            }
            Value::Array(
                bytes
                    .chunks_exact(es)
                    .take(*len as usize)
                    .map(|c| format_typed(elem, c))
                    .collect(),
            )
        }
        _ => Value::String(hex(bytes)),
    }
}

fn format_field(f: &FieldDesc, bytes: &[u8]) -> Value {
    if f.bit_size != 0 {
        // Bitfield: read the containing 8 bytes (or what is left) and extract.
        let byte = (f.bit_offset / 8) as usize;
        let shift = f.bit_offset % 8;
        if f.bit_size > 64 || byte >= bytes.len() {
            return Value::Null;
        }
        let raw = read_uint(&bytes[byte..]) >> shift;
        let mask = if f.bit_size == 64 {
            u64::MAX
        } else {
            (1u64 << f.bit_size) - 1
        };
        let v = raw & mask;
        let signed = matches!(f.ty, TypeDesc::Int { signed: true, .. });
        return if signed {
            Value::from(sign_extend(v, f.bit_size))
        } else {
            Value::from(v)
        };
    }
    let start = (f.bit_offset / 8) as usize;
    let end = start.saturating_add(f.ty.size() as usize);
    match bytes.get(start..end) {
        Some(b) => format_typed(&f.ty, b),
        None => Value::Null,
    }
}

/// Parses user input into exactly `size` bytes.
///
/// Accepted: raw bytes as bpftool reads them (`hex:0a000000`, `hex 0a 00 00 00`,
/// two-digit hex bytes `0a 00 00 00`, `0x0a 0x00 0x00 0x00`); with a type: JSON (`{"calls": 3}`, `[1,2]`, `42`, `"name"`), or
/// `field=value` pairs separated by commas or spaces; without a type, an integer
/// (decimal or `0x…`) for sizes 1, 2, 4, 8 (little-endian).
pub fn parse_value(ty: Option<&TypeDesc>, input: &str, size: usize) -> Result<Vec<u8>, ValueError> {
    let input = input.trim();
    if let Some(h) = raw_hex(input) {
        return parse_hex(&h, size);
    }
    let tokens: Vec<&str> = input.split_whitespace().collect();
    let ty = ty.filter(|t| t.size() as usize == size);
    match ty {
        Some(t) => {
            let mut out = vec![0u8; size];
            write_json(t, &typed_input(input), &mut out)?;
            Ok(out)
        }
        None => {
            if matches!(size, 1 | 2 | 4 | 8) {
                let v = match parse_int(input) {
                    Ok(v) => v,
                    // Something numeric that does not parse: say why.
                    Err(reason) if input.starts_with(|c: char| c.is_ascii_digit() || c == '-') => {
                        return Err(ValueError::Number {
                            input: input.into(),
                            what: format!("{size}-byte integer"),
                            reason,
                        })
                    }
                    Err(_) => return Err(ValueError::Untyped),
                };
                let bytes = v.to_le_bytes();
                let fits =
                    size == 8 || v < (1i128 << (size * 8)) && v >= -(1i128 << (size * 8 - 1));
                if !fits {
                    return Err(ValueError::Range {
                        value: input.into(),
                        what: format!("{size} bytes"),
                    });
                }
                Ok(bytes[..size].to_vec())
            } else if tokens.len() == 1 && input.len() == size * 2 && is_hex(input) {
                parse_hex(input, size)
            } else {
                Err(ValueError::Untyped)
            }
        }
    }
}

/// A value given in part: the bits of `mask` take the bits of `bytes`, the others keep
/// what the map holds (`bytes` is zero outside the mask, the value of a new entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    pub bytes: Vec<u8>,
    pub mask: Vec<u8>,
}

impl Patch {
    /// Whether the input gave every bit of the value (hex bytes, an integer, a whole JSON
    /// value of a non-struct type, or every field of a struct).
    pub fn is_whole(&self) -> bool {
        self.mask.iter().all(|&m| m == 0xff)
    }
}

/// Parses a value like [`parse_value`], keeping track of what the input named: a struct
/// given by field names (`denied=7`, `{"bytes": 1}`, `pair.lo=4`) sets only those fields
/// (a named array or string field as a whole); everything else is whole.
pub fn parse_patch(ty: Option<&TypeDesc>, input: &str, size: usize) -> Result<Patch, ValueError> {
    let whole = |bytes: Vec<u8>| Patch {
        mask: vec![0xff; bytes.len()],
        bytes,
    };
    let trimmed = input.trim();
    let is_hex_input = raw_hex(trimmed).is_some();
    let typed = ty.filter(|t| t.size() as usize == size);
    let Some(t) = typed.filter(|_| !is_hex_input) else {
        return parse_value(ty, input, size).map(whole);
    };
    // Write the value over zeroes and over ones: the bits that differ were not written.
    let v = typed_input(trimmed);
    let mut zeroes = vec![0u8; size];
    write_json(t, &v, &mut zeroes)?;
    let mut ones = vec![0xffu8; size];
    write_json(t, &v, &mut ones)?;
    let mask = zeroes.iter().zip(&ones).map(|(a, b)| !(a ^ b)).collect();
    Ok(Patch {
        bytes: zeroes,
        mask,
    })
}

/// Typed input as JSON: `field=value` pairs, JSON, or a bare word as a string.
fn typed_input(input: &str) -> Value {
    if input.contains('=') && !input.starts_with('{') {
        pairs_to_json(input)
    } else {
        serde_json::from_str(input).unwrap_or_else(|_| Value::String(input.to_owned()))
    }
}

/// The hex digits of input given as raw bytes, as bpftool reads them: `hex:0a000000`,
/// `hex 0a 00 00 00` / `hex 0a000000`, two-digit hex bytes `0a 00 00 00`, or a list of
/// `0x`-prefixed bytes `0x0a 0x00 0x00 0x00`.
fn raw_hex(input: &str) -> Option<String> {
    if let Some(h) = input.strip_prefix("hex:") {
        return Some(h.split_whitespace().collect());
    }
    if let Some(h) = input
        .strip_prefix("hex")
        .filter(|r| r.starts_with(char::is_whitespace))
    {
        return Some(h.split_whitespace().collect());
    }
    let tokens: Vec<&str> = input.split_whitespace().collect();
    if tokens.len() > 1 && tokens.iter().all(|t| t.len() == 2 && is_hex(t)) {
        return Some(tokens.concat());
    }
    let bytes: Option<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
            (matches!(h.len(), 1 | 2) && is_hex(h)).then(|| format!("{h:0>2}"))
        })
        .collect();
    bytes.filter(|b| b.len() > 1).map(|b| b.concat())
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_hex(h: &str, size: usize) -> Result<Vec<u8>, ValueError> {
    let h = h.strip_prefix("0x").unwrap_or(h);
    if h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ValueError::Hex { token: h.into() });
    }
    let bytes: Vec<u8> = (0..h.len() / 2)
        .filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    if bytes.len() != size {
        return Err(ValueError::Size {
            expected: size,
            actual: bytes.len(),
        });
    }
    Ok(bytes)
}

/// An integer as every gpubpf command reads one (`crate::object::parse_integer`: radix
/// prefixes, `_`, size suffixes `KiB`/`K` = 1024 and `KB` = 1000, …) or a boolean word;
/// as i128 to cover u64 and i64.
fn parse_int(s: &str) -> Result<i128, String> {
    match crate::object::parse_bool(s.trim()) {
        Some(b) => Ok(i128::from(b)),
        None => crate::object::parse_integer(s),
    }
}

/// `a=1,b.c=2 d=3` → `{"a":"1","b":{"c":"2"},"d":"3"}` (values stay strings; leaves are
/// parsed by type).
fn pairs_to_json(s: &str) -> Value {
    let mut root = JsonMap::new();
    for pair in s.split([',', ' ']).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let parts: Vec<&str> = k.split('.').collect();
        let mut cur = &mut root;
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                cur.insert((*part).to_owned(), Value::String(v.to_owned()));
            } else {
                let e = cur
                    .entry((*part).to_owned())
                    .or_insert_with(|| Value::Object(JsonMap::new()));
                if !e.is_object() {
                    *e = Value::Object(JsonMap::new());
                }
                match e {
                    Value::Object(m) => cur = m,
                    _ => break,
                }
            }
        }
    }
    Value::Object(root)
}

fn json_int(v: &Value, what: &str) -> Result<i128, ValueError> {
    let err = || ValueError::Parse {
        input: v.to_string(),
        what: what.into(),
    };
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(i128::from)
            .or_else(|| n.as_i64().map(i128::from))
            .ok_or_else(err),
        Value::String(s) => parse_int(s).map_err(|reason| ValueError::Number {
            input: s.clone(),
            what: what.into(),
            reason,
        }),
        Value::Bool(b) => Ok(i128::from(*b)),
        _ => Err(err()),
    }
}

fn put_int(out: &mut [u8], v: i128, size: u32, signed: bool, what: &str) -> Result<(), ValueError> {
    let bits = size * 8;
    let (lo, hi) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    // Accept the unsigned spelling of a negative signed value, like C does.
    if v < lo.min(0) || v > hi.max((1i128 << bits) - 1) {
        return Err(ValueError::Range {
            value: v.to_string(),
            what: what.into(),
        });
    }
    let b = v.to_le_bytes();
    let n = (size as usize).min(out.len());
    out[..n].copy_from_slice(&b[..n]);
    Ok(())
}

fn write_json(ty: &TypeDesc, v: &Value, out: &mut [u8]) -> Result<(), ValueError> {
    match ty {
        TypeDesc::Int {
            name, size, signed, ..
        } if matches!(size, 1 | 2 | 4 | 8) => {
            let i = json_int(v, name)?;
            put_int(out, i, *size, *signed, name)
        }
        TypeDesc::Enum {
            name,
            size,
            signed,
            values,
        } if matches!(size, 1 | 2 | 4 | 8) => {
            let i = match v {
                Value::String(s) => match values.iter().find(|(n, _)| n == s.trim()) {
                    Some((_, x)) => i128::from(*x),
                    None => json_int(v, name)?,
                },
                _ => json_int(v, name)?,
            };
            put_int(out, i, *size, *signed, name)
        }
        TypeDesc::Struct { name, fields, .. } => {
            let Value::Object(m) = v else {
                return Err(ValueError::Parse {
                    input: v.to_string(),
                    what: ty.c_name(),
                });
            };
            for (k, fv) in m {
                let f =
                    fields
                        .iter()
                        .find(|f| &f.name == k)
                        .ok_or_else(|| ValueError::NoField {
                            strukt: name.clone(),
                            field: k.clone(),
                        })?;
                write_field(f, fv, out)?;
            }
            Ok(())
        }
        TypeDesc::Array { elem, len } => {
            let es = elem.size() as usize;
            // An array is written as a whole: what the input leaves out becomes zero.
            out.fill(0);
            if let (Value::String(s), true) = (v, elem.is_char()) {
                let b = s.as_bytes();
                if b.len() > out.len() {
                    return Err(ValueError::Size {
                        expected: out.len(),
                        actual: b.len(),
                    });
                }
                out[..b.len()].copy_from_slice(b);
                return Ok(());
            }
            let Value::Array(items) = v else {
                return Err(ValueError::Parse {
                    input: v.to_string(),
                    what: ty.c_name(),
                });
            };
            if items.len() > *len as usize {
                return Err(ValueError::Size {
                    expected: *len as usize,
                    actual: items.len(),
                });
            }
            for (i, item) in items.iter().enumerate() {
                let slot = out.get_mut(i * es..(i + 1) * es).ok_or(ValueError::Size {
                    expected: *len as usize,
                    actual: items.len(),
                })?;
                write_json(elem, item, slot)?;
            }
            Ok(())
        }
        _ => {
            let s = v.as_str().unwrap_or_default();
            let b = parse_hex(&s.replace(' ', ""), out.len())?;
            out.copy_from_slice(&b);
            Ok(())
        }
    }
}

fn write_field(f: &FieldDesc, v: &Value, out: &mut [u8]) -> Result<(), ValueError> {
    if f.bit_size != 0 {
        let byte = (f.bit_offset / 8) as usize;
        let shift = f.bit_offset % 8;
        let x = json_int(v, &f.name)? as u64;
        if f.bit_size >= 64 || shift + f.bit_size > 64 || x >> f.bit_size != 0 && (x as i64) >= 0 {
            return Err(ValueError::Range {
                value: x.to_string(),
                what: format!("{}-bit field `{}`", f.bit_size, f.name),
            });
        }
        let len = out.len();
        let n = (len.saturating_sub(byte)).min(8);
        let slot = out.get_mut(byte..byte + n).ok_or(ValueError::Size {
            expected: byte + 1,
            actual: len,
        })?;
        let mask = ((1u64 << f.bit_size) - 1) << shift;
        let cur = read_uint(slot);
        let new = (cur & !mask) | ((x << shift) & mask);
        slot.copy_from_slice(&new.to_le_bytes()[..n]);
        return Ok(());
    }
    let start = (f.bit_offset / 8) as usize;
    let end = start + f.ty.size() as usize;
    let len = out.len();
    let slot = out.get_mut(start..end).ok_or(ValueError::Size {
        expected: end,
        actual: len,
    })?;
    write_json(&f.ty, v, slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(name: &str, size: u32) -> TypeDesc {
        TypeDesc::Int {
            name: name.into(),
            size,
            signed: false,
            is_bool: false,
        }
    }

    fn stats() -> TypeDesc {
        TypeDesc::Struct {
            name: "stats".into(),
            size: 24,
            fields: vec![
                FieldDesc {
                    name: "calls".into(),
                    bit_offset: 0,
                    bit_size: 0,
                    ty: u("__u64", 8),
                },
                FieldDesc {
                    name: "delta".into(),
                    bit_offset: 64,
                    bit_size: 0,
                    ty: TypeDesc::Int {
                        name: "int".into(),
                        size: 4,
                        signed: true,
                        is_bool: false,
                    },
                },
                FieldDesc {
                    name: "comm".into(),
                    bit_offset: 96,
                    bit_size: 0,
                    ty: TypeDesc::Array {
                        elem: Box::new(u("char", 1)),
                        len: 8,
                    },
                },
                FieldDesc {
                    name: "flag".into(),
                    bit_offset: 160,
                    bit_size: 3,
                    ty: u("unsigned int", 4),
                },
            ],
        }
    }

    #[test]
    fn struct_roundtrip_json_and_pairs() {
        let t = stats();
        let b = parse_value(Some(&t), "calls=7,delta=-3 comm=app flag=5", 24).unwrap();
        let v = format_value(Some(&t), &b);
        assert_eq!(
            v,
            serde_json::json!({"calls": 7, "delta": -3, "comm": "app", "flag": 5})
        );
        let b2 = parse_value(Some(&t), &v.to_string(), 24).unwrap();
        assert_eq!(b, b2);
        assert!(matches!(
            parse_value(Some(&t), "nope=1", 24),
            Err(ValueError::NoField { .. })
        ));
        assert!(matches!(
            parse_value(Some(&t), "flag=9", 24),
            Err(ValueError::Range { .. })
        ));
    }

    #[test]
    fn patches_name_fields_bits_and_whole_arrays() {
        let t = stats();
        let p = parse_patch(Some(&t), "delta=-1", 24).unwrap();
        assert!(!p.is_whole());
        let mut want = vec![0u8; 24];
        want[8..12].fill(0xff);
        assert_eq!(p.mask, want);
        assert_eq!(p.bytes, want);
        // A bitfield: its 3 bits only; a char array: all of it, zero after the string.
        let p = parse_patch(Some(&t), r#"{"flag": 5, "comm": "ab"}"#, 24).unwrap();
        assert_eq!(p.mask[20], 0b111);
        assert_eq!(p.bytes[20], 5);
        assert_eq!(&p.mask[12..20], &[0xff; 8]);
        assert_eq!(&p.bytes[12..20], b"ab\0\0\0\0\0\0");
        // Every field, hex bytes and untyped integers are whole values.
        let all = r#"{"calls":1,"delta":2,"comm":"x","flag":1}"#;
        let mut whole = parse_patch(Some(&t), all, 24).unwrap();
        whole.mask[20..].fill(0xff); // the bits after the bitfield are padding
        assert!(whole.is_whole());
        assert!(
            parse_patch(Some(&t), &format!("hex:{}", "01".repeat(24)), 24)
                .unwrap()
                .is_whole()
        );
        assert!(parse_patch(None, "7", 4).unwrap().is_whole());
    }

    #[test]
    fn hex_and_untyped_ints() {
        assert_eq!(
            parse_value(None, "hex:0a000000", 4).unwrap(),
            vec![10, 0, 0, 0]
        );
        assert_eq!(
            parse_value(None, "0a 00 00 00", 4).unwrap(),
            vec![10, 0, 0, 0]
        );
        assert_eq!(parse_value(None, "10", 4).unwrap(), vec![10, 0, 0, 0]);
        assert_eq!(parse_value(None, "0x10", 2).unwrap(), vec![16, 0]);
        assert_eq!(parse_value(None, "-1", 2).unwrap(), vec![0xff, 0xff]);
        assert!(matches!(
            parse_value(None, "256", 1),
            Err(ValueError::Range { .. })
        ));
        assert!(matches!(
            parse_value(None, "hex:0a00", 4),
            Err(ValueError::Size { .. })
        ));
        assert!(matches!(
            parse_value(None, "x", 12),
            Err(ValueError::Untyped)
        ));
        assert_eq!(format_value(None, &[1, 2]), Value::String("01 02".into()));
        // A type that does not match the size is ignored.
        assert_eq!(
            format_value(Some(&u("int", 4)), &[1, 2]),
            Value::String("01 02".into())
        );
    }

    #[test]
    fn integers_read_as_everywhere_else() {
        // The size suffixes of `--set`: binary K/KiB, decimal KB; bool words.
        let t = stats();
        let b = parse_value(Some(&t), "calls=4KiB,delta=-2k comm=x flag=1", 24).unwrap();
        let v = format_value(Some(&t), &b);
        assert_eq!(v["calls"], 4096);
        assert_eq!(v["delta"], -2048);
        let b = parse_value(Some(&t), r#"{"calls": "3KB", "flag": "true"}"#, 24).unwrap();
        let v = format_value(Some(&t), &b);
        assert_eq!((&v["calls"], &v["flag"]), (&3000.into(), &1.into()));
        assert_eq!(
            parse_value(None, "1_000", 4).unwrap(),
            1000u32.to_le_bytes().to_vec()
        );
        assert_eq!(
            parse_value(None, "1MiB", 8).unwrap(),
            (1u64 << 20).to_le_bytes()
        );
        let e = parse_value(Some(&t), "calls=8XB", 24)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown size suffix `XB`"), "{e}");
        let e = parse_value(None, "8XB", 4).unwrap_err().to_string();
        assert!(e.contains("unknown size suffix"), "{e}");
        assert!(matches!(
            parse_value(None, "abc", 4),
            Err(ValueError::Untyped)
        ));
    }

    #[test]
    fn bools_print_as_json_bools() {
        let b = TypeDesc::Int {
            name: "bool".into(),
            size: 1,
            signed: false,
            is_bool: true,
        };
        assert_eq!(format_value(Some(&b), &[1]), Value::Bool(true));
        assert_eq!(format_value(Some(&b), &[0]), Value::Bool(false));
        // A byte that is no bool stays a number rather than lie.
        assert_eq!(format_value(Some(&b), &[7]), Value::from(7));
        assert_eq!(parse_value(Some(&b), "true", 1).unwrap(), [1]);
        assert_eq!(parse_value(Some(&b), "false", 1).unwrap(), [0]);
        // Old map files (no `is_bool`) still read.
        let old: TypeDesc =
            serde_json::from_str(r#"{"kind":"int","name":"unsigned int","size":4,"signed":false}"#)
                .unwrap();
        assert_eq!(old, u("unsigned int", 4));
    }

    #[test]
    fn raw_bytes_as_bpftool_reads_them() {
        let one = vec![1u8, 0, 0, 0];
        for input in [
            "hex:01000000",
            "hex 01000000",
            "hex 01 00 00 00",
            "01 00 00 00",
            "0x01 0x00 0x00 0x00",
            "0x1 0x0 0x0 0x0",
            "1",
        ] {
            assert_eq!(parse_value(None, input, 4).unwrap(), one, "{input}");
            assert_eq!(parse_patch(None, input, 4).unwrap().bytes, one, "{input}");
        }
        // With a type, raw bytes still mean bytes (not a field or a JSON number).
        let t = u("k", 4);
        assert_eq!(
            parse_value(Some(&t), "0x01 0x00 0x00 0x00", 4).unwrap(),
            one
        );
        assert!(parse_value(None, "hex 0100", 4).is_err());
        assert!(parse_value(None, "0x100 0x00", 2).is_err());
    }
}
