//! Loading of policy objects: ELF files produced by `clang -target bpf` from restricted C.
//!
//! ```no_run
//! use gpubpf_runtime::object::Object;
//! let bytes = std::fs::read("quota.o").unwrap();
//! let mut obj = Object::parse(&bytes).unwrap();
//! obj.set_global("limit_bytes", "8GiB").unwrap();
//! for p in &obj.programs {
//!     println!("{} on {} ({}): {} insns", p.name, p.attach, p.phase, p.insns.len());
//! }
//! ```
//!
//! What the loader understands, in the order it is processed:
//! 1. Sections are classified into [`SectionKind`]: programs (`cuda/<api>` run on entry,
//!    `cudaret/<api>` on exit; any other executable or `type/…` section is rejected with the
//!    accepted forms), `.text` (subprograms), `.maps`, `maps`, global data, `license`,
//!    `.BTF`, `.BTF.ext`; everything else (DWARF, symbol tables) is ignored.
//! 2. `.BTF` is parsed by [`btf::Btf`], `.BTF.ext` line info by [`btf_ext::BtfExt`].
//! 3. Maps ([`MapDef`], indexed by position in [`Object::maps`]): BTF-defined maps in
//!    `.maps` (libbpf's `__uint`/`__type` encoding), legacy `struct bpf_map_def` in `maps`,
//!    then one single-entry array per non-empty global-data section (`.rodata`, `.data`,
//!    `.bss`, `.rodata.*`, `.data.*`, `.bss.*`), named after the section and carrying its
//!    initial bytes. `.rodata` maps have `BPF_F_RDONLY_PROG`.
//! 4. Programs ([`Program`]): each function of a program section, with every `.text`
//!    function it reaches (calls and `lddw` of a function address) appended after it and
//!    the calls re-targeted (`CallTarget::Local`, `LddwKind::Func`). Map references become
//!    `lddw` with `LddwKind::MapIdx` (imm = map index) and global-data references `lddw`
//!    with `LddwKind::MapIdxValue` (imm = map index, next imm = offset in the value), as
//!    `docs/design-decisions.md` prescribes.
//! 5. Globals ([`Global`]): every object symbol of a global-data section, typed by BTF.
//!    [`Object::set_global`] sets integer/bool/enum globals before load (`const volatile`
//!    ones in `.rodata`, any in `.data`/`.bss`), parsing sizes like `8GiB`.
//!
//! The loader never panics on input: a truncated, corrupt or hostile object yields an
//! [`ObjectError`] naming the section and byte offset.
//!
//! Global-data maps are named after their section (`.rodata`, `.bss`, …); a registry that
//! identifies maps by name must qualify them per object (libbpf prefixes the object name).

pub mod btf;
pub mod btf_ext;
mod elf;
mod error;
mod globals;
mod maps;
mod program;
mod reader;
mod section;
mod value;

pub use error::{GlobalError, ObjectError, ACCEPTED_PROGRAM_SECTIONS};
pub use globals::{render_value, Global};
pub use maps::{
    BtfTypeRef, MapDef, MapKind, MapOrigin, BPF_F_MMAPABLE, BPF_F_RDONLY_PROG, MAX_GLOBAL_DATA,
};
pub use program::{LineInfo, Program, Subprogram};
pub use section::{DataKind, Phase, ProgramSection, SectionKind};
pub use value::parse_int;
pub use value::{parse_bool, parse_integer};

use btf::Btf;
use btf_ext::BtfExt;

/// A parsed, relocated policy object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Programs, in section order, then symbol order.
    pub programs: Vec<Program>,
    /// Maps; `lddw` map references carry an index into this list.
    pub maps: Vec<MapDef>,
    /// Global variables of the global-data maps.
    pub globals: Vec<Global>,
    /// Contents of the `license` section, if any.
    pub license: Option<String>,
    /// The object's BTF, if it has a `.BTF` section.
    pub btf: Option<Btf>,
}

