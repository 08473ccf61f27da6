//! Generator of `generated.rs`: one exported wrapper per exported driver symbol of the
//! attach catalog, plus the tables the routing code needs. The catalog
//! (`gpubpf_runtime::attach`) is the single source: the test at the bottom fails when the
//! checked-in file differs from what this generator writes now, and rewrites it with
//! `GPUBPF_BLESS=1`.
//!
//! What a wrapper does is described in `hot.rs`; here is only how its text is made:
//! parameter types from the catalog's C types and classes (integers by size and sign,
//! `float`, pointers, the by-value structures of `abi_types.rs`), argument slots at the
//! offsets the ctx ABI fixes (older variants filled by parameter name), the launch block,
//! out-values read after a successful call, and write-backs of writable arguments and
//! out-values.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpubpf_runtime::attach::{self, abi, AttachPoint, LaunchSource, Param, ParamClass, PerThread};

use crate::abi_types::BY_VALUE;

/// Symbols whose real call goes through a routing function of `route.rs` (which calls the
/// real resolver and substitutes wrappers), with that function's name.
/// Names the generated wrappers bind besides their parameters.
const WRAPPER_LOCALS: [&str; 8] = [
    "real_fn",
    "c",
    "r",
    "policed",
    "out_valid",
    "verdict",
    "V",
    "Real",
];

const ROUTED: [(&str, &str); 2] = [
    ("cuGetProcAddress", "crate::route::get_proc_address"),
    ("cuGetProcAddress_v2", "crate::route::get_proc_address_v2"),
];

/// Symbols whose call may free kernels (their module, library or context): the real call
/// runs under `gpubpf_runtime::helpers::kernel::unloading()`, which keeps the kernel-name
/// cache from answering or keeping names meanwhile and empties it afterwards
/// (`helpers/kernel_cache.rs`).
const UNLOADS_KERNELS: [&str; 9] = [
    "cuModuleUnload",
    "cuLibraryUnload",
    "cuCtxDestroy",
    "cuCtxDestroy_v2",
    "cuGreenCtxDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset",
    "cuDevicePrimaryCtxReset_v2",
];

/// Launch fields (`abi::LAUNCH_FIELDS` order) and the `cuLaunchKernel` parameter each is
/// copied from when the launch block comes from the arguments.
const LAUNCH_FROM_ARGS: [(&str, &str); 9] = [
    ("grid_x", "gridDimX"),
    ("grid_y", "gridDimY"),
    ("grid_z", "gridDimZ"),
    ("block_x", "blockDimX"),
    ("block_y", "blockDimY"),
    ("block_z", "blockDimZ"),
    ("shared_mem_bytes", "sharedMemBytes"),
    ("stream", "hStream"),
    ("function", "f"),
];

const KEYWORDS: [&str; 12] = [
    "type", "ref", "fn", "mod", "in", "impl", "match", "move", "self", "struct", "use", "loop",
];

