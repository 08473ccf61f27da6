//! `gpubpf prog dump xlated|jited (NAME [--prog PROG] | id N | name X) [--opcodes]
//! [--linum]`: what a loaded program runs, in the style of `bpftool prog dump
//! xlated|jited`. The selector reads as `prog show`'s: an object by its registry name
//! (every program, or `--prog`'s), one program by the id `prog list` shows, or every
//! program of that function name (and every program of the object of that name).
//!
//! The program is built exactly as a process builds it (`dispatch::LoadedObject`: the
//! recorded object bytes, the recorded `--set` globals, the bound maps, re-verification at
//! every link, prepare, JIT), so the listing is the code that runs, not the object file.
//!
//! - `xlated`: the prepared BPF instructions (map references already rewritten to
//!   addresses, annotated with the map's registry name) in bpftool syntax, one
//!   `   N: (op) text` line per instruction, the C line from BTF line info above the first
//!   instruction of each line (`; text [file:line]` with `--linum`).
//! - `jited`: the machine code, disassembled on x86-64 (AT&T syntax, offsets in hex from the
//!   start of the code), grouped under the BPF instruction each piece came from (a `;` line
//!   with the instruction whenever it changes). Other hosts get a hex dump grouped the same
//!   way.
//!
//! `--opcodes` prints the raw bytes under each instruction; `-j` gives one object per
//! program with every instruction (`pc`, `text`, `bytes`, `source`, and for `jited` its
//! `native` instructions `{offset, bytes, asm}`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;

use anyhow::Context as _;
use gpubpf_isa::disasm::format_bpftool;
use gpubpf_isa::opcode::{BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE, LDDW};
use gpubpf_isa::{decode_program, Insn, Instruction};
use gpubpf_runtime::dispatch::{BuiltProgram, DispatchError, LoadedObject};
use gpubpf_runtime::helper_table::HelperTable;
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::object::Program;
use gpubpf_runtime::registry::{ObjectRecord, ProgramRecord, Registry, RegistryError};
use serde::Serialize;

use crate::exit::{self, CliError};
use crate::output::{print_line, Output};

/// What to dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// The BPF instructions that run (maps bound), like `bpftool prog dump xlated`.
    Xlated,
    /// Their machine code, like `bpftool prog dump jited`.
    Jited,
}

/// Arguments of `gpubpf prog dump`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `xlated` (BPF instructions) or `jited` (machine code).
    #[arg(value_enum)]
    pub kind: Kind,
    /// `id N` (a program id, as `prog list` shows), `name X` (programs of that function
    /// name, or of the object of that name), or NAME: the registry name given at load time
    /// (as in `gpubpf prog show`).
    #[arg(num_args = 1..=2, required = true, value_name = "id N | name X | NAME")]
    pub selector: Vec<String>,
    /// Dump only this program of the object NAME (default: all of them).
    #[arg(long = "prog", value_name = "PROG")]
    pub prog: Option<String>,
    /// Print the raw bytes of each instruction.
    #[arg(long)]
    pub opcodes: bool,
    /// Print `[file:line]` after each C source line.
    #[arg(long)]
    pub linum: bool,
}

/// One program, as printed (text) and serialised (`-j`).
#[derive(Debug, Serialize)]
struct ProgramDump {
    object: String,
    program: String,
    section: String,
    phase: String,
    attach_points: Vec<String>,
    /// Instruction slots (`lddw` takes two), as in `gpubpf prog show`.
    insn_count: usize,
    functions: Vec<FunctionRow>,
    insns: Vec<InsnRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jited: Option<Jited>,
}

#[derive(Debug, Serialize)]
struct FunctionRow {
    name: String,
    pc: usize,
    /// Slots.
    len: usize,
    /// Code offset and size (`jited` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    code_offset: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_size: Option<usize>,
}

#[derive(Debug, Serialize)]
struct InsnRow {
    pc: usize,
    /// The opcode byte, two hex digits.
    opcode: String,
    text: String,
    /// The raw slots (8 or 16 bytes), hex.
    bytes: String,
    /// The map a rewritten `lddw` refers to (`map[q.proc_usage]`, `map[q.rodata][0]+8`).
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<String>,
    /// The C line this instruction belongs to.
    source: Option<Source>,
    /// Native instructions compiled from it, in address order (`jited` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    native: Option<Vec<Native>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Source {
    file: String,
    line: u32,
    column: u32,
    text: String,
}

