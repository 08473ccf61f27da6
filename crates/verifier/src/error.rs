//! Verifier errors as data, and their rendering.

use gpubpf_isa::{DecodeError, Insn};
use serde::Serialize;

use crate::print::listing_line;
use crate::{LineInfo, MapInfo, VerifyStats};

/// Why a program was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    // --- structure -------------------------------------------------------------------
    #[error("invalid instruction: {source}")]
    Decode { source: DecodeError },
    #[error("program is empty")]
    EmptyProgram,
    #[error("program has {len} instructions, more than the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("jump out of range: target {target} is outside the program")]
    JumpOutOfRange { target: i64 },
    #[error("jump into the middle of `lddw` at {target}")]
    JumpIntoLddw { target: usize },
    #[error("jump from one subprogram into another (target {target})")]
    JumpOutOfSubprog { target: usize },
    #[error("unreachable instruction")]
    Unreachable,
    #[error("last instruction of the subprogram is not `exit` or an unconditional jump")]
    FallsOffEnd,
    #[error("recursive call: subprogram at {callee} calls itself through {chain:?}")]
    Recursion { callee: usize, chain: Vec<usize> },
    #[error("call chain of {depth} frames is too deep (at most 8)")]
    CallChainTooDeep { depth: usize },
    #[error("combined stack size of {frames} calls is {size} bytes; at most 512 allowed")]
    StackTooLarge { frames: usize, size: u32 },
    #[error("frame pointer r10 is read only")]
    WriteFramePointer,
    #[error("unsupported instruction: {what}")]
    Unsupported { what: String },
    #[error("map index {index} is out of range: the program has {count} maps")]
    BadMapIndex { index: i64, count: usize },
    #[error("{detail}")]
    BadMapReference { detail: String },
    #[error("`lddw` function reference to {target}, which is not the start of a subprogram")]
    BadFuncRef { target: i64 },

    // --- registers and pointers ------------------------------------------------------
    #[error("r{reg} !read_ok: the register is not initialised here")]
    UninitReg { reg: u8 },
    #[error("r{reg} invalid mem access '{ty}'")]
    InvalidMemAccess { reg: u8, ty: String },
    #[error("invalid access to {region}: off={off} size={size}, allowed range is [{lo}, {hi})")]
    OutOfBounds {
        reg: u8,
        region: String,
        off: i64,
        size: u32,
        lo: i64,
        hi: i64,
    },
    #[error("r{reg} unbounded memory access to {region}: the variable offset is {range}")]
    UnboundedAccess {
        reg: u8,
        region: String,
        range: String,
    },
    #[error("r{reg} min value is negative: the offset into {region} can be {min}")]
    NegativeOffset { reg: u8, region: String, min: i64 },
    #[error("misaligned {region} access off={off} size={size}")]
    Misaligned {
        region: String,
        off: String,
        size: u32,
    },
    #[error("invalid read from stack off {off} size {size}: byte at fp{byte} is not initialised")]
    UninitStackRead { off: i64, size: u32, byte: i64 },
    #[error("r{reg} variable offset ctx access prohibited: {range}")]
    CtxVarOffset { reg: u8, range: String },
    #[error("invalid ctx access off={off} size={size}: {detail}")]
    CtxAccess { off: i64, size: u32, detail: String },
    #[error("{what} of ctx field `{field}` is not allowed in {program}")]
    CtxPermission {
        field: String,
        what: &'static str,
        program: String,
    },
    #[error("r{reg} leaks addr into {into}")]
    PointerLeak { reg: u8, into: String },
    #[error("invalid size of register spill: pointers must be stored with 8-byte `stxdw` at an 8-byte aligned stack slot")]
    PointerSpillSize,
    #[error("attempt to corrupt spilled pointer on stack at fp{off}")]
    CorruptSpilledPointer { off: i64 },
    #[error("invalid size of register fill: only a full 8-byte load restores the spilled pointer at fp{off}")]
    PartialPointerFill { off: i64 },
    #[error("r{reg} {detail}")]
    PointerArith { reg: u8, detail: String },
    #[error("r{reg} pointer comparison prohibited ({ty}); only NULL checks of or-null pointers are allowed")]
    PointerCompare { reg: u8, ty: String },
    #[error("write into read-only map `{map}`")]
    ReadOnlyMap { map: String },
    #[error("atomic operation: {detail}")]
    Atomic { detail: String },

    // --- calls -------------------------------------------------------------------------
    #[error("invalid func unknown#{id}: no helper with this id")]
    UnknownHelper { id: i32 },
    #[error(
        "{helper}: argument r{arg}: map `{map}` is read-only to programs (a frozen \
         `.rodata`, or a map this process may only read): {helper} would write into it"
    )]
    HelperWritesReadOnlyMap {
        helper: &'static str,
        arg: u8,
        map: String,
    },
    #[error("{helper}: argument r{arg}: {detail}")]
    HelperArg {
        helper: &'static str,
        arg: u8,
        detail: String,
    },
    #[error("unreleased reference id={ref_id} acquired at insn {alloc_pc}")]
    UnreleasedRef { ref_id: u32, alloc_pc: usize },
    #[error("the call stack of {frames} frames is too deep")]
    CallStackTooDeep { frames: usize },
    #[error("cannot return a pointer to the callee's stack to its caller")]
    ReturnStackPointer,
    #[error("callback must return 0 or 1 in r0, but r0 is {value}")]
    CallbackReturn { value: String },

    // --- termination and results -------------------------------------------------------
    #[error("infinite loop detected: the state at insn {pc} repeats exactly")]
    InfiniteLoop { pc: usize },
    #[error(
        "program is too large or too complex: processed {processed} instructions, budget {budget}"
    )]
    TooComplex { processed: u64, budget: u64 },
    #[error("at program exit r0 is {value}, but {program} must return a value in [{min}, {max}]")]
    ReturnValue {
        value: String,
        program: String,
        min: u64,
        max: u64,
    },
    #[error("r0 leaks addr as return value")]
    ReturnPointer,
    #[error("program is too complex: more than {limit} branches pending exploration")]
    TooManyBranches { limit: usize },
    #[error("the log exceeds its limit")]
    LogOverflow,
}