impl Object {
    /// Parses and relocates an object file.
    pub fn parse(data: &[u8]) -> Result<Object, ObjectError> {
        let elf = elf::RawElf::parse(data)?;
        let section = |kind: SectionKind| elf.sections.iter().find(|s| s.kind == kind);
        let btf = section(SectionKind::Btf)
            .map(|s| Btf::parse(s.data))
            .transpose()
            .map_err(|source| ObjectError::Btf { source })?;
        let ext = match (section(SectionKind::BtfExt), &btf) {
            (Some(s), Some(b)) => {
                Some(BtfExt::parse(s.data, b).map_err(|source| ObjectError::BtfExt { source })?)
            }
            _ => None,
        };
        let license = section(SectionKind::License)
            .map(|s| {
                let text = s.data.split(|&b| b == 0).next().unwrap_or(&[]);
                std::str::from_utf8(text)
                    .map(str::to_string)
                    .map_err(|_| ObjectError::BadLicense {
                        reason: "not UTF-8".into(),
                    })
            })
            .transpose()?;
        let maps = maps::collect_maps(&elf, btf.as_ref())?;
        let globals = globals::collect_globals(&elf, btf.as_ref(), &maps);
        let programs = program::link_programs(&elf, &maps, ext.as_ref())?;
        if programs.is_empty() {
            return Err(ObjectError::NoPrograms);
        }
        tracing::debug!(
            programs = programs.len(),
            maps = maps.len(),
            globals = globals.len(),
            "object parsed"
        );
        Ok(Object {
            programs,
            maps,
            globals,
            license,
            btf,
        })
    }

    /// The program named `name`.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }

    /// The index of the map named `name` in [`Object::maps`].
    pub fn map_index(&self, name: &str) -> Option<usize> {
        self.maps.iter().position(|m| m.name == name)
    }

    /// The global named `name`.
    pub fn global(&self, name: &str) -> Option<&Global> {
        self.globals.iter().find(|g| g.name == name)
    }

    /// The current value of a global: its bytes in the backing map's initial value
    /// (the default unless [`Object::set_global`] changed it).
    pub fn global_value(&self, global: &Global) -> Option<&[u8]> {
        let init = self.maps.get(global.map_index)?.initial.as_deref()?;
        let start = global.offset as usize;
        init.get(start..start.checked_add(global.size as usize)?)
    }

    /// Sets global `name` from text (`8GiB`, `0x10`, `-3`, `true`, an enumerator name),
    /// checked against its BTF type and size. Globals in `.rodata` must be `const volatile`.
    pub fn set_global(&mut self, name: &str, value: &str) -> Result<(), GlobalError> {
        let Some(g) = self.globals.iter().find(|g| g.name == name) else {
            let settable: Vec<&str> = self
                .globals
                .iter()
                .filter(|g| g.settable)
                .map(|g| g.name.as_str())
                .collect();
            let hint = if settable.is_empty() {
                " (the object has no settable globals)".to_string()
            } else {
                format!("; settable globals: {}", settable.join(", "))
            };
            return Err(GlobalError::Unknown {
                name: name.to_string(),
                hint,
            });
        };
        let Some(map) = self.maps.get_mut(g.map_index) else {
            return Err(GlobalError::Inconsistent {
                name: name.to_string(),
                reason: "its map is missing".into(),
            });
        };
        globals::set_global(g, self.btf.as_ref(), map, value)
    }

    /// Applies `NAME=VALUE` assignments (the form of `--set`).
    pub fn apply_sets<S: AsRef<str>>(&mut self, assignments: &[S]) -> Result<(), GlobalError> {
        for a in assignments {
            let a = a.as_ref();
            let (name, value) = a
                .split_once('=')
                .ok_or_else(|| GlobalError::NotAssignment {
                    input: a.to_string(),
                })?;
            self.set_global(name.trim(), value)?;
        }
        Ok(())
    }
}
