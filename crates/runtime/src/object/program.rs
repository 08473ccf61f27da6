//! Programs: extraction of functions from code sections, map and global-data relocations,
//! and bpf-to-bpf call linking (a program gets the subprograms it reaches appended after
//! it, and every call and `lddw func` is re-targeted).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpubpf_isa::opcode::{BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL, CALL};
use gpubpf_isa::{slots_from_bytes, Insn, LddwKind};

use super::btf_ext::BtfExt;
use super::elf::{RawElf, RawReloc, STT_FUNC, STT_SECTION};
use super::error::ObjectError;
use super::maps::MapDef;
use super::section::{Phase, SectionKind};

/// `R_BPF_64_64`: the 64-bit immediate of an `lddw`.
const R_BPF_64_64: u32 = 1;
/// `R_BPF_64_32`: the 32-bit immediate of a call.
const R_BPF_64_32: u32 = 10;

/// A source position of one instruction (from `.BTF.ext` line info; records with line 0,
/// which mark compiler-generated code, are dropped).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineInfo {
    /// Instruction index in [`Program::insns`].
    pub pc: usize,
    pub file: Arc<str>,
    pub line: u32,
    pub column: u32,
    /// The text of the source line.
    pub source: Arc<str>,
}

/// A function appended after the entry function of a program.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Subprogram {
    pub name: String,
    /// First instruction index in [`Program::insns`].
    pub pc: usize,
    /// Length in slots.
    pub len: usize,
}

/// One program, linked and relocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Function name.
    pub name: String,
    /// ELF section (`cuda/cuMemAlloc`).
    pub section: String,
    /// The attach point: the driver function the section names, resolved through the
    /// catalog (`cuMemAlloc` for `cuda/cuMemAlloc`, `cuda/cudaMalloc` and
    /// `cuda/cuMemAlloc_v2`).
    pub attach: String,
    /// The attach point's catalog id (`hdr.api_id`).
    pub attach_id: u32,
    pub phase: Phase,
    /// Slots: the entry function first, then [`Program::subprograms`]. Map references are
    /// `lddw` with `LddwKind::MapIdx`/`MapIdxValue`, calls are `CallTarget::Local`.
    pub insns: Vec<Insn>,
    /// Length of the entry function in slots.
    pub entry_len: usize,
    pub subprograms: Vec<Subprogram>,
    /// Line records, sorted by `pc`.
    pub line_info: Vec<LineInfo>,
}

impl Program {
    /// The source line governing `pc`: the last record at or before it in the same function.
    pub fn line_at(&self, pc: usize) -> Option<&LineInfo> {
        let start = self
            .subprograms
            .iter()
            .filter(|s| s.pc <= pc)
            .map(|s| s.pc)
            .max()
            .unwrap_or(0);
        self.line_info
            .iter()
            .take_while(|l| l.pc <= pc)
            .filter(|l| l.pc >= start)
            .last()
    }

    /// Number of instructions covered by a line record (see [`Program::line_at`]).
    pub fn line_coverage(&self) -> usize {
        (0..self.insns.len())
            .filter(|&pc| self.line_at(pc).is_some())
            .count()
    }
}

/// A function symbol of a code section, in slots.
#[derive(Debug, Clone)]
struct Func {
    name: String,
    start: usize,
    len: usize,
}

/// A code section ready for linking.
#[derive(Debug)]
struct Code {
    name: String,
    insns: Vec<Insn>,
    funcs: Vec<Func>,
    /// Relocations by slot.
    relocs: BTreeMap<usize, RawReloc>,
}

/// What a relocated `lddw` or call refers to.
enum Target {
    Map(usize),
    MapValue { map: usize, offset: i64 },
    Code { section: usize, byte: i64 },
}

struct Linker<'e, 'a> {
    elf: &'e RawElf<'a>,
    maps: &'e [MapDef],
    code: BTreeMap<usize, Code>,
    ext: Option<&'e BtfExt>,
}