impl ErrorKind {
    /// A short, stable name of the variant (used in JSON).
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::Decode { .. } => "decode",
            ErrorKind::EmptyProgram => "empty_program",
            ErrorKind::TooLarge { .. } => "too_large",
            ErrorKind::JumpOutOfRange { .. } => "jump_out_of_range",
            ErrorKind::JumpIntoLddw { .. } => "jump_into_lddw",
            ErrorKind::JumpOutOfSubprog { .. } => "jump_out_of_subprog",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::FallsOffEnd => "falls_off_end",
            ErrorKind::Recursion { .. } => "recursion",
            ErrorKind::CallChainTooDeep { .. } => "call_chain_too_deep",
            ErrorKind::StackTooLarge { .. } => "stack_too_large",
            ErrorKind::WriteFramePointer => "write_frame_pointer",
            ErrorKind::Unsupported { .. } => "unsupported",
            ErrorKind::BadMapIndex { .. } => "bad_map_index",
            ErrorKind::BadMapReference { .. } => "bad_map_reference",
            ErrorKind::BadFuncRef { .. } => "bad_func_ref",
            ErrorKind::UninitReg { .. } => "uninit_reg",
            ErrorKind::InvalidMemAccess { .. } => "invalid_mem_access",
            ErrorKind::OutOfBounds { .. } => "out_of_bounds",
            ErrorKind::UnboundedAccess { .. } => "unbounded_access",
            ErrorKind::NegativeOffset { .. } => "negative_offset",
            ErrorKind::Misaligned { .. } => "misaligned",
            ErrorKind::UninitStackRead { .. } => "uninit_stack_read",
            ErrorKind::CtxVarOffset { .. } => "ctx_var_offset",
            ErrorKind::CtxAccess { .. } => "ctx_access",
            ErrorKind::CtxPermission { .. } => "ctx_permission",
            ErrorKind::PointerLeak { .. } => "pointer_leak",
            ErrorKind::PointerSpillSize => "pointer_spill_size",
            ErrorKind::CorruptSpilledPointer { .. } => "corrupt_spilled_pointer",
            ErrorKind::PartialPointerFill { .. } => "partial_pointer_fill",
            ErrorKind::PointerArith { .. } => "pointer_arith",
            ErrorKind::PointerCompare { .. } => "pointer_compare",
            ErrorKind::ReadOnlyMap { .. } | ErrorKind::HelperWritesReadOnlyMap { .. } => {
                "read_only_map"
            }
            ErrorKind::Atomic { .. } => "atomic",
            ErrorKind::UnknownHelper { .. } => "unknown_helper",
            ErrorKind::HelperArg { .. } => "helper_arg",
            ErrorKind::UnreleasedRef { .. } => "unreleased_ref",
            ErrorKind::CallStackTooDeep { .. } => "call_stack_too_deep",
            ErrorKind::ReturnStackPointer => "return_stack_pointer",
            ErrorKind::CallbackReturn { .. } => "callback_return",
            ErrorKind::InfiniteLoop { .. } => "infinite_loop",
            ErrorKind::TooComplex { .. } => "too_complex",
            ErrorKind::ReturnValue { .. } => "return_value",
            ErrorKind::ReturnPointer => "return_pointer",
            ErrorKind::TooManyBranches { .. } => "too_many_branches",
            ErrorKind::LogOverflow => "log_overflow",
        }
    }
}