/// One native instruction (or, where it cannot be decoded, a run of bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Native {
    /// From the start of the code.
    offset: usize,
    /// Hex.
    bytes: String,
    /// Assembly text; `None` in a hex dump.
    asm: Option<String>,
}

#[derive(Debug, Serialize)]
struct Jited {
    arch: &'static str,
    /// Whether `asm` is filled in (x86-64 hosts).
    disassembled: bool,
    code_address: String,
    code_size: usize,
    function_count: usize,
    /// The whole code, hex.
    code: String,
    /// Code that belongs to no BPF instruction: function prologues and alignment padding.
    unmapped: Vec<Native>,
    /// Address-ordered regions, for the text listing.
    #[serde(skip)]
    regions: Vec<Region>,
}

/// A stretch of code: one BPF function or padding.
#[derive(Debug)]
struct Region {
    /// Printed above it; `None` for padding (not printed).
    label: Option<String>,
    groups: Vec<Group>,
}

/// Consecutive native instructions that came from one BPF instruction (`pc`), or from none.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    pc: Option<usize>,
    natives: Vec<Native>,
}

pub fn run(reg: &Registry, args: Args, out: &Output) -> anyhow::Result<()> {
    let cmd = match args.kind {
        Kind::Xlated => "prog dump xlated",
        Kind::Jited => "prog dump jited",
    };
    let wanted = match super::prog::selector(&args.selector, cmd)? {
        super::prog::Selector::Object(name) => {
            let rec = find_object(reg, &name, args.kind)?;
            let progs = super::select_programs(
                &rec.programs,
                |p| p.name.as_str(),
                args.prog.as_deref(),
                &rec.name,
            )?
            .into_iter()
            .map(|p| p.name.clone())
            .collect();
            vec![(rec, progs)]
        }
        sel => {
            if args.prog.is_some() {
                return Err(CliError {
                    code: exit::USAGE,
                    message: format!(
                        "--prog selects a program of the object NAME, not of `{}`: \
                         `prog dump KIND NAME --prog PROG`",
                        args.selector.join(" ")
                    ),
                    json: None,
                }
                .into());
            }
            select(reg, &sel)?
        }
    };
    let helpers = standard_helpers();
    let mut dumps = Vec::new();
    for (rec, progs) in &wanted {
        let loaded = LoadedObject::open(reg, rec)
            .with_context(|| format!("cannot open loaded object `{}`", rec.name))?;
        for prec in rec.programs.iter().filter(|p| progs.contains(&p.name)) {
            let built = build(&loaded, prec, &helpers)?;
            let p = loaded
                .program(prec)
                .with_context(|| format!("program `{}`", prec.name))?;
            dumps.push(dump_program(&loaded, prec, p, &built, &helpers, args.kind)?);
        }
    }
    if out.json() {
        return out.print_json(&dumps);
    }
    let text: Vec<String> = dumps
        .iter()
        .map(|d| render_text(d, args.opcodes, args.linum))
        .collect();
    print_line(text.join("\n").trim_end())
}

/// The objects and programs (by name) that `id N` or `name X` selects, in id order, or an
/// error that lists what is loaded.
fn select(
    reg: &Registry,
    sel: &super::prog::Selector,
) -> anyhow::Result<Vec<(ObjectRecord, Vec<String>)>> {
    use super::prog::Selector;
    let snap = reg.snapshot().context("cannot read the registry")?;
    let mut objects = snap.objects;
    objects.sort_by(|a, b| (a.id, &a.name).cmp(&(b.id, &b.name)));
    let mut wanted = Vec::new();
    for o in &objects {
        let progs: Vec<String> = o
            .programs
            .iter()
            .enumerate()
            .filter(|(i, _)| sel.selects(o, *i))
            .map(|(_, p)| p.name.clone())
            .collect();
        if !progs.is_empty() {
            wanted.push((o.clone(), progs));
        }
    }
    if wanted.is_empty() {
        let what = match sel {
            Selector::Id(id) => format!("no loaded program has id {id}"),
            Selector::Name(x) => format!("no loaded program or object named `{x}`"),
            Selector::All | Selector::Object(_) => "nothing is loaded".into(),
        };
        anyhow::bail!("{what} ({})", loaded_programs(&objects));
    }
    Ok(wanted)
}

