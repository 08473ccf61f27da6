//! Parser of the bpf_conformance `.data` test format.
//!
//! A file is a sequence of sections, each introduced by a line `-- NAME`:
//!
//! | section | content |
//! |---|---|
//! | `-- asm` | the program in assembler text (see `gpubpf_isa::asm`) |
//! | `-- raw` | the program as bytes: lines of hex bytes (`07 00 01 00 …`) or 64-bit little-endian words (`0x5566778800000018`) |
//! | `-- mem` | the memory handed to the program (hex bytes separated by spaces) |
//! | `-- result` | the expected `r0` (hexadecimal with `0x`, else decimal) |
//! | `-- error` | the program is expected to fail; the text is a hint of the error |
//! | `-- c` | C source the program was written from (informational) |
//! | `-- no register offset` | a note for runners (informational, ignored by the suite's runner) |
//!
//! Lines starting with `#` outside `-- asm` and `-- c` are comments; inside `-- asm` they are
//! kept so that assembler errors keep the file's line numbers ([`ConformanceTest::asm_line`]).
//! Any other section name is an error, as it is for the suite's own runner.
//!
//! Typical use:
//!
//! ```ignore
//! let dir = conformance_data::conformance_dir().expect("suite present");
//! for test in conformance_data::load_dir(&dir.join("tests"))? {
//!     let program = test.program()?; // assembled `-- asm`, else `-- raw`
//!     // run with r1 = test.mem, r2 = test.mem.len(), compare with test.result
//! }
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gpubpf_isa::Insn;

/// One parsed `.data` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConformanceTest {
    /// File name without `.data`.
    pub name: String,
    /// Where it was read from (empty for [`ConformanceTest::parse`] on a string).
    pub path: PathBuf,
    /// Text of the `-- asm` section, verbatim (comments included).
    pub asm: Option<String>,
    /// 1-based line in the file of the first line of `asm`.
    pub asm_line: usize,
    /// Bytes of the `-- raw` section.
    pub raw: Option<Vec<u8>>,
    /// Bytes of the `-- mem` section; `None` when the test has no memory.
    pub mem: Option<Vec<u8>>,
    /// Expected `r0`.
    pub result: Option<u64>,
    /// Text of the `-- error` section (possibly empty) when the test expects an error.
    pub error: Option<String>,
    /// Text of the `-- c` section.
    pub c: Option<String>,
    /// Text of the `-- no register offset` section.
    pub no_register_offset: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Asm,
    Raw,
    Mem,
    Result,
    Error,
    C,
    NoRegisterOffset,
}

impl Section {
    fn from_header(name: &str) -> Option<Self> {
        Some(match name.trim() {
            "asm" => Section::Asm,
            "raw" => Section::Raw,
            "mem" => Section::Mem,
            "result" => Section::Result,
            "error" => Section::Error,
            "c" => Section::C,
            "no register offset" => Section::NoRegisterOffset,
            _ => return None,
        })
    }
}

/// The suite's directory: `$GPUBPF_CONFORMANCE_DIR`, else
/// `<root package>/../shared/conformance/bpf_conformance`; `None` when it does not exist.
pub fn conformance_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("GPUBPF_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/bpf_conformance")
        });
    dir.join("tests").is_dir().then_some(dir)
}

/// The `.data` files of `dir`, sorted by name.
pub fn list_tests(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "data") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses every `.data` file of `dir` (sorted by name); fails on the first malformed one.
pub fn load_dir(dir: &Path) -> Result<Vec<ConformanceTest>> {
    list_tests(dir)?
        .iter()
        .map(|p| ConformanceTest::load(p))
        .collect()
}

fn hex_byte(tok: &str) -> Result<u8> {
    let t = tok.strip_prefix("0x").unwrap_or(tok);
    if t.is_empty() || t.len() > 2 {
        bail!("invalid hex byte `{tok}`");
    }
    u8::from_str_radix(t, 16).with_context(|| format!("invalid hex byte `{tok}`"))
}

/// Parses hex bytes separated by whitespace (the `-- mem` format and the plugin's argv).
pub fn parse_hex_bytes(text: &str) -> Result<Vec<u8>> {
    text.split_whitespace().map(hex_byte).collect()
}

fn parse_raw(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for tok in text.split_whitespace() {
        match tok.strip_prefix("0x") {
            Some(word) if word.len() == 16 => {
                let v = u64::from_str_radix(word, 16)
                    .with_context(|| format!("invalid 64-bit word `{tok}`"))?;
                out.extend_from_slice(&v.to_le_bytes());
            }
            _ => out.push(hex_byte(tok)?),
        }
    }
    Ok(out)
}

fn parse_result(text: &str) -> Result<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    }
    .with_context(|| format!("invalid result `{t}`"))
}

