//! The ctx ABI: what a program finds behind `r1`. Documented in `docs/ctx-abi.md`; the
//! offsets here are stable (changing one is an ABI break for compiled policies).
//!
//! ```text
//! offset  size  field           entry        exit
//!      0     4  hdr.api_id      read         read
//!      4     4  hdr.phase       read         read          0 = entry, 1 = exit
//!      8     4  hdr.device      read         read          device ordinal, -1 if unknown
//!     12     4  hdr.flags       read         read          GPUBPF_CTX_F_*
//!     16     4  hdr.pid         read         read
//!     20     4  hdr.tid         read         read
//!     24     4  hdr.result      read (0)     read, write   CUresult returned to the caller
//!     28     4  hdr.variant     read         read          index of the called symbol
//!     32   8*n  args.<param>    read, some   read          one 64-bit slot per parameter
//!                               writable
//!      …   8*9  launch.*        read         read          launch APIs only
//!      …   8*m  out.<param>     -            read, some    one slot per out-pointer param
//!                                            writable
//! ```

use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};

use super::catalog::{AttachPoint, Param, ParamClass};
use super::enrich::{Enrichment, LaunchSource};
use super::Phase;

/// Size of the fixed header; argument slots start here.
pub const HEADER_SIZE: u32 = 32;
/// Offset of the first argument slot.
pub const ARGS_OFFSET: u32 = HEADER_SIZE;
/// Byte offset of header field `name` in [`HEADER_FIELDS`] (evaluated at compile time; a
/// name that is not there fails the build).
const fn header_offset(name: &str) -> u32 {
    let mut i = 0;
    while i < HEADER_FIELDS.len() {
        let (field, offset, _, _) = HEADER_FIELDS[i];
        let (a, b) = (field.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut k = 0;
            while k < a.len() && a[k] == b[k] {
                k += 1;
            }
            if k == a.len() {
                return offset;
            }
        }
        i += 1;
    }
    panic!("no such header field")
}

/// The 64-bit word of the ctx that holds header field `low` in its low half and `high`
/// in its high half (how the shim builds a ctx: an array of words).
const fn header_word(low: &str, high: &str) -> usize {
    let offset = header_offset(low);
    assert!(offset % 8 == 0 && header_offset(high) == offset + 4);
    (offset / 8) as usize
}

/// Ctx word of `hdr.api_id` (low half) and `hdr.phase` (high half).
pub const W_API_ID_PHASE: usize = header_word("api_id", "phase");
/// Ctx word of `hdr.device` (low half) and `hdr.flags` (high half).
pub const W_DEVICE_FLAGS: usize = header_word("device", "flags");
/// Ctx word of `hdr.pid` (low half) and `hdr.tid` (high half).
pub const W_PID_TID: usize = header_word("pid", "tid");
/// Ctx word of `hdr.result` (low half) and `hdr.variant` (high half).
pub const W_RESULT_VARIANT: usize = header_word("result", "variant");

/// Size of every argument, launch and out-value slot.
pub const SLOT_SIZE: u32 = 8;

/// `hdr.phase` of entry programs.
pub const PHASE_ENTRY: u32 = 0;
/// `hdr.phase` of exit programs.
pub const PHASE_EXIT: u32 = 1;

/// `hdr.flags`: the call's stream is being captured into a graph (never delay or deny such a
/// launch).
pub const FLAG_CAPTURING: u32 = 1 << 0;
/// `hdr.flags`: the call came through a `_ptsz`/`_ptds` per-thread-default-stream symbol.
pub const FLAG_PER_THREAD_STREAM: u32 = 1 << 1;
/// `hdr.flags`: the called symbol has an older parameter list than the current variant;
/// argument slots were filled by parameter name, unmatched slots are zero.
pub const FLAG_LEGACY_ABI: u32 = 1 << 2;
/// `hdr.flags` (exit): the call succeeded and the `out.*` values were read back from the
/// application (a NULL out-pointer reads as zero).
pub const FLAG_OUT_VALID: u32 = 1 << 3;

/// Largest verdict an entry program may return: 0 lets the call proceed, `1..=999` skips
/// it and returns that `CUresult` (999 is `CUDA_ERROR_UNKNOWN`, the largest driver error).
pub const MAX_VERDICT: u64 = 999;

