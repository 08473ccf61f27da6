//! Parsing of `--set NAME=VALUE` values for integer, boolean and enum globals, and rendering
//! of global values for display.
//!
//! Integers ([`parse_integer`], the one integer reader of every gpubpf command: `--set`,
//! `maps update/lookup/delete` keys and values, `maps create --max-entries`): decimal, `0x`
//! hex, `0o` octal, `0b` binary, `_` separators, a sign for signed types, and a size suffix:
//! `K`/`Ki`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`, `P`/`PiB` (powers of 1024), `KB`, `MB`,
//! `GB`, `TB`, `PB` (powers of 1000), `B` (1), case-insensitive, as GNU coreutils read them
//! (`dd`, `truncate`); a decimal fraction is allowed with a suffix when the result is a
//! whole number (`1.5GiB`). Booleans: `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`.

/// The shape of a settable scalar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScalarType {
    /// Size in bytes (1, 2, 4 or 8).
    pub size: u32,
    pub signed: bool,
    pub is_bool: bool,
    /// Enumerators, for enums.
    pub enumerators: Vec<(String, i128)>,
}

const SUFFIXES: &[(&str, u128)] = &[
    ("b", 1),
    ("k", 1 << 10),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("kb", 1_000),
    ("m", 1 << 20),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("mb", 1_000_000),
    ("g", 1 << 30),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("gb", 1_000_000_000),
    ("t", 1 << 40),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
    ("tb", 1_000_000_000_000),
    ("p", 1 << 50),
    ("pi", 1 << 50),
    ("pib", 1 << 50),
    ("pb", 1_000_000_000_000_000),
];

/// `true`/`yes`/`on` or `false`/`no`/`off` (case-insensitive).
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => Some(true),
        "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Parses an unsigned magnitude with optional radix prefix, fraction and size suffix.
fn parse_magnitude(s: &str) -> Result<u128, String> {
    let digits = |t: &str, radix: u32| -> Result<u128, String> {
        let t: String = t.chars().filter(|&c| c != '_').collect();
        if t.is_empty() {
            return Err("missing digits".into());
        }
        u128::from_str_radix(&t, radix).map_err(|_| format!("`{t}` is not a base-{radix} number"))
    };
    let lower = s.to_ascii_lowercase();
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = lower.strip_prefix(prefix) {
            // `0b…` could also be a binary literal; `0B` as a size is meaningless anyway.
            return digits(rest, radix);
        }
    }
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.'))
        .unwrap_or(lower.len());
    let (num, suffix) = lower.split_at(split);
    let suffix = suffix.trim();
    let mult = if suffix.is_empty() {
        1
    } else {
        SUFFIXES
            .iter()
            .find(|(name, _)| *name == suffix)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!(
                    "unknown size suffix `{}` (use KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                    &s[split..]
                )
            })?
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let int = if int.is_empty() && !frac.is_empty() {
        0
    } else {
        digits(int, 10)?
    };
    let too_big = || "value is too large".to_string();
    let mut total = int.checked_mul(mult).ok_or_else(too_big)?;
    if !frac.is_empty() {
        let f = digits(frac, 10)?;
        let scale = 10u128.checked_pow(frac.len() as u32).ok_or_else(too_big)?;
        let scaled = f.checked_mul(mult).ok_or_else(too_big)?;
        if scaled % scale != 0 {
            return Err(format!("`{s}` is not a whole number"));
        }
        total = total.checked_add(scaled / scale).ok_or_else(too_big)?;
    }
    Ok(total)
}

/// Parses `text` for a scalar of type `ty`, returning the value to store.
pub(crate) fn parse_scalar(text: &str, ty: &ScalarType) -> Result<i128, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty value".into());
    }
    if let Some(b) = parse_bool(s) {
        return Ok(i128::from(b));
    }
    if let Some((_, v)) = ty.enumerators.iter().find(|(n, _)| n == s) {
        return Ok(*v);
    }
    let v = parse_integer(s)?;
    check_range(v, ty)?;
    Ok(v)
}

/// Parses an integer with an optional sign, radix prefix, fraction and size suffix (see the
/// module documentation); the range is the caller's to check.
pub fn parse_integer(text: &str) -> Result<i128, String> {
    let s = text.trim();
    let (neg, mag) = match s.as_bytes().first() {
        None => return Err("empty value".into()),
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
    };
    let m = parse_magnitude(mag.trim_start())?;
    let m = i128::try_from(m).map_err(|_| "value is too large".to_string())?;
    Ok(if neg { -m } else { m })
}

fn check_range(v: i128, ty: &ScalarType) -> Result<(), String> {
    let bits = ty.size * 8;
    let (min, max) = if ty.is_bool {
        (0, 1)
    } else if ty.signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if v < min || v > max {
        let kind = if ty.is_bool {
            "a boolean".to_string()
        } else {
            format!(
                "{} {}-byte integer",
                if ty.signed { "a signed" } else { "an unsigned" },
                ty.size
            )
        };
        return Err(format!("{v} does not fit {kind} (range {min}..={max})"));
    }
    Ok(())
}

