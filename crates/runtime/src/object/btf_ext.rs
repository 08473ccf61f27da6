//! `.BTF.ext`: line information (instruction → source file, line, column and text).
//!
//! Function info and CO-RE relocation records are skipped (gpubpf has no kernel types to
//! relocate against); only their bounds are checked by the header.

use std::collections::HashMap;
use std::sync::Arc;

use super::btf::Btf;
use super::reader::{u16_at, u32_at, OutOfBounds};

/// Most line-info records accepted per object (bounds memory on hostile input).
const MAX_RECORDS: usize = 1 << 20;

/// An error in the `.BTF.ext` section. `offset` is a byte offset into the section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfExtError {
    #[error("truncated at offset {offset}: reading {len} bytes for {what}")]
    Truncated {
        offset: usize,
        len: usize,
        what: &'static str,
    },
    #[error("bad magic {magic:#06x} (expected 0xeb9f)")]
    BadMagic { magic: u16 },
    #[error("header: {reason}")]
    BadHeader { reason: String },
    #[error("line info at offset {offset}: record size {size} is smaller than 16")]
    BadRecordSize { offset: usize, size: u32 },
    #[error("offset {offset}: string offset {str_off} is outside the `.BTF` string table")]
    BadString { offset: usize, str_off: u32 },
    #[error("more than {max} line-info records")]
    TooManyRecords { max: usize },
}

fn trunc(what: &'static str) -> impl Fn(OutOfBounds) -> BtfExtError {
    move |e| BtfExtError::Truncated {
        offset: e.offset,
        len: e.len,
        what,
    }
}

/// One line-info record as stored: `insn_off` is a byte offset into the code section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineRecord {
    pub insn_off: u32,
    /// Shared by every record (and every program's line) that names the same string.
    pub file: Arc<str>,
    pub source: Arc<str>,
    pub line: u32,
    pub column: u32,
}

/// Line info of every code section, by section name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BtfExt {
    pub line_info: Vec<(String, Vec<LineRecord>)>,
}

impl BtfExt {
    /// Parses `.BTF.ext`; strings are resolved in `btf`.
    pub fn parse(data: &[u8], btf: &Btf) -> Result<BtfExt, BtfExtError> {
        let t = trunc("header");
        let magic = u16_at(data, 0).map_err(&t)?;
        if magic != super::btf::BTF_MAGIC {
            return Err(BtfExtError::BadMagic { magic });
        }
        let hdr_len = u32_at(data, 4).map_err(&t)? as usize;
        if hdr_len < 24 {
            return Err(BtfExtError::BadHeader {
                reason: format!("header length {hdr_len} is shorter than 24"),
            });
        }
        let line_off = u32_at(data, 16).map_err(&t)? as usize;
        let line_len = u32_at(data, 20).map_err(&t)? as usize;
        let start = hdr_len
            .checked_add(line_off)
            .filter(|s| s.checked_add(line_len).is_some_and(|e| e <= data.len()))
            .ok_or_else(|| BtfExtError::BadHeader {
                reason: format!(
                    "line info ({line_off}+{line_len} after the {hdr_len}-byte header) exceeds the section ({} bytes)",
                    data.len()
                ),
            })?;
        let mut ext = BtfExt::default();
        if line_len == 0 {
            return Ok(ext);
        }
        let end = start + line_len;
        let d = &data[..end];
        let t = trunc("line info");
        let rec_size = u32_at(d, start).map_err(&t)?;
        if rec_size < 16 {
            return Err(BtfExtError::BadRecordSize {
                offset: start,
                size: rec_size,
            });
        }
        // Records repeat a handful of file names and source lines: each string is read once.
        let mut strings: HashMap<u32, Arc<str>> = HashMap::new();
        let mut string = |off: usize, str_off: u32| -> Result<Arc<str>, BtfExtError> {
            if let Some(s) = strings.get(&str_off) {
                return Ok(Arc::clone(s));
            }
            let s: Arc<str> = btf
                .string_at(str_off)
                .ok_or(BtfExtError::BadString {
                    offset: off,
                    str_off,
                })?
                .into();
            strings.insert(str_off, Arc::clone(&s));
            Ok(s)
        };
        let mut total = 0usize;
        let mut p = start + 4;
        while p < end {
            let sec_name_off = u32_at(d, p).map_err(&t)?;
            let num = u32_at(d, p + 4).map_err(&t)? as usize;
            let sec = string(p, sec_name_off)?.to_string();
            p += 8;
            let mut recs = Vec::with_capacity(num.min(4096));
            for _ in 0..num {
                total += 1;
                if total > MAX_RECORDS {
                    return Err(BtfExtError::TooManyRecords { max: MAX_RECORDS });
                }
                let insn_off = u32_at(d, p).map_err(&t)?;
                let file_off = u32_at(d, p + 4).map_err(&t)?;
                let src_off = u32_at(d, p + 8).map_err(&t)?;
                let line_col = u32_at(d, p + 12).map_err(&t)?;
                recs.push(LineRecord {
                    insn_off,
                    file: string(p + 4, file_off)?,
                    source: string(p + 8, src_off)?,
                    line: line_col >> 10,
                    column: line_col & 0x3ff,
                });
                p = p
                    .checked_add(rec_size as usize)
                    .ok_or(BtfExtError::Truncated {
                        offset: p,
                        len: rec_size as usize,
                        what: "line info",
                    })?;
            }
            // In instruction order (stable: records of one instruction keep theirs), so that a
            // function's records are one range (`lines_in`).
            recs.sort_by_key(|r| r.insn_off);
            ext.line_info.push((sec, recs));
        }
        Ok(ext)
    }

