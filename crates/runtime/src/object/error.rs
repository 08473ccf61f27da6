//! Errors of object loading. Every variant names the section (and, where one exists, the
//! byte offset inside it) so that a hostile or corrupt object can be diagnosed.

use super::btf::BtfError;
use super::btf_ext::BtfExtError;

/// The accepted program section forms, quoted in errors.
pub const ACCEPTED_PROGRAM_SECTIONS: &str =
    "`cuda/<api>` (runs on entry) and `cudaret/<api>` (runs on exit), or `cuda` / `cudaret` \
     with the API given at load (`gpubpf load --attach`)";

/// Why an object file could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("not a usable ELF file: {reason}")]
    Elf { reason: String },
    #[error("ELF machine {machine} is not BPF (247)")]
    NotBpf { machine: u16 },
    #[error("ELF type {e_type} is not a relocatable object (1)")]
    NotRelocatable { e_type: u16 },
    #[error("section {index}: {reason}")]
    BadSectionHeader { index: usize, reason: String },
    #[error("section `{section}`: {reason}")]
    BadSectionData { section: String, reason: String },
    #[error("unknown program section `{section}`: accepted forms are {accepted}", accepted = ACCEPTED_PROGRAM_SECTIONS)]
    UnknownProgramSection { section: String },
    #[error("section `{section}`: {reason}")]
    UnknownAttachPoint { section: String, reason: String },
    #[error("section `{section}`: size {size} is not a multiple of 8 bytes")]
    CodeSize { section: String, size: u64 },
    #[error("symbol table: {reason}")]
    BadSymbol { reason: String },
    #[error("section `{section}`: function `{name}` at offset {offset} (size {size}) {reason}")]
    BadFunction {
        section: String,
        name: String,
        offset: u64,
        size: u64,
        reason: &'static str,
    },
    #[error("section `{section}` has no function symbol (is it compiled from C with clang?)")]
    NoFunctions { section: String },
    #[error("relocation section `{rel_section}`: {reason}")]
    BadRelocationSection { rel_section: String, reason: String },
    #[error("section `{section}`, offset {offset}: relocation {reason}")]
    BadRelocation {
        section: String,
        offset: u64,
        reason: String,
    },
    #[error("section `{section}`, offset {offset}: unsupported relocation type {r_type}{what}")]
    UnsupportedRelocation {
        section: String,
        offset: u64,
        r_type: u32,
        what: String,
    },
    #[error("section `{section}`, offset {offset}: unresolved external symbol `{symbol}`")]
    UndefinedSymbol {
        section: String,
        offset: u64,
        symbol: String,
    },
    #[error("section `{section}`, offset {offset}: `lddw` is missing its second slot")]
    TruncatedLddw { section: String, offset: u64 },
    #[error(
        "section `{section}`, offset {offset}: `lddw` with pseudo source {src} ({kind}) has no \
         relocation; map and function references must come from the compiler's relocations"
    )]
    UnrelocatedPseudoLddw {
        section: String,
        offset: u64,
        src: u8,
        kind: String,
    },
    #[error("section `{section}`, offset {offset}: {reason}")]
    BadCall {
        section: String,
        offset: u64,
        reason: String,
    },
    #[error(
        "section `{section}` defines maps but the object has no `.BTF` section (compile with -g)"
    )]
    MissingBtf { section: String },
    #[error("section `{section}` has no `DATASEC` in BTF")]
    MissingDatasec { section: String },
    #[error("map `{map}` (section `{section}`, offset {offset}): {reason}")]
    BadMap {
        map: String,
        section: String,
        offset: u64,
        reason: String,
    },
    #[error("map `{map}`: unsupported map type {map_type}; supported: hash (1), array (2), lru_hash (9), ringbuf (27)")]
    UnsupportedMapType { map: String, map_type: u32 },
    #[error("two maps are named `{name}`")]
    DuplicateMap { name: String },
    #[error("section `.BTF`: {source}")]
    Btf {
        #[source]
        source: BtfError,
    },
    #[error("section `.BTF.ext`: {source}")]
    BtfExt {
        #[source]
        source: BtfExtError,
    },
    #[error("section `license`: {reason}")]
    BadLicense { reason: String },
    #[error("the object contains no program (sections `cuda/<api>` or `cudaret/<api>`)")]
    NoPrograms,
}

/// Why `Object::set_global` refused a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobalError {
    #[error("`{input}`: expected NAME=VALUE, e.g. `limit_bytes=8GiB`")]
    NotAssignment { input: String },
    #[error("no global named `{name}`{hint}")]
    Unknown { name: String, hint: String },
    #[error("global `{name}` has no BTF type (compile with -g)")]
    NoBtf { name: String },
    #[error("global `{name}` in `{section}` is not `const volatile`; clang may have folded its value into the code, so setting it would have no effect")]
    NotConstVolatile { name: String, section: String },
    #[error(
        "global `{name}` has type `{type_name}`; only integers, booleans, enums and char arrays (strings) can be set"
    )]
    UnsupportedType { name: String, type_name: String },
    #[error("global `{name}` ({type_name}): {reason}")]
    BadValue {
        name: String,
        type_name: String,
        reason: String,
    },
    #[error("global `{name}`: {reason}")]
    Inconsistent { name: String, reason: String },
}
