//! The raw ELF layer: section headers, symbols and relocations read with the `object`
//! crate's low-level ELF API into owned, validated tables. Nothing here interprets BPF.

use object::elf::{
    FileHeader64, EM_BPF, ET_REL, SHF_EXECINSTR, SHT_NOBITS, SHT_REL, SHT_RELA, SHT_SYMTAB,
};
use object::read::elf::{FileHeader, Rel, SectionHeader, Sym};
use object::{LittleEndian as LE, SectionIndex};

use super::error::ObjectError;
use super::section::SectionKind;

/// One section with its classification.
#[derive(Debug, Clone)]
pub(crate) struct RawSection<'a> {
    pub name: String,
    pub kind: SectionKind,
    /// File contents (empty for `SHT_NOBITS`).
    pub data: &'a [u8],
    /// `sh_size` (for `.bss` larger than `data`).
    pub size: u64,
}

/// `STT_*` symbol types the loader distinguishes.
pub(crate) const STT_OBJECT: u8 = 1;
pub(crate) const STT_FUNC: u8 = 2;
pub(crate) const STT_SECTION: u8 = 3;

/// One symbol.
#[derive(Debug, Clone)]
pub(crate) struct RawSymbol {
    pub name: String,
    /// Defining section, `None` for undefined/absolute/common symbols.
    pub section: Option<usize>,
    pub value: u64,
    pub size: u64,
    pub st_type: u8,
}

/// One relocation of a non-debug section.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawReloc {
    /// Section the relocation applies to.
    pub target: usize,
    /// Byte offset in the target section.
    pub offset: u64,
    /// Symbol index.
    pub symbol: usize,
    pub r_type: u32,
}

/// The tables of one ELF object.
#[derive(Debug, Clone)]
pub(crate) struct RawElf<'a> {
    /// Indexed by ELF section index (index 0 is the null section).
    pub sections: Vec<RawSection<'a>>,
    /// Indexed by ELF symbol index (index 0 is the null symbol).
    pub symbols: Vec<RawSymbol>,
    pub relocs: Vec<RawReloc>,
}

fn elf_err(e: object::read::Error) -> ObjectError {
    ObjectError::Elf {
        reason: e.to_string(),
    }
}

impl<'a> RawElf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<RawElf<'a>, ObjectError> {
        let header = FileHeader64::<LE>::parse(data).map_err(elf_err)?;
        let endian = header.endian().map_err(|_| ObjectError::Elf {
            reason: "not a little-endian ELF64 file (BPF objects are built for bpfel)".into(),
        })?;
        let machine = header.e_machine(endian);
        if machine != EM_BPF {
            return Err(ObjectError::NotBpf { machine });
        }
        let e_type = header.e_type(endian);
        if e_type != ET_REL {
            return Err(ObjectError::NotRelocatable { e_type });
        }
        let table = header.sections(endian, data).map_err(elf_err)?;
        let mut sections = Vec::with_capacity(table.len());
        for (i, sh) in table.iter().enumerate() {
            let bad = |reason: String| ObjectError::BadSectionHeader { index: i, reason };
            let name = table
                .section_name(endian, sh)
                .map_err(|e| bad(e.to_string()))?;
            let name = String::from_utf8_lossy(name).into_owned();
            let sh_type = sh.sh_type(endian);
            let exec = sh.sh_flags(endian) & u64::from(SHF_EXECINSTR) != 0;
            let kind = if i == 0 {
                SectionKind::Ignored
            } else {
                SectionKind::classify(&name, exec, sh_type)?
            };
            let needs_data = !matches!(kind, SectionKind::Ignored);
            let contents = if needs_data && sh_type != SHT_NOBITS {
                sh.data(endian, data)
                    .map_err(|_| ObjectError::BadSectionData {
                        section: name.clone(),
                        reason: format!(
                            "offset {} and size {} lie outside the file ({} bytes)",
                            sh.sh_offset(endian),
                            sh.sh_size(endian),
                            data.len()
                        ),
                    })?
            } else {
                &[]
            };
            sections.push(RawSection {
                name,
                kind,
                data: contents,
                size: sh.sh_size(endian),
            });
        }

        let symtab =
            table
                .symbols(endian, data, SHT_SYMTAB)
                .map_err(|e| ObjectError::BadSymbol {
                    reason: e.to_string(),
                })?;
        let mut symbols = Vec::with_capacity(symtab.len());
        for (i, sym) in symtab.iter().enumerate() {
            let name = symtab
                .symbol_name(endian, sym)
                .map_err(|e| ObjectError::BadSymbol {
                    reason: format!("symbol {i}: {e}"),
                })?;
            let section = symtab
                .symbol_section(endian, sym, object::SymbolIndex(i))
                .map_err(|e| ObjectError::BadSymbol {
                    reason: format!("symbol {i}: {e}"),
                })?
                .map(|SectionIndex(s)| s);
            if let Some(s) = section {
                if s >= sections.len() {
                    return Err(ObjectError::BadSymbol {
                        reason: format!(
                            "symbol {i} (`{}`) points at section {s}, but there are {} sections",
                            String::from_utf8_lossy(name),
                            sections.len()
                        ),
                    });
                }
            }
            symbols.push(RawSymbol {
                name: String::from_utf8_lossy(name).into_owned(),
                section,
                value: sym.st_value(endian),
                size: sym.st_size(endian),
                st_type: sym.st_type(),
            });
        }

        let mut relocs = Vec::new();
        for (i, sh) in table.iter().enumerate() {
            let sh_type = sh.sh_type(endian);
            if sh_type != SHT_REL && sh_type != SHT_RELA {
                continue;
            }
            let rel_name = sections.get(i).map(|s| s.name.clone()).unwrap_or_default();
            let bad = |reason: String| ObjectError::BadRelocationSection {
                rel_section: rel_name.clone(),
                reason,
            };
            let target = sh.sh_info(endian) as usize;
            let Some(target_section) = sections.get(target) else {
                return Err(bad(format!(
                    "applies to section {target}, but there are {} sections",
                    sections.len()
                )));
            };
            // DWARF and BTF relocations only matter to linkers.
            if matches!(
                target_section.kind,
                SectionKind::Ignored | SectionKind::Btf | SectionKind::BtfExt
            ) {
                continue;
            }
            if sh_type == SHT_RELA {
                return Err(bad("RELA relocations are not used by BPF objects".into()));
            }
            let rels = match sh.rel(endian, data) {
                Ok(Some((rels, _link))) => rels,
                Ok(None) => continue,
                Err(e) => return Err(bad(e.to_string())),
            };
            for r in rels {
                relocs.push(RawReloc {
                    target,
                    offset: r.r_offset(endian),
                    symbol: r.r_sym(endian) as usize,
                    r_type: r.r_type(endian),
                });
            }
        }
        Ok(RawElf {
            sections,
            symbols,
            relocs,
        })
    }

    /// Symbol `idx`, or an error naming the relocation's place.
    pub fn symbol(
        &self,
        idx: usize,
        section: &str,
        offset: u64,
    ) -> Result<&RawSymbol, ObjectError> {
        self.symbols
            .get(idx)
            .filter(|_| idx != 0)
            .ok_or_else(|| ObjectError::BadRelocation {
                section: section.to_string(),
                offset,
                reason: format!(
                    "refers to symbol {idx}, but the symbol table has {} entries",
                    self.symbols.len()
                ),
            })
    }
}