    /// Line records of a code section whose instruction lies in the byte range `bytes`.
    pub fn lines_in(&self, section: &str, bytes: std::ops::Range<u64>) -> &[LineRecord] {
        let recs = self.lines_of(section);
        let lo = recs.partition_point(|r| u64::from(r.insn_off) < bytes.start);
        let hi = recs.partition_point(|r| u64::from(r.insn_off) < bytes.end);
        recs.get(lo..hi).unwrap_or(&[])
    }

    /// Line records of a code section, in instruction order.
    pub fn lines_of(&self, section: &str) -> &[LineRecord] {
        self.line_info
            .iter()
            .find(|(s, _)| s == section)
            .map(|(_, r)| r.as_slice())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::btf::tests::build;

    fn ext(words: &[u32]) -> Vec<u8> {
        let mut out = vec![0x9f, 0xeb, 1, 0];
        let line_len = (words.len() * 4) as u32;
        // hdr_len, func_info off/len, line_info off/len, core_relo off/len.
        for v in [32u32, 0, 0, 0, line_len, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    #[test]
    fn parses_line_records() {
        let strings = b"\0prog\0a.c\0return 0;\0";
        let btf = Btf::parse(&build(&[], strings)).unwrap();
        let data = ext(&[16, 1, 2, 8, 6, 10, (7 << 10) | 3, 16, 6, 10, 8 << 10]);
        let e = BtfExt::parse(&data, &btf).unwrap();
        let recs = e.lines_of("prog");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].insn_off, 8);
        assert_eq!(&*recs[0].file, "a.c");
        assert_eq!(&*recs[0].source, "return 0;");
        assert_eq!((recs[0].line, recs[0].column), (7, 3));
        assert_eq!(recs[1].line, 8);
        assert!(e.lines_of("other").is_empty());
    }

    #[test]
    fn records_are_put_in_instruction_order_and_found_by_range() {
        let strings = b"\0prog\0a.c\0return 0;\0";
        let btf = Btf::parse(&build(&[], strings)).unwrap();
        // Three records out of order: instructions 3, 1 and 2 (byte offsets 24, 8, 16).
        let data = ext(&[
            16,
            1,
            3,
            24,
            6,
            10,
            9 << 10,
            8,
            6,
            10,
            7 << 10,
            16,
            6,
            10,
            8 << 10,
        ]);
        let e = BtfExt::parse(&data, &btf).unwrap();
        let offs: Vec<u32> = e.lines_of("prog").iter().map(|r| r.insn_off).collect();
        assert_eq!(offs, [8, 16, 24]);
        let lines: Vec<u32> = e.lines_in("prog", 16..32).iter().map(|r| r.line).collect();
        assert_eq!(lines, [8, 9]);
        assert!(e.lines_in("prog", 0..8).is_empty());
        assert!(e.lines_in("other", 0..64).is_empty());
        // One string, one allocation: every record shares it.
        let recs = e.lines_of("prog");
        assert!(std::sync::Arc::ptr_eq(&recs[0].file, &recs[2].file));
    }

    #[test]
    fn rejects_bad_records() {
        let btf = Btf::parse(&build(&[], b"\0prog\0")).unwrap();
        assert!(matches!(
            BtfExt::parse(&ext(&[8, 1, 0]), &btf),
            Err(BtfExtError::BadRecordSize { size: 8, .. })
        ));
        assert!(matches!(
            BtfExt::parse(&ext(&[16, 1, 5, 0, 1, 1, 1]), &btf),
            Err(BtfExtError::Truncated { .. })
        ));
        assert!(matches!(
            BtfExt::parse(&ext(&[16, 1, 1, 0, 99, 1, 1]), &btf),
            Err(BtfExtError::BadString { str_off: 99, .. })
        ));
        let mut bad = ext(&[]);
        bad[20] = 0xff; // line_len way past the end
        assert!(matches!(
            BtfExt::parse(&bad, &btf),
            Err(BtfExtError::BadHeader { .. })
        ));
    }
}