/// Parses `text` as an integer of `size` bytes (1, 2, 4 or 8), signed or not, with the
/// syntax of `--set` (radix prefixes, `_`, size suffixes such as `GiB`); returns its value,
/// range-checked for that type.
pub fn parse_int(text: &str, size: u32, signed: bool) -> Result<i128, String> {
    parse_scalar(
        text,
        &ScalarType {
            size,
            signed,
            is_bool: false,
            enumerators: Vec::new(),
        },
    )
}

/// Little-endian two's-complement bytes of `v` in `size` bytes.
pub(crate) fn encode(v: i128, size: u32) -> Vec<u8> {
    v.to_le_bytes()[..size as usize].to_vec()
}

/// Reads a scalar of type `ty` from little-endian bytes.
pub(crate) fn decode(bytes: &[u8], ty: &ScalarType) -> Option<i128> {
    if bytes.len() != ty.size as usize || bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let mut buf = [0u8; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    let mut v = u128::from_le_bytes(buf) as i128;
    if ty.signed && bytes[bytes.len() - 1] & 0x80 != 0 && bytes.len() < 16 {
        v -= 1i128 << (bytes.len() * 8);
    }
    Some(v)
}

/// Human-readable value: `true`, an enumerator name, or a decimal number.
pub(crate) fn render(bytes: &[u8], ty: Option<&ScalarType>) -> String {
    match ty.and_then(|t| decode(bytes, t).map(|v| (t, v))) {
        Some((t, v)) if t.is_bool => (v != 0).to_string(),
        Some((t, v)) => t
            .enumerators
            .iter()
            .find(|(_, e)| *e == v)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| v.to_string()),
        None => render_bytes(bytes),
    }
}

/// A C string when the bytes are printable text ending in NUL, hex bytes otherwise.
pub(crate) fn render_bytes(bytes: &[u8]) -> String {
    if let Some((&0, text)) = bytes.split_last() {
        if !text.is_empty()
            && text
                .iter()
                .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t')
        {
            return format!("{:?}", String::from_utf8_lossy(text));
        }
    }
    let hex: Vec<String> = bytes.iter().take(64).map(|b| format!("{b:02x}")).collect();
    let more = if bytes.len() > 64 { " …" } else { "" };
    format!("[{}{more}]", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(size: u32, signed: bool) -> ScalarType {
        ScalarType {
            size,
            signed,
            is_bool: false,
            enumerators: vec![],
        }
    }

    #[test]
    fn parse_table() {
        let u64t = int(8, false);
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("42", 42),
            ("1_000", 1000),
            ("0x10", 16),
            ("0o17", 15),
            ("0b101", 5),
            ("8GiB", 8 << 30),
            ("8gib", 8 << 30),
            ("8G", 8 << 30),
            ("8GB", 8_000_000_000),
            ("512 MiB", 512 << 20),
            ("4KiB", 4096),
            ("3KB", 3000),
            ("1.5GiB", 3 << 29),
            ("0.5k", 512),
            ("2TiB", 2 << 40),
            ("100B", 100),
            ("true", 1),
            ("off", 0),
            ("18446744073709551615", u64::MAX as i128),
        ];
        for (text, want) in cases {
            assert_eq!(parse_scalar(text, &u64t), Ok(*want), "{text}");
        }
    }

    #[test]
    fn parse_errors() {
        let u64t = int(8, false);
        for bad in [
            "",
            "abc",
            "8XB",
            "-1",
            "18446744073709551616",
            "1.3KiB",
            "0x",
            "1..2",
            "0xZZ",
        ] {
            assert!(parse_scalar(bad, &u64t).is_err(), "{bad}");
        }
        assert!(parse_scalar("256", &int(1, false))
            .unwrap_err()
            .contains("does not fit"));
        assert_eq!(parse_scalar("-128", &int(1, true)), Ok(-128));
        assert!(parse_scalar("-129", &int(1, true)).is_err());
        assert!(parse_scalar("128", &int(1, true)).is_err());
        let b = ScalarType {
            size: 1,
            signed: false,
            is_bool: true,
            enumerators: vec![],
        };
        assert_eq!(parse_scalar("yes", &b), Ok(1));
        assert!(parse_scalar("2", &b).is_err());
    }

    #[test]
    fn enums_and_rendering() {
        let e = ScalarType {
            size: 4,
            signed: false,
            is_bool: false,
            enumerators: vec![("MODE_A".into(), 0), ("MODE_B".into(), 7)],
        };
        assert_eq!(parse_scalar("MODE_B", &e), Ok(7));
        assert_eq!(render(&encode(7, 4), Some(&e)), "MODE_B");
        assert_eq!(render(&encode(-2, 2), Some(&int(2, true))), "-2");
        assert_eq!(render(&encode(65534, 2), Some(&int(2, false))), "65534");
        assert_eq!(render(b"hi\0", None), "\"hi\"");
        assert_eq!(render(&[1, 2], None), "[01 02]");
    }
}