/// Extracts and links every program of the object.
pub(crate) fn link_programs(
    elf: &RawElf<'_>,
    maps: &[MapDef],
    ext: Option<&BtfExt>,
) -> Result<Vec<Program>, ObjectError> {
    let mut code = BTreeMap::new();
    for (idx, sec) in elf.sections.iter().enumerate() {
        if matches!(sec.kind, SectionKind::Text | SectionKind::Program(_)) {
            code.insert(idx, code_section(elf, idx)?);
        }
    }
    for r in &elf.relocs {
        let Some(c) = code.get_mut(&r.target) else {
            if matches!(
                elf.sections.get(r.target).map(|s| &s.kind),
                Some(SectionKind::Data(_) | SectionKind::BtfMaps | SectionKind::LegacyMaps)
            ) {
                return Err(ObjectError::BadRelocation {
                    section: elf.sections[r.target].name.clone(),
                    offset: r.offset,
                    reason: "in a data or map section (pointers in global data and map-in-map are not supported)".into(),
                });
            }
            continue;
        };
        let bad = |reason: String| ObjectError::BadRelocation {
            section: c.name.clone(),
            offset: r.offset,
            reason,
        };
        if r.offset % 8 != 0 {
            return Err(bad("is not aligned to an instruction".into()));
        }
        let slot = usize::try_from(r.offset / 8).unwrap_or(usize::MAX);
        if slot >= c.insns.len() {
            return Err(bad(format!(
                "lies outside the section ({} bytes)",
                c.insns.len() * 8
            )));
        }
        if c.relocs.insert(slot, *r).is_some() {
            return Err(bad("is the second relocation of one instruction".into()));
        }
    }
    let linker = Linker {
        elf,
        maps,
        code,
        ext,
    };
    let mut programs = Vec::new();
    for (&idx, c) in &linker.code {
        let SectionKind::Program(ps) = &elf.sections[idx].kind else {
            continue;
        };
        for (fi, f) in c.funcs.iter().enumerate() {
            let mut p = linker.link(idx, fi)?;
            p.name = f.name.clone();
            p.section = c.name.clone();
            p.attach = ps.attach.clone();
            p.attach_id = ps.attach_id;
            p.phase = ps.phase;
            programs.push(p);
        }
    }
    Ok(programs)
}

fn code_section(elf: &RawElf<'_>, idx: usize) -> Result<Code, ObjectError> {
    let sec = &elf.sections[idx];
    let insns = slots_from_bytes(sec.data).map_err(|_| ObjectError::CodeSize {
        section: sec.name.clone(),
        size: sec.data.len() as u64,
    })?;
    let size = insns.len() as u64 * 8;
    let mut syms: Vec<_> = elf
        .symbols
        .iter()
        .filter(|s| s.section == Some(idx) && s.st_type == STT_FUNC)
        .collect();
    syms.sort_by_key(|s| s.value);
    let mut funcs = Vec::with_capacity(syms.len());
    for (i, s) in syms.iter().enumerate() {
        let bad = |reason: &'static str| ObjectError::BadFunction {
            section: sec.name.clone(),
            name: s.name.clone(),
            offset: s.value,
            size: s.size,
            reason,
        };
        let next = syms.get(i + 1).map_or(size, |n| n.value);
        let len = if s.size == 0 {
            next.saturating_sub(s.value)
        } else {
            s.size
        };
        if s.value % 8 != 0 || len % 8 != 0 {
            return Err(bad("is not aligned to instructions"));
        }
        if len == 0 {
            return Err(bad("is empty"));
        }
        if s.value.checked_add(len).is_none_or(|end| end > size) {
            return Err(bad("extends past the end of the section"));
        }
        if s.value + len > next {
            return Err(bad("overlaps the next function"));
        }
        funcs.push(Func {
            name: s.name.clone(),
            start: (s.value / 8) as usize,
            len: (len / 8) as usize,
        });
    }
    if funcs.is_empty() && !insns.is_empty() && matches!(sec.kind, SectionKind::Program(_)) {
        return Err(ObjectError::NoFunctions {
            section: sec.name.clone(),
        });
    }
    Ok(Code {
        name: sec.name.clone(),
        insns,
        funcs,
        relocs: BTreeMap::new(),
    })
}

/// One function placed in a program being linked.
#[derive(Debug, Clone)]
struct Placed {
    section: usize,
    func: usize,
    base: usize,
}

impl Linker<'_, '_> {
    fn code(&self, section: usize) -> &Code {
        // Only called with keys taken from `self.code` or checked by `find_func`.
        &self.code[&section]
    }

    /// Index of the function of `section` starting at `slot`.
    fn find_func(&self, section: usize, slot: i64) -> Option<usize> {
        let c = self.code.get(&section)?;
        c.funcs.iter().position(|f| f.start as i64 == slot)
    }