fn ident(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

/// How one parameter crosses the C ABI and fills its slot.
#[derive(Clone, Copy)]
enum Kind {
    Ptr,
    Unsigned(&'static str),
    Signed(&'static str),
    Float,
    ByValue(&'static str),
}

fn kind(p: &Param) -> Kind {
    match p.class {
        ParamClass::Handle
        | ParamClass::OutPointer
        | ParamClass::InStruct
        | ParamClass::RawPointer => Kind::Ptr,
        ParamClass::StructByValue => {
            let (_, rust, size) = BY_VALUE
                .iter()
                .find(|(c, _, _)| *c == p.c_type)
                .unwrap_or_else(|| {
                    panic!(
                        "by-value C type `{}` has no Rust definition: add it to abi_types.rs",
                        p.c_type
                    )
                });
            assert_eq!(
                *size,
                usize::from(p.value_size),
                "size of `{}` differs from the catalog",
                p.c_type
            );
            Kind::ByValue(rust)
        }
        ParamClass::Scalar if p.c_type == "float" => Kind::Float,
        ParamClass::Scalar => match (p.value_size, p.signed) {
            (1, false) => Kind::Unsigned("u8"),
            (2, false) => Kind::Unsigned("u16"),
            (4, false) => Kind::Unsigned("u32"),
            (8, false) => Kind::Unsigned("u64"),
            (4, true) => Kind::Signed("i32"),
            (8, true) => Kind::Signed("i64"),
            (size, signed) => panic!(
                "scalar `{}` of {size} bytes (signed: {signed}) has no wrapper type",
                p.c_type
            ),
        },
    }
}

fn rust_type(k: Kind) -> &'static str {
    match k {
        Kind::Ptr => "*mut c_void",
        Kind::Unsigned(t) | Kind::Signed(t) => t,
        Kind::Float => "f32",
        Kind::ByValue(t) => t,
    }
}

/// Expression of the 64-bit slot value of argument `name`.
fn to_slot(k: Kind, name: &str) -> String {
    match k {
        Kind::Ptr => format!("{name} as u64"),
        Kind::Unsigned("u64") => name.to_string(),
        Kind::Unsigned(_) => format!("u64::from({name})"),
        Kind::Signed("i64") => format!("{name} as u64"),
        Kind::Signed(_) => format!("i64::from({name}) as u64"),
        Kind::Float => format!("u64::from({name}.to_bits())"),
        Kind::ByValue(_) => format!("core::ptr::addr_of!({name}) as u64"),
    }
}

/// Expression converting slot `c[i]` back to the argument's type (writable arguments).
fn from_slot(k: Kind, i: usize) -> String {
    match k {
        Kind::Ptr => format!("c[{i}] as *mut c_void"),
        Kind::Unsigned("u64") => format!("c[{i}]"),
        Kind::Unsigned(t) | Kind::Signed(t) => format!("c[{i}] as {t}"),
        Kind::Float => format!("f32::from_bits(c[{i}] as u32)"),
        Kind::ByValue(t) => panic!("by-value `{t}` cannot be a writable argument"),
    }
}

fn word(offset: u32) -> usize {
    assert_eq!(offset % abi::SLOT_SIZE, 0, "ctx fields are 8-byte slots");
    (offset / abi::SLOT_SIZE) as usize
}

fn field_word(point: &AttachPoint, name: &str) -> Option<usize> {
    point.field(name).map(|f| word(f.offset))
}

/// One wrapper.
fn wrapper(out: &mut String, point_index: usize, point: &AttachPoint, vi: usize, global: usize) {
    let v = &point.variants[vi];
    let params: Vec<(String, Kind, &Param)> = v
        .params
        .iter()
        .map(|p| (ident(p.name), kind(p), p))
        .collect();
    let sig: Vec<String> = params
        .iter()
        .map(|(n, k, _)| format!("{n}: {}", rust_type(*k)))
        .collect();
    let sig = sig.join(", ");
    let types: Vec<&str> = params.iter().map(|(_, k, _)| rust_type(*k)).collect();
    let types = types.join(", ");
    let args: Vec<&str> = params.iter().map(|(n, _, _)| n.as_str()).collect();
    let args = args.join(", ");
    // A C parameter named like a local of the wrapper would shadow it (a parameter `f`
    // once received the real function's address instead of the CUfunction).
    for (n, _, _) in &params {
        assert!(
            !WRAPPER_LOCALS.contains(&n.as_str()),
            "`{}` has a parameter `{n}`, which the wrapper's locals would shadow",
            v.symbol
        );
    }
    let routed = ROUTED.iter().find(|(s, _)| *s == v.symbol).map(|(_, f)| *f);
    let unloads = UNLOADS_KERNELS.contains(&v.symbol);
    let real_call = |indent: &str| {
        let guard = if unloads {
            format!(
                "{indent}// Kernel names cached before this call die with it (helpers/kernel_cache.rs).\n\
                 {indent}let _unloading = gpubpf_runtime::helpers::kernel::unloading();\n"
            )
        } else {
            String::new()
        };
        guard + &match routed {
        Some(f) => format!(
            "{indent}// SAFETY: `real_fn` is the driver's `{sym}`, whose C signature is this \
             function's.\n{indent}unsafe {{ {f}(real_fn, {args}) }}",
            sym = v.symbol
        ),
        None => format!(
            "{indent}// SAFETY: `real_fn` is the driver's `{sym}`, whose C signature is this \
             function's.\n{indent}unsafe {{ core::mem::transmute::<*mut c_void, Real>(real_fn)({args}) }}",
            sym = v.symbol
        ),
    }
    };
    let mut flags = 0u32;
    if v.per_thread != PerThread::No {
        flags |= abi::FLAG_PER_THREAD_STREAM;
    }
    if !point.variant_has_current_abi(vi) {
        flags |= abi::FLAG_LEGACY_ABI;
    }
    let words = word(point.ctx_size);
    let _ = writeln!(
        out,
        "\n/// `{}`: variant {vi} of `{}` (attach point {point_index}, api id {}).",
        v.symbol, point.name, point.id
    );
    let _ = writeln!(out, "#[no_mangle]");
    let _ = writeln!(
        out,
        "pub unsafe extern \"C\" fn {}({sig}) -> CUresult {{",
        v.symbol
    );
    if routed.is_none() {
        let _ = writeln!(
            out,
            "    type Real = unsafe extern \"C\" fn({types}) -> CUresult;"
        );
    }
    let _ = writeln!(out, "    const V: usize = {global};");
    // Straight to the driver: nothing attached here, or (after `hot::enter` said so) a
    // re-entrant call, a thread being torn down, or a call with nothing to do at exit.
    let unpoliced = |out: &mut String| {
        let _ = writeln!(out, "        return match hot::real(V) {{");
        let _ = writeln!(out, "            Some(real_fn) => {{");
        let _ = writeln!(out, "{}", real_call("                "));
        let _ = writeln!(out, "            }}");
        let _ = writeln!(out, "            None => hot::NO_DRIVER,");
        let _ = writeln!(out, "        }};");
    };
    let _ = writeln!(out, "    if !hot::armed({point_index}) {{");
    unpoliced(out);
    let _ = writeln!(out, "    }}");
    // The ctx is one array literal: the header's constant words (api id; flags with the
    // device unknown, -1; variant: `hot::enter` fills in pid and tid, and the device or
    // the capturing flag where a program reads them), argument slots, launch block, zeros
    // for the rest (out-values), so that no word is stored twice.
    let mut init: Vec<String> = (0..words).map(|_| "0".to_string()).collect();
    for (w, value) in crate::hot::header_constants(point.id, vi as u32, flags) {
        if let Some(e) = init.get_mut(w) {
            *e = format!("{value:#x}");
        }
    }
    // Argument slots, by name in the current variant.
    let slots = point.variant_slots(vi).expect("variant index in range");
    let mut writable = Vec::new();
    let mut outs = Vec::new();
    for ((name, k, p), slot) in params.iter().zip(&slots) {
        let Some(slot) = slot else { continue };
        let w = word(abi::ARGS_OFFSET) + slot;
        if let Some(e) = init.get_mut(w) {
            *e = to_slot(*k, name);
        }
        let arg_field = point
            .field(&format!("args.{}", p.name))
            .expect("argument field of a matched slot");
        if arg_field.entry.write {
            writable.push((name.clone(), *k, w));
        }
        if p.class == ParamClass::OutPointer {
            if let Some(f) = point.field(&format!("out.{}", p.name)) {
                outs.push((
                    name.clone(),
                    p.value_size,
                    p.signed,
                    word(f.offset),
                    f.exit.write,
                ));
            }
        }
    }
    let mut copy_word = |dst: usize, src: usize| {
        let e = init.get(src).cloned().expect("argument word in the ctx");
        if let Some(d) = init.get_mut(dst) {
            *d = e;
        }
    };
    match point.launch_source() {
        Some(LaunchSource::Args) => {
            for (field, param) in LAUNCH_FROM_ARGS {
                let dst = field_word(point, &format!("launch.{field}")).expect("launch field");
                if let Some(src) = field_word(point, &format!("args.{param}")) {
                    copy_word(dst, src);
                }
            }
        }
        Some(LaunchSource::Config) => {
            let function = field_word(point, "launch.function").expect("launch field");
            if let Some(src) = field_word(point, "args.f") {
                copy_word(function, src);
            }
        }
        None => {}
    }
    let _ = writeln!(
        out,
        "    let mut c: [u64; {words}] = [{}];",
        init.join(", ")
    );
    match point.launch_source() {
        Some(LaunchSource::Config) => {
            let first = field_word(point, "launch.grid_x").expect("launch field");
            let stream = field_word(point, "launch.stream").expect("launch field");
            let config = params
                .iter()
                .find(|(_, _, p)| p.name == "config")
                .map(|(n, _, _)| n.clone())
                .expect("cuLaunchKernelEx-like points have `config`");
            let _ = writeln!(
                out,
                "    // SAFETY: `{config}` is the caller's launch configuration or NULL."
            );
            let _ = writeln!(
                out,
                "    unsafe {{ hot::launch_from_config({config}, &mut c[{first}..={stream}]) }};"
            );
        }
        Some(LaunchSource::Args) | None => {}
    }
    // The call's stream, for `GPUBPF_CTX_F_CAPTURING` (asked only when a program reads
    // `hdr.flags`; a per-thread variant's NULL stream is the per-thread default stream).
    let stream = match point.launch_source() {
        Some(LaunchSource::Config) => Some(format!(
            "c[{}] as *mut c_void",
            field_word(point, "launch.stream").expect("launch field")
        )),
        _ => point
            .stream_param()
            .and_then(|i| point.params().get(i))
            .and_then(|sp| params.iter().find(|(_, _, p)| p.name == sp.name))
            .map(|(n, _, _)| n.clone()),
    };
    let stream = match stream {
        Some(stream) => {
            let per_thread = v.per_thread != PerThread::No;
            if stream != "stream" {
                // A local first: the expression may read `c`, which the call borrows.
                let _ = writeln!(out, "    let stream = {stream};");
            }
            format!("Some((stream, {per_thread}))")
        }
        None => "None".to_string(),
    };
    let _ = writeln!(out, "    let mut out_valid = false;");
    let _ = writeln!(
        out,
        "    let Some(policed) = hot::enter({point_index}, &mut c, {stream}) else {{"
    );
    // The call is over for the shim: to the driver with the arguments in their slots
    // (entry programs may have rewritten the writable ones), its result returned as it is.
    for (name, k, w) in &writable {
        let _ = writeln!(out, "        let {name} = {};", from_slot(*k, *w));
    }
    unpoliced(out);
    let _ = writeln!(out, "    }};");
    let _ = writeln!(out, "    let r = match policed.refusal() {{");
    let _ = writeln!(out, "        Some(verdict) => verdict,");
    let _ = writeln!(out, "        None => match hot::real(V) {{");
    let _ = writeln!(out, "            None => hot::NO_DRIVER,");
    let _ = writeln!(out, "            Some(real_fn) => {{");
    for (name, k, w) in &writable {
        let _ = writeln!(out, "                let {name} = {};", from_slot(*k, *w));
    }
    let _ = writeln!(out, "                let r = {{");
    let _ = writeln!(out, "{}", real_call("                    "));
    let _ = writeln!(out, "                }};");
    let _ = writeln!(out, "                if r == 0 {{");
    let _ = writeln!(out, "                    out_valid = true;");
    for (name, size, signed, w, _) in &outs {
        let _ = writeln!(
            out,
            "                    // SAFETY: the call succeeded: `{name}` is where the driver \
             wrote its result, or NULL."
        );
        let _ = writeln!(
            out,
            "                    c[{w}] = unsafe {{ hot::read_out({name}, {size}, {signed}) }};"
        );
    }
    let _ = writeln!(out, "                }}");
    let _ = writeln!(out, "                r");
    let _ = writeln!(out, "            }}");
    let _ = writeln!(out, "        }},");
    let _ = writeln!(out, "    }};");
    let write_back: Vec<_> = outs.iter().filter(|o| o.4).collect();
    if write_back.is_empty() {
        let _ = writeln!(out, "    policed.exit(&mut c, r, out_valid)");
        let _ = writeln!(out, "}}");
        return;
    }
    let _ = writeln!(out, "    let r = policed.exit(&mut c, r, out_valid);");
    {
        let _ = writeln!(out, "    if out_valid && r == 0 {{");
        for (name, size, _, w, _) in write_back {
            let _ = writeln!(
                out,
                "        // SAFETY: as above; exit programs may rewrite this out-value."
            );
            let _ = writeln!(
                out,
                "        unsafe {{ hot::write_out({name}, {size}, c[{w}]) }};"
            );
        }
        let _ = writeln!(out, "    }}");
    }
    let _ = writeln!(out, "    r");
    let _ = writeln!(out, "}}");
}

/// The text of `generated.rs`.
pub fn generate() -> String {
    let points = attach::all();
    let mut out = String::new();
    out.push_str(
        "// @generated by crates/shim/src/codegen.rs from the attach catalog \
         (gpubpf_runtime::attach).\n\
         // Do not edit: `GPUBPF_BLESS=1 cargo test -p gpubpf-shim generated` rewrites it.\n\n\
         //! One exported wrapper per exported driver symbol of the catalog, and the tables\n\
         //! the routing code uses (symbols, wrapper addresses, attach point of each variant).\n\n\
         #![allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]\n\
         #![allow(clippy::unnecessary_cast, clippy::identity_op)]\n\n\
         use core::ffi::c_void;\n\n\
         use crate::abi_types::*;\n\
         use crate::hot;\n",
    );
    let mut entries = Vec::new();
    let mut global = 0usize;
    for (pi, p) in points.iter().enumerate() {
        for vi in 0..p.variants.len() {
            wrapper(&mut out, pi, p, vi, global);
            entries.push((p.variants[vi].symbol, pi, global));
            global += 1;
        }
    }
    let ctx_get_device = entries
        .iter()
        .find(|(s, _, _)| *s == "cuCtxGetDevice")
        .map(|e| e.2)
        .expect("catalog has cuCtxGetDevice");
    let _ = writeln!(out, "\n/// Number of attach points.");
    let _ = writeln!(out, "pub const POINT_COUNT: usize = {};", points.len());
    let _ = writeln!(out, "/// Number of exported symbols (variants).");
    let _ = writeln!(out, "pub const VARIANT_COUNT: usize = {};", entries.len());
    let _ = writeln!(
        out,
        "/// Variant index of `cuCtxGetDevice` (fills `hdr.device`)."
    );
    let _ = writeln!(out, "pub const CTX_GET_DEVICE: usize = {ctx_get_device};");
    let is_capturing = entries
        .iter()
        .find(|(s, _, _)| *s == "cuStreamIsCapturing")
        .map(|e| e.2)
        .expect("catalog has cuStreamIsCapturing");
    let _ = writeln!(
        out,
        "/// Variant index of `cuStreamIsCapturing` (sets `GPUBPF_CTX_F_CAPTURING`)."
    );
    let _ = writeln!(
        out,
        "pub const STREAM_IS_CAPTURING: usize = {is_capturing};"
    );
    let _ = writeln!(
        out,
        "\n/// API id of each attach point, by attach-point index."
    );
    let _ = writeln!(out, "pub static POINT_IDS: [u32; POINT_COUNT] = [");
    for p in points {
        let _ = writeln!(out, "    {}, // {}", p.id, p.name);
    }
    let _ = writeln!(out, "];");
    let _ = writeln!(out, "\n/// Every exported symbol, by variant index.");
    let _ = writeln!(
        out,
        "pub static VARIANTS: [hot::VariantEntry; VARIANT_COUNT] = ["
    );
    for (sym, pi, _) in &entries {
        let _ = writeln!(
            out,
            "    hot::VariantEntry {{ symbol: c\"{sym}\", point: {pi}, wrapper: hot::Wrapper({sym} as *const c_void) }},"
        );
    }
    let _ = writeln!(out, "];");
    let mut sorted: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (sym, _, g) in &entries {
        assert!(
            sorted.insert(sym.as_bytes(), *g).is_none(),
            "symbol `{sym}` exported twice"
        );
    }
    let _ = writeln!(
        out,
        "\n/// (symbol, variant index), sorted by the symbol's bytes (binary search)."
    );
    let _ = writeln!(
        out,
        "pub static BY_SYMBOL: [(&[u8], u16); VARIANT_COUNT] = ["
    );
    for (sym, g) in sorted {
        let sym = std::str::from_utf8(sym).expect("ascii symbol");
        let _ = writeln!(out, "    (b\"{sym}\", {g}),");
    }
    let _ = writeln!(out, "];");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_wrappers_are_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated.rs");
        let want = generate();
        if std::env::var_os("GPUBPF_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write generated.rs");
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: run `GPUBPF_BLESS=1 cargo test -p gpubpf-shim generated` and review \
             the diff",
            path.display()
        );
    }

    #[test]
    fn by_value_structs_and_floats_have_their_c_abi_types() {
        let mut by_value = 0;
        let mut floats = 0;
        for p in attach::all() {
            for v in p.variants {
                for param in v.params {
                    match kind(param) {
                        Kind::ByValue(_) => by_value += 1,
                        Kind::Float => floats += 1,
                        _ => {}
                    }
                }
            }
        }
        // By value: CUmemLocation (cuMemPrefetchAsync_v2 and its _ptsz), CUipcMemHandle
        // (cuIpcOpenMemHandle and _v2), CUipcEventHandle, CUeglFrame
        // (cuEGLStreamProducerPresentFrame). `float`: cuParamSetf, cuTexRefSetMipmapLevelBias
        // and cuTexRefSetMipmapLevelClamp (two), as CUDA 13.5 declares them.
        assert_eq!((by_value, floats), (7, 4));
    }

    /// Every symbol named as unloading kernels is a catalogued variant, whose wrapper holds
    /// the guard (a misspelt name would silently leave the kernel-name cache stale).
    #[test]
    fn the_kernel_unloading_symbols_are_catalogued_and_guarded() {
        let text = generate();
        for sym in UNLOADS_KERNELS {
            assert!(
                attach::all()
                    .iter()
                    .any(|p| p.variants.iter().any(|v| v.symbol == sym)),
                "{sym} is not a catalogued variant"
            );
            let start = text
                .find(&format!("pub unsafe extern \"C\" fn {sym}("))
                .expect("wrapper generated");
            let end = text[start..]
                .find("\n}\n")
                .map_or(text.len(), |e| start + e);
            assert_eq!(
                text[start..end]
                    .matches("helpers::kernel::unloading()")
                    .count(),
                3,
                "{sym}: the guard around each of its three real calls"
            );
        }
        assert_eq!(
            text.matches("helpers::kernel::unloading()").count(),
            3 * UNLOADS_KERNELS.len()
        );
    }
}