/// Header fields: (name, offset, C type, description).
pub const HEADER_FIELDS: [(&str, u32, &str, &str); 8] = [
    (
        "api_id",
        0,
        "__u32",
        "GPUBPF_API_* id of the hooked function",
    ),
    (
        "phase",
        4,
        "__u32",
        "GPUBPF_PHASE_ENTRY or GPUBPF_PHASE_EXIT",
    ),
    (
        "device",
        8,
        "__s32",
        "ordinal of the current context's device, -1 if none",
    ),
    ("flags", 12, "__u32", "GPUBPF_CTX_F_* bits"),
    ("pid", 16, "__u32", "process id"),
    ("tid", 20, "__u32", "thread id"),
    (
        "result",
        24,
        "__u32",
        "CUresult of the call (exit; 0 on entry); writable on exit to override it",
    ),
    (
        "variant",
        28,
        "__u32",
        "index of the called exported symbol in the attach point's variants",
    ),
];

/// Derived launch fields, filled from the arguments of `cuLaunchKernel`/
/// `cuLaunchCooperativeKernel` or from the `CUlaunchConfig` of `cuLaunchKernelEx`.
pub const LAUNCH_FIELDS: [(&str, &str); 9] = [
    ("grid_x", "grid dimension X (blocks)"),
    ("grid_y", "grid dimension Y"),
    ("grid_z", "grid dimension Z"),
    ("block_x", "block dimension X (threads)"),
    ("block_y", "block dimension Y"),
    ("block_z", "block dimension Z"),
    ("shared_mem_bytes", "dynamic shared memory per block"),
    ("stream", "CUstream of the launch"),
    ("function", "CUfunction (or CUkernel) launched"),
];

/// Which part of the ctx a field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// `hdr.*`
    Header,
    /// `args.*`
    Arg,
    /// `launch.*`
    Launch,
    /// `out.*`
    Out,
}

impl Section {
    /// `"hdr"`, `"args"`, `"launch"` or `"out"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Header => "hdr",
            Section::Arg => "args",
            Section::Launch => "launch",
            Section::Out => "out",
        }
    }
}

/// Read/write permission of a field in one phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Programs may load from the field.
    pub read: bool,
    /// Programs may store to the field.
    pub write: bool,
}

/// A ctx field with its type and per-phase access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxFieldInfo {
    /// Access path as in C: `hdr.result`, `args.bytesize`, `launch.grid_x`, `out.dptr`.
    pub name: String,
    /// Section of the ctx.
    pub section: Section,
    /// Byte offset.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// C type of the field in `gpubpf_ctx.h` (`__u32`, `__u64`, `__s64`).
    pub c_type: &'static str,
    /// Type of the underlying CUDA parameter or pointee (`size_t`, `CUstream`), if any.
    pub cuda_type: Option<&'static str>,
    /// Access on entry.
    pub entry: Access,
    /// Access on exit.
    pub exit: Access,
}

impl CtxFieldInfo {
    /// Access in `phase`.
    pub fn access(&self, phase: Phase) -> Access {
        match phase {
            Phase::Entry => self.entry,
            Phase::Exit => self.exit,
        }
    }
}

const RO: Access = Access {
    read: true,
    write: false,
};
const NONE: Access = Access {
    read: false,
    write: false,
};

fn slot_c_type(p: &Param) -> &'static str {
    if p.signed && matches!(p.class, ParamClass::Scalar | ParamClass::OutPointer) {
        "__s64"
    } else {
        "__u64"
    }
}