    fn resolve(&self, r: &RawReloc, insn: Insn, section: &str) -> Result<Target, ObjectError> {
        let sym = self.elf.symbol(r.symbol, section, r.offset)?;
        let bad = |reason: String| ObjectError::BadRelocation {
            section: section.to_string(),
            offset: r.offset,
            reason,
        };
        let Some(s) = sym.section else {
            return Err(ObjectError::UndefinedSymbol {
                section: section.to_string(),
                offset: r.offset,
                symbol: sym.name.clone(),
            });
        };
        let value =
            i64::try_from(sym.value).map_err(|_| bad("symbol value is too large".into()))?;
        let sec = &self.elf.sections[s];
        match sec.kind {
            SectionKind::BtfMaps | SectionKind::LegacyMaps => {
                let off = if sym.st_type == STT_SECTION {
                    value + i64::from(insn.imm)
                } else {
                    value
                };
                self.maps
                    .iter()
                    .position(|m| !m.is_global() && m.sym.0 == s && m.sym.1 as i64 == off)
                    .map(Target::Map)
                    .ok_or_else(|| {
                        bad(format!(
                            "refers to offset {off} of `{}`, where no map is defined",
                            sec.name
                        ))
                    })
            }
            SectionKind::Data(_) => {
                let map = self
                    .maps
                    .iter()
                    .position(|m| m.is_global() && m.sym.0 == s)
                    .ok_or_else(|| bad(format!("refers to empty section `{}`", sec.name)))?;
                Ok(Target::MapValue {
                    map,
                    offset: value + i64::from(insn.imm),
                })
            }
            SectionKind::Text | SectionKind::Program(_) => Ok(Target::Code {
                section: s,
                byte: value,
            }),
            _ => Err(bad(format!(
                "refers to symbol `{}` in section `{}`, which holds no map, data or code",
                sym.name, sec.name
            ))),
        }
    }

