//! The compilation pipeline: analysis → one Cranelift function per BPF function → machine
//! code → one W^X image with relocations applied, entered at function 0.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{ExternalName, TrapCode, UserFuncName};
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, FinalizedRelocTarget};
use cranelift_frontend::FunctionBuilderContext;
use gpubpf_isa::Insn;

use super::analysis::Analysis;
use super::code_memory::{ImageReloc, WritableCode};
use super::translate::{translate_function, CallTargets};
use super::{CompiledProgram, EntryFn, InlineMap, JitError};
use crate::helper_table::{HelperTable, RUN_ITERATION_BUDGET};

/// Function alignment in the code image.
const FUNC_ALIGN: usize = 16;

/// BPF functions with more instructions than this are compiled without Cranelift's egraph
/// optimiser (`opt_level = "none"`). On clang-generated BPF the egraph changes little (the
/// benchmark loops come out identical or one instruction longer), while it costs about 40 %
/// of compile time; large functions keep compile time under budget, small ones (every hot
/// policy we know of) get the full pipeline. See docs/jit.md.
pub const LARGE_FUNCTION_INSNS: usize = 256;

/// Compiles programs for the host. Reuses its Cranelift contexts between functions and
/// programs, so keep one per compiling thread.
pub struct JitCompiler {
    /// `opt_level = "speed"`.
    isa: OwnedTargetIsa,
    /// `opt_level = "none"`, for functions above [`LARGE_FUNCTION_INSNS`].
    isa_fast: OwnedTargetIsa,
    ctx: Context,
    fb_ctx: FunctionBuilderContext,
}

impl std::fmt::Debug for JitCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitCompiler")
            .field("isa", &self.isa.name())
            .field("triple", &self.isa.triple().to_string())
            .finish()
    }
}

/// Relocation of one compiled function, target still symbolic.
#[derive(Clone)]
struct FuncReloc {
    offset: u32,
    kind: Reloc,
    /// Index of the target function, or `None` for a target inside the same function.
    target_func: Option<usize>,
    target_offset: u32,
    addend: i64,
}

#[derive(Clone)]
struct CompiledFunc {
    code: Vec<u8>,
    relocs: Vec<FuncReloc>,
    /// `(offset, pc)` pairs of this function.
    srclocs: Vec<(u32, u32)>,
    explicit_traps: usize,
}

thread_local! {
    /// This thread's compiler, kept between programs: building the two ISAs costs about as
    /// much as compiling a small program, and a process compiles every loaded program at
    /// start-up and after every change. Boxed: an inline
    /// `JitCompiler` (about 8 KiB, an initialised image) would be copied into the static TLS
    /// of every thread an application under the shim creates, while only the thread that
    /// compiles (the shim's watcher) ever uses it.
    static COMPILER: std::cell::RefCell<Option<Box<JitCompiler>>> = const { std::cell::RefCell::new(None) };
}

/// Compiles `slots` with this thread's [`JitCompiler`] (created on first use; a fresh one
/// when it is busy, which only a nested call could make it).
pub fn compile(slots: &[Insn], helpers: &HelperTable) -> Result<CompiledProgram, JitError> {
    compile_with_maps(slots, helpers, &[])
}

/// [`compile`], inlining the lookups of the given maps ([`InlineMap`]).
pub fn compile_with_maps(
    slots: &[Insn],
    helpers: &HelperTable,
    maps: &[InlineMap],
) -> Result<CompiledProgram, JitError> {
    let cached = COMPILER.try_with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return None;
        };
        if c.is_none() {
            match JitCompiler::new() {
                Ok(j) => *c = Some(Box::new(j)),
                Err(e) => return Some(Err(e)),
            }
        }
        c.as_mut()
            .map(|j| j.compile_with_maps(slots, helpers, maps))
    });
    match cached {
        Ok(Some(r)) => r,
        // Busy, or the thread is exiting.
        _ => JitCompiler::new()?.compile_with_maps(slots, helpers, maps),
    }
}

impl JitCompiler {
    /// A compiler for the host CPU (optimising, no frame-pointer or unwind overhead).
    pub fn new() -> Result<Self, JitError> {
        Ok(Self {
            isa: host_isa("speed")?,
            isa_fast: host_isa("none")?,
            ctx: Context::new(),
            fb_ctx: FunctionBuilderContext::new(),
        })
    }