impl ConformanceTest {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut t = Self::parse(&name, &text).with_context(|| format!("{}", path.display()))?;
        t.path = path.to_path_buf();
        Ok(t)
    }

    /// Parses the text of a `.data` file.
    pub fn parse(name: &str, text: &str) -> Result<Self> {
        let mut t = ConformanceTest {
            name: name.to_string(),
            ..Default::default()
        };
        let mut current: Option<(Section, usize, String)> = None;
        let mut sections: Vec<(Section, usize, String)> = Vec::new();
        for (idx, line) in text.lines().enumerate() {
            let line_no = idx + 1;
            if let Some(header) = line.strip_prefix("--") {
                let section = Section::from_header(header).with_context(|| {
                    format!("line {line_no}: unknown section `{}`", line.trim())
                })?;
                if let Some(done) = current.take() {
                    sections.push(done);
                }
                if sections.iter().any(|(s, _, _)| *s == section) {
                    bail!("line {line_no}: duplicate section `{}`", line.trim());
                }
                current = Some((section, line_no + 1, String::new()));
                continue;
            }
            match current.as_mut() {
                Some((section, _, body)) => {
                    let verbatim = matches!(section, Section::Asm | Section::C);
                    if verbatim || !line.trim_start().starts_with('#') {
                        body.push_str(line);
                        body.push('\n');
                    }
                }
                None => {
                    let l = line.trim();
                    if !l.is_empty() && !l.starts_with('#') {
                        bail!("line {line_no}: text outside of any section: `{l}`");
                    }
                }
            }
        }
        if let Some(done) = current.take() {
            sections.push(done);
        }
        for (section, first_line, body) in sections {
            match section {
                Section::Asm => {
                    t.asm = Some(body);
                    t.asm_line = first_line;
                }
                Section::Raw => {
                    t.raw = Some(parse_raw(&body).context("in `-- raw`")?);
                }
                Section::Mem => t.mem = Some(parse_hex_bytes(&body).context("in `-- mem`")?),
                Section::Result => t.result = Some(parse_result(&body)?),
                Section::Error => t.error = Some(body.trim().to_string()),
                Section::C => t.c = Some(body),
                Section::NoRegisterOffset => t.no_register_offset = Some(body.trim().to_string()),
            }
        }
        Ok(t)
    }

    /// The memory (empty when the test has none).
    pub fn memory(&self) -> &[u8] {
        self.mem.as_deref().unwrap_or(&[])
    }

    /// The program: the assembled `-- asm` section, else the `-- raw` bytes split into
    /// slots. Assembler errors name the file's line. Fails when the test has no program.
    pub fn program(&self) -> Result<Vec<Insn>> {
        if let Some(asm) = &self.asm {
            return gpubpf_isa::assemble(asm).map_err(|e| {
                let file_line = e.line + self.asm_line - 1;
                anyhow::anyhow!(
                    "{}: line {file_line}, column {}: {}",
                    self.name,
                    e.column,
                    e.kind
                )
            });
        }
        if let Some(raw) = &self.raw {
            return gpubpf_isa::slots_from_bytes(raw)
                .with_context(|| format!("{}: `-- raw`", self.name));
        }
        bail!("{}: no `-- asm` or `-- raw` section", self.name)
    }

    /// The program as the suite's plugins receive it: the bytes of [`Self::program`].
    pub fn program_bytes(&self) -> Result<Vec<u8>> {
        Ok(gpubpf_isa::slots_to_bytes(&self.program()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_sections() {
        let text = "# header\n-- asm\nmov %r0, 1 # c\nexit\n-- mem\n11 22\n-- result\n0x1\n\
                    -- raw\n0x0000000000000095\nb7 00 00 00 01 00 00 00\n-- no register offset\nnote\n";
        let t = ConformanceTest::parse("x", text).expect("parses");
        assert_eq!(t.asm_line, 3);
        assert_eq!(t.mem, Some(vec![0x11, 0x22]));
        assert_eq!(t.result, Some(1));
        assert_eq!(t.raw.as_ref().map(|r| r[0]), Some(0x95));
        assert_eq!(t.raw.as_ref().map(Vec::len), Some(16));
        assert_eq!(t.no_register_offset.as_deref(), Some("note"));
        assert_eq!(t.program().expect("assembles").len(), 2);
    }

    #[test]
    fn rejects_unknown_section_and_stray_text() {
        assert!(ConformanceTest::parse("x", "-- Unknown directive\n").is_err());
        assert!(ConformanceTest::parse("x", "mov %r0, 1\n").is_err());
        assert!(ConformanceTest::parse("x", "-- result\n0xzz\n").is_err());
    }

    #[test]
    fn assembler_errors_name_the_file_line() {
        let t = ConformanceTest::parse("x", "# a\n-- asm\n# b\nldxq %r0, %r1\n").expect("p");
        let e = t.program().expect_err("bad mnemonic").to_string();
        assert!(e.contains("line 4, column 1"), "{e}");
    }
}