    /// Links the program whose entry is function `func` of `section`.
    fn link(&self, section: usize, func: usize) -> Result<Program, ObjectError> {
        let mut insns: Vec<Insn> = Vec::new();
        let mut placed: Vec<Placed> = Vec::new();
        let place =
            |insns: &mut Vec<Insn>, placed: &mut Vec<Placed>, section: usize, func: usize| {
                if let Some(p) = placed
                    .iter()
                    .find(|p| p.section == section && p.func == func)
                {
                    return p.base;
                }
                let c = self.code(section);
                let f = &c.funcs[func];
                let base = insns.len();
                insns.extend_from_slice(&c.insns[f.start..f.start + f.len]);
                placed.push(Placed {
                    section,
                    func,
                    base,
                });
                base
            };
        place(&mut insns, &mut placed, section, func);
        let mut i = 0;
        while let Some(p) = placed.get(i).cloned() {
            i += 1;
            let c = self.code(p.section);
            let f = &c.funcs[p.func];
            let end = f.start + f.len;
            let mut slot = f.start;
            while slot < end {
                let pc = p.base + (slot - f.start);
                let insn = insns[pc];
                let offset = slot as u64 * 8;
                let here = |reason: String| ObjectError::BadCall {
                    section: c.name.clone(),
                    offset,
                    reason,
                };
                let reloc = c.relocs.get(&slot);
                if let Some(r) = reloc {
                    let want = if insn.is_lddw() {
                        R_BPF_64_64
                    } else {
                        R_BPF_64_32
                    };
                    if r.r_type != want || !(insn.is_lddw() || insn.opc == CALL) {
                        return Err(ObjectError::UnsupportedRelocation {
                            section: c.name.clone(),
                            offset,
                            r_type: r.r_type,
                            what: format!(
                                " ({}) on an instruction with opcode {:#04x}",
                                reloc_name(r.r_type),
                                insn.opc
                            ),
                        });
                    }
                }
                if insn.is_lddw() {
                    if slot + 1 >= end {
                        return Err(ObjectError::TruncatedLddw {
                            section: c.name.clone(),
                            offset,
                        });
                    }
                    if c.relocs.contains_key(&(slot + 1)) {
                        return Err(ObjectError::BadRelocation {
                            section: c.name.clone(),
                            offset: offset + 8,
                            reason: "points into the second slot of an `lddw`".into(),
                        });
                    }
                    if let Some(r) = reloc {
                        let (first, second) = match self.resolve(r, insn, &c.name)? {
                            Target::Map(m) => (
                                Insn {
                                    src: LddwKind::MapIdx.src(),
                                    imm: map_imm(m),
                                    ..insn
                                },
                                Insn {
                                    imm: 0,
                                    ..insns[pc + 1]
                                },
                            ),
                            Target::MapValue { map, offset: off } => {
                                let size = i64::from(self.maps[map].value_size);
                                if !(0..size).contains(&off) {
                                    return Err(ObjectError::BadRelocation {
                                        section: c.name.clone(),
                                        offset,
                                        reason: format!(
                                            "refers to offset {off} of `{}` ({size} bytes)",
                                            self.maps[map].name
                                        ),
                                    });
                                }
                                (
                                    Insn {
                                        src: LddwKind::MapIdxValue.src(),
                                        imm: map_imm(map),
                                        ..insn
                                    },
                                    Insn {
                                        imm: off as i32,
                                        ..insns[pc + 1]
                                    },
                                )
                            }
                            Target::Code { section: ts, byte } => {
                                let byte = byte + i64::from(insn.imm);
                                if byte % 8 != 0 {
                                    return Err(here(format!(
                                        "`lddw` of a function at unaligned byte {byte}"
                                    )));
                                }
                                let tf = self.find_func(ts, byte / 8).ok_or_else(|| {
                                    here(format!(
                                        "`lddw` refers to byte {byte}, which starts no function"
                                    ))
                                })?;
                                let tbase = place(&mut insns, &mut placed, ts, tf);
                                (
                                    Insn {
                                        src: LddwKind::Func.src(),
                                        imm: rel(tbase, pc),
                                        ..insn
                                    },
                                    Insn {
                                        imm: 0,
                                        ..insns[pc + 1]
                                    },
                                )
                            }
                        };
                        insns[pc] = first;
                        insns[pc + 1] = second;
                    } else if insn.src != LddwKind::Imm.src() {
                        // A pseudo form (map fd/index/value, function, BTF id) is only ever
                        // what this loader writes from a relocation; one already in the
                        // object would name a map or an offset the ELF never declared.
                        return Err(ObjectError::UnrelocatedPseudoLddw {
                            section: c.name.clone(),
                            offset,
                            src: insn.src,
                            kind: LddwKind::from_src(insn.src)
                                .map_or_else(|| "unknown".to_string(), |k| format!("{k:?}")),
                        });
                    }
                    slot += 2;
                    continue;
                }
                if insn.opc == CALL && insn.src == BPF_PSEUDO_KFUNC_CALL {
                    return Err(here("kernel function calls are not supported".into()));
                }
                if insn.opc == CALL && insn.src == BPF_PSEUDO_CALL {
                    let (ts, tslot) = match reloc {
                        Some(r) => match self.resolve(r, insn, &c.name)? {
                            Target::Code { section: ts, byte } => {
                                if byte % 8 != 0 {
                                    return Err(here(format!("call to unaligned byte {byte}")));
                                }
                                (ts, byte / 8 + i64::from(insn.imm) + 1)
                            }
                            _ => {
                                return Err(here(
                                    "call relocation against a map or data symbol".into(),
                                ))
                            }
                        },
                        None => (p.section, slot as i64 + i64::from(insn.imm) + 1),
                    };
                    let tf = self.find_func(ts, tslot).ok_or_else(|| {
                        here(format!(
                            "call to instruction {tslot} of `{}`, which starts no function",
                            self.code.get(&ts).map_or("?", |c| c.name.as_str())
                        ))
                    })?;
                    let tbase = place(&mut insns, &mut placed, ts, tf);
                    insns[pc].imm = rel(tbase, pc);
                } else if insn.opc == CALL && reloc.is_some() {
                    return Err(here("relocation on a helper call".into()));
                }
                slot += 1;
            }
        }

        let entry_len = self.code(section).funcs[func].len;
        let subprograms = placed
            .iter()
            .skip(1)
            .map(|p| {
                let f = &self.code(p.section).funcs[p.func];
                Subprogram {
                    name: f.name.clone(),
                    pc: p.base,
                    len: f.len,
                }
            })
            .collect();
        let mut line_info = Vec::new();
        if let Some(ext) = self.ext {
            for p in &placed {
                let c = self.code(p.section);
                let f = &c.funcs[p.func];
                let bytes = f.start as u64 * 8..(f.start + f.len) as u64 * 8;
                for rec in ext.lines_in(&c.name, bytes) {
                    let slot = (rec.insn_off / 8) as usize;
                    // Line 0 marks compiler-generated code: no source position.
                    let inside = slot >= f.start && slot < f.start + f.len;
                    if rec.insn_off % 8 == 0 && rec.line != 0 && inside {
                        line_info.push(LineInfo {
                            pc: p.base + slot - f.start,
                            file: rec.file.clone(),
                            line: rec.line,
                            column: rec.column,
                            source: rec.source.clone(),
                        });
                    }
                }
            }
        }
        line_info.sort_by_key(|l| l.pc);
        Ok(Program {
            name: String::new(),
            section: String::new(),
            attach: String::new(),
            attach_id: 0,
            phase: Phase::Entry,
            insns,
            entry_len,
            subprograms,
            line_info,
        })
    }
}

/// The name of a BPF ELF relocation type.
fn reloc_name(r_type: u32) -> &'static str {
    match r_type {
        0 => "R_BPF_NONE",
        R_BPF_64_64 => "R_BPF_64_64",
        2 => "R_BPF_64_ABS64",
        3 => "R_BPF_64_ABS32",
        4 => "R_BPF_64_NODYLD32",
        R_BPF_64_32 => "R_BPF_64_32",
        _ => "unknown",
    }
}

fn map_imm(map: usize) -> i32 {
    i32::try_from(map).unwrap_or(i32::MAX)
}

/// `imm` of a call or `lddw func` at `pc` reaching `target`: relative to the next slot.
fn rel(target: usize, pc: usize) -> i32 {
    let d = target as i64 - (pc as i64 + 1);
    i32::try_from(d).unwrap_or(i32::MAX)
}