    fn call_conv(&self) -> CallConv {
        self.isa.default_call_conv()
    }

    /// Compiles a prepared, verified program (map `lddw`s already rewritten to immediates).
    ///
    /// Any input yields a program or an error value. The translator only emits IR the
    /// pre-pass proved well-formed; as a second line of defence a panic inside Cranelift is
    /// caught here, the reused contexts are reset, and it becomes [`JitError::Internal`].
    pub fn compile(
        &mut self,
        slots: &[Insn],
        helpers: &HelperTable,
    ) -> Result<CompiledProgram, JitError> {
        self.compile_with_maps(slots, helpers, &[])
    }

    /// [`JitCompiler::compile`], inlining the lookups of the given maps.
    pub fn compile_with_maps(
        &mut self,
        slots: &[Insn],
        helpers: &HelperTable,
        maps: &[InlineMap],
    ) -> Result<CompiledProgram, JitError> {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.compile_unguarded(slots, helpers, maps)
        }));
        match result {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => {
                // Translation may have stopped half-way through a function: start the next
                // compilation from clean contexts.
                self.reset();
                Err(e)
            }
            Err(_) => {
                tracing::error!("panic while compiling a program; contexts reset");
                self.reset();
                Err(JitError::Internal {
                    what: "panic in code generation",
                })
            }
        }
    }

    fn reset(&mut self) {
        self.ctx = Context::new();
        self.fb_ctx = FunctionBuilderContext::new();
    }

    fn compile_unguarded(
        &mut self,
        slots: &[Insn],
        helpers: &HelperTable,
        maps: &[InlineMap],
    ) -> Result<CompiledProgram, JitError> {
        let analysis = Analysis::new(slots)?;
        // Function 0 is entered with a signature of its own (`translate::entry_signature`):
        // a function value naming it could be called with the other one.
        if analysis.funcs.first().is_some_and(|f| f.address_taken) {
            return Err(JitError::EntryCalled);
        }
        let cc = self.call_conv();
        let nfuncs = analysis.funcs.len();
        let mut compiled = Vec::with_capacity(nfuncs);
        for idx in 0..nfuncs {
            self.ctx.clear();
            self.ctx.func.name = UserFuncName::user(0, idx as u32);
            translate_function(
                &mut self.ctx.func,
                &mut self.fb_ctx,
                &analysis,
                idx,
                &CallTargets { helpers, maps },
                cc,
                self.isa.frontend_config(),
            )?;
            let large = analysis.func_insns(idx).len() > LARGE_FUNCTION_INSNS;
            compiled.push(self.codegen(idx, large)?);
        }
        link(compiled)
    }

    /// Compiles the function in `self.ctx` to machine code (`large`: without the egraph).
    fn codegen(&mut self, func: usize, large: bool) -> Result<CompiledFunc, JitError> {
        let names = self.ctx.func.params.user_named_funcs().clone();
        let code = self
            .ctx
            .compile(
                if large { &*self.isa_fast } else { &*self.isa },
                &mut ControlPlane::default(),
            )
            .map_err(|e| JitError::Codegen {
                func,
                message: format!("{:?}", e.inner),
            })?;
        let buf = &code.buffer;
        let mut relocs = Vec::with_capacity(buf.relocs().len());
        for r in buf.relocs() {
            let (target_func, target_offset) = match &r.target {
                FinalizedRelocTarget::ExternalName(ExternalName::User(n)) => {
                    let idx = names.get(*n).map(|u| u.index).ok_or(JitError::Internal {
                        what: "relocation to an undeclared function",
                    })?;
                    (Some(idx as usize), 0)
                }
                FinalizedRelocTarget::Func(off) => (None, *off),
                _ => {
                    return Err(JitError::Relocation {
                        kind: format!("{:?} to {:?}", r.kind, r.target),
                        offset: r.offset as usize,
                    })
                }
            };
            relocs.push(FuncReloc {
                offset: r.offset,
                kind: r.kind,
                target_func,
                target_offset,
                addend: r.addend,
            });
        }
        let srclocs = buf
            .get_srclocs_sorted()
            .iter()
            .filter(|s| !s.loc.is_default())
            .map(|s| (s.start, s.loc.bits()))
            .collect();
        let explicit_traps = buf
            .traps()
            .iter()
            .filter(|t| t.code != TrapCode::INTEGER_DIVISION_BY_ZERO)
            .count();
        Ok(CompiledFunc {
            code: buf.data().to_vec(),
            relocs,
            srclocs,
            explicit_traps,
        })
    }
}

