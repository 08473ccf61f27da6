//! Classification of ELF sections into a closed set of kinds, and parsing of program
//! section names (`cuda/<api>`, `cudaret/<api>`, and `cuda`/`cudaret` without an API).

use std::fmt;
use std::str::FromStr;

use super::error::ObjectError;

pub use crate::attach::Phase;

/// A parsed program section name, resolved against the attach-point catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProgramSection {
    /// Entry or exit.
    pub phase: Phase,
    /// The API as written after the prefix (e.g. `cuMemAlloc`, `cudaMalloc`, `cuMemAlloc_v2`);
    /// empty for `cuda` / `cudaret`, whose API `gpubpf load --attach` gives.
    pub api: String,
    /// The attach point's driver base name (`cuMemAlloc` for all three above); empty
    /// without an API.
    pub attach: String,
    /// The attach point's catalog id (`hdr.api_id`).
    pub attach_id: u32,
}

impl FromStr for ProgramSection {
    type Err = ObjectError;

    fn from_str(s: &str) -> Result<Self, ObjectError> {
        let bad = || ObjectError::UnknownProgramSection {
            section: s.to_string(),
        };
        // `cuda` / `cudaret` alone: no API; `gpubpf load --attach` gives it.
        let (prefix, api) = s.split_once('/').unwrap_or((s, ""));
        if api.is_empty() && !s.contains('/') {
            let phase = match prefix {
                "cuda" => Phase::Entry,
                "cudaret" => Phase::Exit,
                _ => return Err(bad()),
            };
            return Ok(ProgramSection {
                phase,
                api: String::new(),
                attach: String::new(),
                attach_id: 0,
            });
        }
        let phase = match prefix {
            "cuda" => Phase::Entry,
            "cudaret" => Phase::Exit,
            _ => return Err(bad()),
        };
        let ident = !api.is_empty()
            && !api.starts_with(|c: char| c.is_ascii_digit())
            && api.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident {
            return Err(bad());
        }
        let point = crate::attach::resolve(api).map_err(|e| ObjectError::UnknownAttachPoint {
            section: s.to_string(),
            reason: e.to_string(),
        })?;
        Ok(ProgramSection {
            phase,
            api: api.to_string(),
            attach: point.name.to_string(),
            attach_id: point.id,
        })
    }
}

impl fmt::Display for ProgramSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.api.is_empty() {
            let prefix = self.phase.section_prefix();
            return f.write_str(prefix.strip_suffix('/').unwrap_or(prefix));
        }
        write!(f, "{}{}", self.phase.section_prefix(), self.api)
    }
}

/// Which global-data section a one-entry array map comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataKind {
    /// `.rodata`, `.rodata.*`: read-only for programs, settable at load when `const volatile`.
    Rodata,
    /// `.data`, `.data.*`.
    Data,
    /// `.bss`, `.bss.*` (zero-initialised).
    Bss,
}

/// What an ELF section is to the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SectionKind {
    /// A program section.
    Program(ProgramSection),
    /// `.text`: subprograms.
    Text,
    /// `.maps`: BTF-defined maps.
    BtfMaps,
    /// `maps`: legacy `struct bpf_map_def` maps.
    LegacyMaps,
    /// Global data.
    Data(DataKind),
    /// `license`.
    License,
    /// `.BTF`.
    Btf,
    /// `.BTF.ext`.
    BtfExt,
    /// Relocations (applied to the section they point at).
    Relocations,
    /// Symbol or string tables, DWARF, `.llvm_addrsig`, `version`, notes, the null section …
    Ignored,
}