/// `loaded: a (2 p, 3 q); b (…)` (program ids and names), for errors.
fn loaded_programs(objects: &[ObjectRecord]) -> String {
    if objects.is_empty() {
        return "nothing is loaded".into();
    }
    let list: Vec<String> = objects
        .iter()
        .map(|o| {
            let progs: Vec<String> = (o.programs.iter().enumerate())
                .map(|(i, p)| match o.program_id(i) {
                    Some(id) if id > 0 => format!("{id} {}", p.name),
                    _ => p.name.clone(),
                })
                .collect();
            format!("{} ({})", o.name, progs.join(", "))
        })
        .collect();
    format!("loaded: {}", list.join("; "))
}

/// The record of `name`, or an error that lists what is loaded (and, when `name` is the
/// function name of loaded programs, how to select them).
fn find_object(reg: &Registry, name: &str, kind: Kind) -> anyhow::Result<ObjectRecord> {
    match reg.object(name) {
        Ok(r) => Ok(r),
        Err(RegistryError::NoSuchProgram { .. } | RegistryError::InvalidName { .. }) => {
            let snap = reg.snapshot().context("cannot read the registry")?;
            let mut objects = snap.objects;
            objects.sort_by(|a, b| (a.id, &a.name).cmp(&(b.id, &b.name)));
            let owners: Vec<&str> = objects
                .iter()
                .filter(|o| o.programs.iter().any(|p| p.name == name))
                .map(|o| o.name.as_str())
                .collect();
            let kind = match kind {
                Kind::Xlated => "xlated",
                Kind::Jited => "jited",
            };
            let hint = match owners.as_slice() {
                [] => String::new(),
                [one] => format!(
                    "; `{name}` is a program of `{one}`: `gpubpf prog dump {kind} name {name}` \
                     or `gpubpf prog dump {kind} {one} --prog {name}`"
                ),
                many => format!(
                    "; `{name}` is a program of {}: `gpubpf prog dump {kind} name {name}` \
                     dumps each",
                    many.iter()
                        .map(|o| format!("`{o}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            anyhow::bail!(
                "no loaded program named `{name}` ({}){hint}",
                loaded_programs(&objects)
            )
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read program `{name}`"))),
    }
}

/// Builds `prec` at each of its links, as every process does, and keeps the first build
/// (prepare and JIT do not depend on the attach point; verification does).
pub(crate) fn build(
    loaded: &LoadedObject,
    prec: &ProgramRecord,
    helpers: &HelperTable,
) -> anyhow::Result<BuiltProgram> {
    let mut first = None;
    for link in &prec.links {
        let built = loaded.build(prec, link, helpers).map_err(|e| match e {
            DispatchError::Rejected {
                object,
                program,
                message,
            } => anyhow::Error::new(CliError {
                code: exit::VERIFIER_REJECTED,
                message: format!(
                    "program `{program}` of `{object}` was rejected when re-verified at `{}` ({}): {message}",
                    link.attach_point, link.phase
                ),
                json: Some(serde_json::json!({
                    "object": object,
                    "program": program,
                    "attach_point": link.attach_point,
                    "phase": link.phase,
                    "verifier": message,
                })),
            }),
            other => anyhow::Error::new(other).context(format!(
                "cannot build program `{}` of `{}` for `{}`",
                prec.name, loaded.record.name, link.attach_point
            )),
        })?;
        first.get_or_insert(built);
    }
    first.ok_or_else(|| {
        anyhow::anyhow!(
            "program `{}` of `{}` has no links: nothing of it runs",
            prec.name,
            loaded.record.name
        )
    })
}

fn dump_program(
    loaded: &LoadedObject,
    prec: &ProgramRecord,
    p: &Program,
    built: &BuiltProgram,
    helpers: &HelperTable,
    kind: Kind,
) -> anyhow::Result<ProgramDump> {
    let insns = &built.prepared.insns;
    let decoded = decode_program(insns)
        .with_context(|| format!("program `{}`: prepared instructions", p.name))?;
    let helper_name = |id: i32| {
        helpers
            .name(id)
            .or_else(|| gpubpf_verifier::helpers::helper_by_id(id).map(|h| h.name))
    };
    let mut rows = Vec::with_capacity(decoded.len());
    // Addresses the code embeds, named: maps (from the rewritten `lddw`s) and helpers.
    let mut symbols: BTreeMap<u64, String> = helpers
        .ids()
        .filter_map(|id| Some((helpers.get(id)? as usize as u64, helpers.name(id)?.into())))
        .collect();
    for (pc, ins) in decoded {
        let slots = insns.get(pc..pc + ins.slots()).unwrap_or(&[]);
        let map = map_label(&loaded.record, p.insns.get(pc..pc + ins.slots()));
        if let (Some(label), Instruction::LoadImm64 { imm, next_imm, .. }) = (&map, ins) {
            symbols.insert(imm64(imm, next_imm), label.clone());
        }
        rows.push(InsnRow {
            pc,
            opcode: format!("{:02x}", slots.first().map_or(0, |i| i.opc)),
            text: format_bpftool(&ins, &helper_name),
            bytes: hex(&slots.iter().flat_map(Insn::to_bytes).collect::<Vec<_>>()),
            map,
            source: p.line_at(pc).map(|l| Source {
                file: l.file.to_string(),
                line: l.line,
                column: l.column,
                text: l.source.trim().to_string(),
            }),
            native: None,
        });
    }
    let mut functions: Vec<FunctionRow> = std::iter::once((p.name.clone(), 0, p.entry_len))
        .chain(p.subprograms.iter().map(|s| (s.name.clone(), s.pc, s.len)))
        .map(|(name, pc, len)| FunctionRow {
            name,
            pc,
            len,
            code_offset: None,
            code_size: None,
        })
        .collect();
    let jited = match kind {
        Kind::Xlated => None,
        Kind::Jited => Some(jited(built, &functions, &mut rows, &symbols)),
    };
    if jited.is_some() {
        for (f, r) in functions.iter_mut().zip(built.compiled.function_ranges()) {
            f.code_offset = Some(r.start);
            f.code_size = Some(r.len());
        }
    }
    Ok(ProgramDump {
        object: loaded.record.name.clone(),
        program: p.name.clone(),
        section: p.section.clone(),
        phase: built.phase.to_string(),
        attach_points: prec.links.iter().map(|l| l.attach_point.clone()).collect(),
        insn_count: insns.len(),
        functions,
        insns: rows,
        jited,
    })
}

/// `map[NAME]` or `map[NAME][0]+OFF` for an object `lddw` that references a map, with the
/// map's registry name.
fn map_label(rec: &ObjectRecord, original: Option<&[Insn]>) -> Option<String> {
    let [first, second] = original? else {
        return None;
    };
    if first.opc != LDDW || !matches!(first.src, BPF_PSEUDO_MAP_IDX | BPF_PSEUDO_MAP_IDX_VALUE) {
        return None;
    }
    let name = usize::try_from(first.imm)
        .ok()
        .and_then(|i| rec.maps.iter().find(|b| b.index == i))
        .map_or_else(|| format!("#{}", first.imm), |b| b.registry_name.clone());
    Some(if first.src == BPF_PSEUDO_MAP_IDX_VALUE {
        format!("map[{name}][0]+{}", second.imm as u32)
    } else {
        format!("map[{name}]")
    })
}

fn imm64(imm: i32, next_imm: i32) -> u64 {
    u64::from(imm as u32) | (u64::from(next_imm as u32) << 32)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `b7 00 00 …` from compact hex.
fn spaced(hex: &str) -> String {
    let pairs: Vec<_> = hex
        .as_bytes()
        .chunks(2)
        .map(String::from_utf8_lossy)
        .collect();
    pairs.join(" ")
}

/// Disassembles the compiled code, region by region, and attaches each native instruction
/// to the BPF instruction `pc_for_address` names (filling `rows[].native`).
fn jited(
    built: &BuiltProgram,
    functions: &[FunctionRow],
    rows: &mut [InsnRow],
    symbols: &BTreeMap<u64, String>,
) -> Jited {
    let c = &built.compiled;
    let code = c.code();
    let base = c.code_address();
    let pc_at = |off: usize| c.pc_for_address(base + off);
    let mut spans: Vec<(Range<usize>, Option<String>)> = c
        .function_ranges()
        .enumerate()
        .map(|(i, r)| {
            let name = functions
                .get(i)
                .map_or_else(|| format!("function {i}"), |f| f.name.clone());
            (r, Some(format!("{name}:")))
        })
        .collect();
    // In address order.
    spans.sort_by_key(|(r, _)| r.start);
    let mut regions = Vec::new();
    let mut at = 0;
    for (range, label) in spans {
        if range.start > at {
            regions.push(Region {
                label: None,
                groups: group_by_pc(hex_chunks(code, at..range.start, &pc_at), &pc_at),
            });
        }
        at = at.max(range.end);
        regions.push(Region {
            label,
            groups: group_by_pc(disassemble(code, range, &pc_at, symbols), &pc_at),
        });
    }
    if at < code.len() {
        regions.push(Region {
            label: None,
            groups: group_by_pc(hex_chunks(code, at..code.len(), &pc_at), &pc_at),
        });
    }
    let mut unmapped = Vec::new();
    for g in regions.iter().flat_map(|r| &r.groups) {
        let row =
            g.pc.and_then(|pc| rows.binary_search_by_key(&pc, |r| r.pc).ok())
                .and_then(|i| rows.get_mut(i));
        match row {
            Some(row) => row
                .native
                .get_or_insert_with(Vec::new)
                .extend(g.natives.iter().cloned()),
            None => unmapped.extend(g.natives.iter().cloned()),
        }
    }
    for row in rows.iter_mut() {
        // Instructions that compile to nothing (a register move folded away) show as `[]`.
        row.native.get_or_insert_with(Vec::new);
    }
    Jited {
        arch: std::env::consts::ARCH,
        disassembled: cfg!(target_arch = "x86_64"),
        code_address: format!("{base:#x}"),
        code_size: c.code_size(),
        function_count: c.function_count(),
        code: hex(code),
        unmapped,
        regions,
    }
}

/// Splits native instructions (address order) into runs that come from one BPF
/// instruction: a new group starts whenever the pc of an instruction's first byte changes.
fn group_by_pc(natives: Vec<Native>, pc_at: &dyn Fn(usize) -> Option<usize>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for n in natives {
        let pc = pc_at(n.offset);
        match groups.last_mut() {
            Some(g) if g.pc == pc => g.natives.push(n),
            _ => groups.push(Group {
                pc,
                natives: vec![n],
            }),
        }
    }
    groups
}

/// `range` of `code` as undecoded runs of at most 16 bytes that never cross a change of pc.
fn hex_chunks(
    code: &[u8],
    range: Range<usize>,
    pc_at: &dyn Fn(usize) -> Option<usize>,
) -> Vec<Native> {
    let mut out: Vec<Native> = Vec::new();
    let mut start = range.start;
    for off in range.clone() {
        let next = off + 1;
        if next == range.end || next - start == 16 || pc_at(next) != pc_at(start) {
            out.push(Native {
                offset: start,
                bytes: hex(code.get(start..next).unwrap_or(&[])),
                asm: None,
            });
            start = next;
        }
    }
    out
}

/// Decodes `range` of `code` as x86-64 (AT&T syntax, addresses relative to the code start);
/// immediates that are the address of a map or helper get a `# name` comment.
#[cfg(target_arch = "x86_64")]
fn disassemble(
    code: &[u8],
    range: Range<usize>,
    _pc_at: &dyn Fn(usize) -> Option<usize>,
    symbols: &BTreeMap<u64, String>,
) -> Vec<Native> {
    use iced_x86::{Decoder, DecoderOptions, Formatter as _, GasFormatter};

    let bytes = code.get(range.clone()).unwrap_or(&[]);
    let mut decoder = Decoder::with_ip(64, bytes, range.start as u64, DecoderOptions::NONE);
    let mut formatter = GasFormatter::new();
    // objdump's look: `jne    0x120`, `movabs $0x55d0c0a01000,%rax`.
    let options = formatter.options_mut();
    options.set_first_operand_char_index(7);
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    let mut out = Vec::new();
    let mut text = String::new();
    while decoder.can_decode() {
        let ins = decoder.decode();
        let offset = ins.ip() as usize;
        // An undecodable byte is shown as `(bad)` and skipped, as objdump does.
        let len = if ins.is_invalid() {
            1
        } else {
            ins.len().max(1)
        };
        text.clear();
        if ins.is_invalid() {
            text.push_str("(bad)");
            decoder.set_position(offset + 1 - range.start).ok();
            decoder.set_ip((offset + 1) as u64);
        } else {
            formatter.format(&ins, &mut text);
            for op in 0..ins.op_count() {
                if let Some(name) = ins.try_immediate(op).ok().and_then(|v| symbols.get(&v)) {
                    let _ = write!(text, "\t# {name}");
                }
            }
        }
        out.push(Native {
            offset,
            bytes: hex(code.get(offset..offset + len).unwrap_or(&[])),
            asm: Some(text.clone()),
        });
    }
    out
}

/// Other hosts: a hex dump, split where the BPF instruction changes.
#[cfg(not(target_arch = "x86_64"))]
fn disassemble(
    code: &[u8],
    range: Range<usize>,
    pc_at: &dyn Fn(usize) -> Option<usize>,
    _symbols: &BTreeMap<u64, String>,
) -> Vec<Native> {
    hex_chunks(code, range, pc_at)
}

/// The bpftool-style text listing of one program.
fn render_text(d: &ProgramDump, opcodes: bool, linum: bool) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "program {} ({} -> {}, {}, {} insns",
        d.program,
        d.section,
        d.attach_points.join(", "),
        d.phase,
        d.insn_count
    );
    if let Some(j) = &d.jited {
        let _ = write!(
            s,
            ", {} function(s), {} bytes of {} code at {}",
            j.function_count, j.code_size, j.arch, j.code_address
        );
    }
    s.push_str("):\n");
    let mut last: Option<&Source> = None;
    match &d.jited {
        None => {
            for row in &d.insns {
                let f = d.functions.iter().find(|f| f.pc == row.pc);
                if let Some(f) = f {
                    let _ = writeln!(s, "{}:", f.name);
                }
                note_source(&mut s, &mut last, row.source.as_ref(), f.is_some(), linum);
                let _ = write!(s, "{:4}: ({}) {}", row.pc, row.opcode, row.text);
                if let Some(m) = &row.map {
                    let _ = write!(s, " /* {m} */");
                }
                s.push('\n');
                if opcodes {
                    let _ = writeln!(s, "       {}", spaced(&row.bytes));
                }
            }
        }
        Some(j) => {
            if !j.disassembled {
                let _ = writeln!(
                    s,
                    "; no disassembler for {} hosts (x86_64 only): hex dump",
                    j.arch
                );
            }
            for region in &j.regions {
                let Some(label) = &region.label else {
                    continue; // alignment padding
                };
                let _ = writeln!(s, "{label}");
                for (i, g) in region.groups.iter().enumerate() {
                    let row =
                        g.pc.and_then(|pc| d.insns.binary_search_by_key(&pc, |r| r.pc).ok())
                            .and_then(|i| d.insns.get(i));
                    if let Some(row) = row {
                        note_source(&mut s, &mut last, row.source.as_ref(), i == 0, linum);
                        let _ = writeln!(s, "; {:4}: ({}) {}", row.pc, row.opcode, row.text);
                    }
                    for n in &g.natives {
                        match &n.asm {
                            Some(asm) => {
                                let _ = writeln!(s, "{:4x}:\t{asm}", n.offset);
                                if opcodes {
                                    let _ = writeln!(s, "\t{}", spaced(&n.bytes));
                                }
                            }
                            None => {
                                let _ = writeln!(s, "{:4x}:\t{}", n.offset, spaced(&n.bytes));
                            }
                        }
                    }
                }
            }
        }
    }
    s
}

/// Writes the C line `src` as a `; …` comment (bpftool's style) unless it continues the
/// line written last; `force` at the start of a function.
fn note_source<'a>(
    s: &mut String,
    last: &mut Option<&'a Source>,
    src: Option<&'a Source>,
    force: bool,
    linum: bool,
) {
    let Some(src) = src else { return };
    if force || last.is_none_or(|l| (&l.file, l.line) != (&src.file, src.line)) {
        let _ = if linum {
            writeln!(s, "; {} [{}:{}]", src.text, src.file, src.line)
        } else {
            writeln!(s, "; {}", src.text)
        };
    }
    *last = Some(src);
}

#[cfg(test)]
mod tests;