/// The host ISA with the given Cranelift `opt_level`.
fn host_isa(opt_level: &str) -> Result<OwnedTargetIsa, JitError> {
    let host = |e: &dyn std::fmt::Display| JitError::HostIsa {
        message: e.to_string(),
    };
    let mut flags = settings::builder();
    let verifier = if cfg!(debug_assertions) {
        "true"
    } else {
        "false"
    };
    for (k, v) in [
        ("opt_level", opt_level),
        ("enable_verifier", verifier),
        ("enable_probestack", "false"),
        ("unwind_info", "false"),
        ("is_pic", "false"),
    ] {
        flags.set(k, v).map_err(|e| host(&e))?;
    }
    cranelift_native::builder()
        .map_err(|e| host(&e))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| host(&e))
}

/// Lays the functions out in one image, applies relocations and makes it executable.
fn link(funcs: Vec<CompiledFunc>) -> Result<CompiledProgram, JitError> {
    // Function 0, the entry point every run calls, first; subprograms in slot order.
    let mut offsets = vec![0usize; funcs.len()];
    let mut size = 0usize;
    for i in 0..funcs.len() {
        let f = funcs.get(i).ok_or(JitError::Internal {
            what: "code layout",
        })?;
        size = size
            .checked_next_multiple_of(FUNC_ALIGN)
            .ok_or(JitError::CodeTooLarge { bytes: size })?;
        if let Some(o) = offsets.get_mut(i) {
            *o = size;
        }
        size = size
            .checked_add(f.code.len())
            .ok_or(JitError::CodeTooLarge { bytes: size })?;
    }
    if u32::try_from(size).is_err() {
        return Err(JitError::CodeTooLarge { bytes: size });
    }
    let mut mem = WritableCode::new(size)?;
    let mut relocs = Vec::new();
    let mut pc_map = Vec::new();
    let mut explicit_trap_sites = 0;
    {
        let bytes = mem.bytes_mut();
        for (i, f) in funcs.iter().enumerate() {
            let base = offsets.get(i).copied().unwrap_or(0);
            let dst = bytes
                .get_mut(base..base + f.code.len())
                .ok_or(JitError::Internal {
                    what: "code layout",
                })?;
            dst.copy_from_slice(&f.code);
            for r in &f.relocs {
                let target = match r.target_func {
                    Some(t) => *offsets.get(t).ok_or(JitError::Internal {
                        what: "relocation to a missing function",
                    })?,
                    None => base + r.target_offset as usize,
                };
                relocs.push(ImageReloc {
                    at: base + r.offset as usize,
                    kind: r.kind,
                    target,
                    addend: r.addend,
                });
            }
            pc_map.extend(f.srclocs.iter().map(|(o, pc)| (base as u32 + o, *pc)));
            explicit_trap_sites += f.explicit_traps;
        }
    }
    mem.apply_relocs(&relocs)?;
    let code = mem.into_executable()?;
    let entry_off = offsets.first().copied().ok_or(JitError::Internal {
        what: "a program without functions",
    })?;
    // SAFETY: `entry_off` is the start of function 0, compiled with the host's default
    // calling convention and `translate::entry_signature`, which is `EntryFn` in C (see
    // there).
    let entry: EntryFn = unsafe { std::mem::transmute::<*const u8, EntryFn>(code.addr(entry_off)) };
    pc_map.sort_unstable();
    // Sizes fit in u32 (checked above).
    let ranges = funcs
        .iter()
        .zip(&offsets)
        .map(|(f, &o)| o as u32..(o + f.code.len()) as u32)
        .collect();
    Ok(CompiledProgram {
        code,
        entry,
        code_size: size,
        functions: funcs.len(),
        function_ranges: ranges,
        pc_map,
        explicit_trap_sites,
        iteration_budget: RUN_ITERATION_BUDGET,
    })
}