impl SectionKind {
    /// Classifies a section by name and flags. `executable` is `SHF_EXECINSTR`.
    pub fn classify(
        name: &str,
        executable: bool,
        sh_type: u32,
    ) -> Result<SectionKind, ObjectError> {
        use object::elf::{SHT_REL, SHT_RELA};
        if sh_type == SHT_REL || sh_type == SHT_RELA {
            return Ok(SectionKind::Relocations);
        }
        let data_kind = |prefix: &str| name == prefix || name.starts_with(&format!("{prefix}."));
        Ok(match name {
            ".text" => SectionKind::Text,
            ".maps" => SectionKind::BtfMaps,
            "maps" => SectionKind::LegacyMaps,
            "license" => SectionKind::License,
            ".BTF" => SectionKind::Btf,
            ".BTF.ext" => SectionKind::BtfExt,
            _ if data_kind(".rodata") => SectionKind::Data(DataKind::Rodata),
            _ if data_kind(".data") => SectionKind::Data(DataKind::Data),
            _ if data_kind(".bss") => SectionKind::Data(DataKind::Bss),
            _ if name.starts_with("cuda/")
                || name.starts_with("cudaret/")
                || name == "cuda"
                || name == "cudaret" =>
            {
                SectionKind::Program(name.parse()?)
            }
            // Anything else that holds code, or is named like a libbpf program section
            // (`kprobe/…`, `tracepoint/…`), is a program we cannot attach.
            _ if executable || (name.contains('/') && !name.starts_with('.')) => {
                return Err(ObjectError::UnknownProgramSection {
                    section: name.to_string(),
                })
            }
            _ => SectionKind::Ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::elf::{SHT_NOBITS, SHT_PROGBITS, SHT_REL};

    #[test]
    fn classify_table() {
        let ok = |n: &str, x: bool, t: u32| SectionKind::classify(n, x, t).unwrap();
        let SectionKind::Program(entry) = ok("cuda/cuMemAlloc", true, SHT_PROGBITS) else {
            panic!("not a program")
        };
        assert_eq!(
            (entry.phase, entry.api.as_str()),
            (Phase::Entry, "cuMemAlloc")
        );
        assert_eq!(entry.attach, "cuMemAlloc");
        // Runtime aliases and exported symbols resolve to the driver function.
        for (sec, api) in [
            ("cudaret/cudaMalloc", "cudaMalloc"),
            ("cudaret/cuMemAlloc_v2", "cuMemAlloc_v2"),
        ] {
            let SectionKind::Program(p) = ok(sec, true, SHT_PROGBITS) else {
                panic!("not a program")
            };
            assert_eq!((p.phase, p.api.as_str()), (Phase::Exit, api));
            assert_eq!(
                (p.attach.as_str(), p.attach_id),
                ("cuMemAlloc", entry.attach_id)
            );
        }
        assert_eq!(ok(".text", true, SHT_PROGBITS), SectionKind::Text);
        assert_eq!(
            ok(".rodata.str1.1", false, SHT_PROGBITS),
            SectionKind::Data(DataKind::Rodata)
        );
        assert_eq!(
            ok(".data.counters", false, SHT_PROGBITS),
            SectionKind::Data(DataKind::Data)
        );
        assert_eq!(
            ok(".bss", false, SHT_NOBITS),
            SectionKind::Data(DataKind::Bss)
        );
        assert_eq!(ok(".rodatax", false, SHT_PROGBITS), SectionKind::Ignored);
        assert_eq!(ok(".relcuda/x", false, SHT_REL), SectionKind::Relocations);
        assert_eq!(ok(".debug_info", false, SHT_PROGBITS), SectionKind::Ignored);
        assert_eq!(ok(".maps", false, SHT_PROGBITS), SectionKind::BtfMaps);
        assert_eq!(ok("maps", false, SHT_PROGBITS), SectionKind::LegacyMaps);
    }

    #[test]
    fn rejects_other_program_sections_listing_accepted_forms() {
        for (name, exec) in [
            ("kprobe/sys_open", true),
            ("xdp", true),
            ("cuda/", true),
            ("cuda/1abc", true),
            ("cuda/a-b", true),
            ("cudarets", true),
            ("tracepoint/x/y", false),
        ] {
            let e = SectionKind::classify(name, exec, SHT_PROGBITS).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(name), "{msg}");
            assert!(
                msg.contains("`cuda/<api>`") && msg.contains("`cudaret/<api>`"),
                "{msg}"
            );
        }
    }

    #[test]
    fn program_section_round_trips() {
        let p: ProgramSection = "cudaret/cuLaunchKernel".parse().unwrap();
        assert_eq!(p.to_string(), "cudaret/cuLaunchKernel");
        assert_eq!(p.phase.as_str(), "exit");
    }

    #[test]
    fn sections_without_an_api() {
        for (name, phase) in [("cuda", Phase::Entry), ("cudaret", Phase::Exit)] {
            let SectionKind::Program(p) = SectionKind::classify(name, true, SHT_PROGBITS).unwrap()
            else {
                panic!("not a program")
            };
            assert_eq!(
                (p.phase, p.api.as_str(), p.attach.as_str()),
                (phase, "", "")
            );
            assert_eq!(p.to_string(), name);
        }
    }

    #[test]
    fn unknown_api_gets_a_suggestion() {
        let e = SectionKind::classify("cuda/cuMemAloc", true, SHT_PROGBITS).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("section `cuda/cuMemAloc`"), "{msg}");
        assert!(msg.contains("did you mean `cuMemAlloc`"), "{msg}");
    }
}