/// The abstract state of one register involved in an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegNote {
    /// Register number.
    pub reg: u8,
    /// Rendered abstract value (`map_value_or_null(map=counts,…)`).
    pub state: String,
}

/// A rejected program: where, why, the registers involved, and how to fix it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("instruction {pc}: {kind}")]
pub struct VerifierError {
    /// Slot index of the offending instruction.
    pub pc: usize,
    /// What went wrong.
    pub kind: ErrorKind,
    /// State of the registers involved.
    pub regs: Vec<RegNote>,
    /// One-line advice, when there is one.
    pub hint: Option<String>,
    /// Rendered listing around `pc` (bpftool style, C lines interleaved when known).
    pub listing: Vec<String>,
    /// The C source line of `pc`, when line info was supplied.
    pub source_line: Option<String>,
    /// The verbose log up to the error (empty unless logging was enabled).
    pub log: String,
    /// Statistics up to the error.
    pub stats: VerifyStats,
}

/// A serialisable summary of a [`VerifierError`] (for `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    pub pc: usize,
    pub kind: &'static str,
    pub message: String,
    pub source_line: Option<String>,
    pub listing: Vec<String>,
    pub regs: Vec<RegNote>,
    pub hint: Option<String>,
}

/// Finds the line info entry that covers `pc`.
/// Entries with line 0 (compiler-generated code) are skipped, as bpftool does.
pub fn line_for(line_info: Option<&[LineInfo]>, pc: usize) -> Option<&LineInfo> {
    line_info?
        .iter()
        .rev()
        .find(|l| l.pc <= pc && l.line != 0 && !l.source.trim().is_empty())
}

fn line_text(l: &LineInfo) -> String {
    let src = l.source.trim();
    if l.file.is_empty() {
        format!("; {src}")
    } else {
        format!("; {src} @ {}:{}", l.file, l.line)
    }
}

/// Listing of up to `before` instructions before `pc` and `pc` itself.
pub fn build_listing(
    insns: &[Insn],
    pc: usize,
    maps: &[MapInfo],
    line_info: Option<&[LineInfo]>,
    before: usize,
) -> Vec<String> {
    let start = pc.saturating_sub(before);
    let mut out = Vec::new();
    let mut last_line: Option<(std::sync::Arc<str>, u32)> = None;
    let mut p = start;
    // Skip a leading second lddw slot.
    if p > 0 && insns.get(p - 1).is_some_and(|i| i.is_lddw()) && p != pc {
        p += 1;
    }
    while p <= pc && p < insns.len() {
        if let Some(l) = line_for(line_info, p) {
            let key = (l.file.clone(), l.line);
            if last_line.as_ref() != Some(&key) {
                out.push(line_text(l));
                last_line = Some(key);
            }
        }
        let marker = if p == pc { ">" } else { " " };
        out.push(format!("{marker}{}", listing_line(insns, p, maps)));
        p += if insns.get(p).is_some_and(|i| i.is_lddw()) {
            2
        } else {
            1
        };
    }
    out
}

impl VerifierError {
    /// The serialisable summary.
    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic {
            pc: self.pc,
            kind: self.kind.name(),
            message: self.kind.to_string(),
            source_line: self.source_line.clone(),
            listing: self.listing.clone(),
            regs: self.regs.clone(),
            hint: self.hint.clone(),
        }
    }

    /// Multi-line human-readable report: the listing with the error inline, the registers
    /// involved and the hint.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for l in &self.listing {
            s.push_str(l);
            if l.starts_with('>') {
                s.push_str(&format!("\n        ^ {}", self.kind));
            }
            s.push('\n');
        }
        if self.listing.is_empty() {
            s.push_str(&format!("insn {}: {}\n", self.pc, self.kind));
        }
        for r in &self.regs {
            s.push_str(&format!("  r{} = {}\n", r.reg, r.state));
        }
        if let Some(h) = &self.hint {
            s.push_str(&format!("hint: {h}\n"));
        }
        s
    }
}