/// The pointee type of an out-pointer parameter (`size_t *` -> `size_t`).
fn pointee(c_type: &'static str) -> &'static str {
    c_type
        .strip_suffix('*')
        .map(str::trim_end)
        .unwrap_or(c_type)
}

fn slot_offset(index: usize) -> u32 {
    // At most a few dozen slots: the catalog has no function with more than 16 parameters.
    let index = u32::try_from(index).unwrap_or(u32::MAX / SLOT_SIZE / 2);
    ARGS_OFFSET + SLOT_SIZE * index
}

/// The total ctx size [`layout`] gives (without building its fields): one slot per
/// parameter, per launch field and per out-pointer.
pub(crate) fn ctx_size(params: &[Param], enrichment: Option<&Enrichment>) -> u32 {
    let launch = if enrichment.and_then(|e| e.launch).is_some() {
        LAUNCH_FIELDS.len()
    } else {
        0
    };
    let outs = params
        .iter()
        .filter(|p| p.class == ParamClass::OutPointer)
        .count();
    slot_offset(params.len() + launch + outs)
}

/// Computes the ctx fields for a function with `params` (its current variant) and optional
/// enrichment; they span [`ctx_size`] bytes.
pub(crate) fn layout(
    params: &'static [Param],
    enrichment: Option<&'static Enrichment>,
) -> Vec<CtxFieldInfo> {
    let mut fields = Vec::new();
    for (name, offset, c_type, _) in HEADER_FIELDS {
        let exit = Access {
            read: true,
            write: name == "result",
        };
        fields.push(CtxFieldInfo {
            name: format!("hdr.{name}"),
            section: Section::Header,
            offset,
            size: 4,
            c_type,
            cuda_type: None,
            entry: RO,
            exit,
        });
    }
    let writable_args = enrichment.map_or(&[][..], |e| e.writable_args);
    let writable_outs = enrichment.map_or(&[][..], |e| e.writable_outs);
    let mut slot = 0usize;
    for p in params {
        fields.push(CtxFieldInfo {
            name: format!("args.{}", p.name),
            section: Section::Arg,
            offset: slot_offset(slot),
            size: SLOT_SIZE,
            c_type: slot_c_type(p),
            cuda_type: Some(p.c_type),
            entry: Access {
                read: true,
                write: writable_args.contains(&p.name),
            },
            exit: RO,
        });
        slot += 1;
    }
    if enrichment.and_then(|e| e.launch).is_some() {
        for (name, _) in LAUNCH_FIELDS {
            fields.push(CtxFieldInfo {
                name: format!("launch.{name}"),
                section: Section::Launch,
                offset: slot_offset(slot),
                size: SLOT_SIZE,
                c_type: "__u64",
                cuda_type: None,
                entry: RO,
                exit: RO,
            });
            slot += 1;
        }
    }
    for p in params.iter().filter(|p| p.class == ParamClass::OutPointer) {
        fields.push(CtxFieldInfo {
            name: format!("out.{}", p.name),
            section: Section::Out,
            offset: slot_offset(slot),
            size: SLOT_SIZE,
            c_type: slot_c_type(p),
            cuda_type: Some(pointee(p.c_type)),
            entry: NONE,
            exit: Access {
                read: true,
                write: writable_outs.contains(&p.name),
            },
        });
        slot += 1;
    }
    debug_assert_eq!(slot_offset(slot), ctx_size(params, enrichment));
    fields
}

impl AttachPoint {
    /// Section name of programs for this point in `phase`: `cuda/<name>` or `cudaret/<name>`.
    pub fn section_name(&self, phase: Phase) -> String {
        format!("{}{}", phase.section_prefix(), self.name)
    }

    /// The ctx layout the verifier enforces in `phase`: every field of the ABI with its
    /// access in that phase (out-values are present but neither readable nor writable on
    /// entry, so that the verifier can name them in its error).
    pub fn ctx_layout(&self, phase: Phase) -> CtxLayout {
        CtxLayout {
            size: self.ctx_size,
            fields: self
                .fields()
                .iter()
                .map(|f| {
                    let a = f.access(phase);
                    CtxField {
                        name: f.name.clone(),
                        offset: f.offset,
                        size: f.size,
                        readable: a.read,
                        writable: a.write,
                    }
                })
                .collect(),
        }
    }

    /// The allowed return values in `phase`: entry programs return 0 (proceed) or a
    /// `CUresult` up to [`MAX_VERDICT`]; exit programs return 0 (they override the result
    /// by writing `hdr.result`).
    pub fn return_rule(&self, phase: Phase) -> ReturnRule {
        match phase {
            Phase::Entry => ReturnRule::Range {
                min: 0,
                max: MAX_VERDICT,
            },
            Phase::Exit => ReturnRule::Range { min: 0, max: 0 },
        }
    }

    /// Everything the verifier needs for a program attached here in `phase`.
    pub fn program_context(&self, phase: Phase) -> ProgramContext {
        ProgramContext {
            description: format!("{} ({})", self.section_name(phase), phase.as_str()),
            ctx: self.ctx_layout(phase),
            ret: self.return_rule(phase),
        }
    }

    /// Where the launch block comes from, for launch APIs.
    pub fn launch_source(&self) -> Option<LaunchSource> {
        self.enrichment.and_then(|e| e.launch)
    }
}
