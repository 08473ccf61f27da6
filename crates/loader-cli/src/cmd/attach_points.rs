//! `gpubpf attach-points [NAME]`: the hookable CUDA driver functions, their exported symbols,
//! runtime aliases and ctx fields.

use std::fmt::Write as _;

use anyhow::Context as _;
use gpubpf_runtime::attach::{self, abi, AttachPoint, Category, CtxFieldInfo, Phase, Via};
use gpubpf_verifier::ctx::ReturnRule;
use serde_json::{json, Value};

use crate::output::Output;

/// Arguments of `gpubpf attach-points`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show one attach point in detail: a driver function (`cuMemAlloc`), an exported symbol
    /// (`cuMemAlloc_v2`) or a runtime alias (`cudaMalloc`).
    name: Option<String>,
    /// List only this category (alloc, free, meminfo, memcpy, memset, launch, graph, stream,
    /// context, module, device, other).
    #[arg(long)]
    category: Option<String>,
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    if let Some(name) = &args.name {
        let r = attach::lookup(name).context("cannot show attach point")?;
        if out.json() {
            let mut v = point_json(r.point);
            v["resolved_from"] = json!({ "name": name, "via": via_str(r.via) });
            return out.print_json(&v);
        }
        return write_stdout(&point_text(r.point, name, r.via));
    }
    if let Some(c) = args.category.as_deref() {
        if !CATEGORIES.iter().any(|k| k.as_str() == c) {
            let names: Vec<&str> = CATEGORIES.iter().map(|k| k.as_str()).collect();
            anyhow::bail!(
                "unknown category `{c}`; expected one of {}",
                names.join(", ")
            );
        }
    }
    let points: Vec<&AttachPoint> = attach::all()
        .iter()
        .filter(|p| {
            args.category
                .as_deref()
                .is_none_or(|c| p.category().as_str() == c)
        })
        .collect();
    if out.json() {
        let list: Vec<Value> = points.iter().map(|p| point_json(p)).collect();
        return out.print_json(&list);
    }
    write_stdout(&list_text(&points))
}

/// Prints `text`; a closed pipe (`gpubpf attach-points | head`) is not an error.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}

const CATEGORIES: [Category; 12] = [
    Category::Alloc,
    Category::Free,
    Category::MemInfo,
    Category::Memcpy,
    Category::Memset,
    Category::Launch,
    Category::Graph,
    Category::Stream,
    Category::Context,
    Category::Module,
    Category::Device,
    Category::Other,
];

fn bounds(r: &ReturnRule) -> (u64, u64) {
    match r {
        ReturnRule::Any => (0, u64::MAX),
        ReturnRule::Range { min, max } => (*min, *max),
    }
}

fn via_str(via: Via) -> &'static str {
    match via {
        Via::Base => "driver_function",
        Via::Symbol(_) => "exported_symbol",
        Via::Alias(_) => "runtime_alias",
    }
}

fn access_json(f: &CtxFieldInfo, phase: Phase) -> Value {
    let a = f.access(phase);
    json!({ "read": a.read, "write": a.write })
}

fn point_json(p: &AttachPoint) -> Value {
    let variants: Vec<Value> = p
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({
                "symbol": v.symbol,
                "cuda_version": v.version,
                "per_thread": match v.per_thread.as_str() { "" => Value::Null, s => json!(s) },
                "current": i == p.current,
                "same_abi": p.variant_has_current_abi(i),
            })
        })
        .collect();
    let aliases: Vec<Value> = p
        .aliases()
        .iter()
        .map(|a| json!({ "name": a.name, "primary": a.target == p.name }))
        .collect();
    let params: Vec<Value> = p
        .params()
        .iter()
        .enumerate()
        .map(|(i, q)| {
            json!({
                "name": q.name,
                "c_type": q.c_type,
                "class": q.class.as_str(),
                "slot": i,
            })
        })
        .collect();
    let fields: Vec<Value> = p
        .fields()
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "offset": f.offset,
                "size": f.size,
                "type": f.c_type,
                "cuda_type": f.cuda_type,
                "entry": access_json(f, Phase::Entry),
                "exit": access_json(f, Phase::Exit),
            })
        })
        .collect();
    let ret = |phase| {
        let (min, max) = bounds(&p.return_rule(phase));
        json!({ "min": min, "max": max })
    };
    json!({
        "id": p.id,
        "name": p.name,
        "category": p.category().as_str(),
        "sections": {
            "entry": p.section_name(Phase::Entry),
            "exit": p.section_name(Phase::Exit),
        },
        "variants": variants,
        "aliases": aliases,
        "params": params,
        "stream_param": p.stream_param(),
        "launch_source": p.launch_source().map(|s| s.as_str()),
        "ctx": { "size": p.ctx_size, "fields": fields },
        "returns": { "entry": ret(Phase::Entry), "exit": ret(Phase::Exit) },
        "c_structs": {
            "entry": format!("struct gpubpf_{}_entry", p.name),
            "exit": format!("struct gpubpf_{}_exit", p.name),
        },
    })
}

fn list_text(points: &[&AttachPoint]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4}  {:<44} {:<8} {:<6}  SYMBOLS  [ALIASES]",
        "ID", "NAME", "CATEGORY", "CTX"
    );
    for p in points {
        let symbols: Vec<String> = p
            .variants
            .iter()
            .map(|v| format!("{}@{}", v.symbol, v.version))
            .collect();
        // Related aliases (the runtime call may reach this function, but resolves elsewhere)
        // are marked with `~`.
        let aliases: Vec<String> = p
            .aliases()
            .iter()
            .map(|a| {
                if a.target == p.name {
                    a.name.to_string()
                } else {
                    format!("~{}", a.name)
                }
            })
            .collect();
        let _ = write!(
            s,
            "{:>4}  {:<44} {:<8} {:>4} B  {}",
            p.id,
            p.name,
            p.category().as_str(),
            p.ctx_size,
            symbols.join(" ")
        );
        if !aliases.is_empty() {
            let _ = write!(s, "  [{}]", aliases.join(", "));
        }
        s.push('\n');
    }
    let typed = points.iter().filter(|p| p.enrichment.is_some()).count();
    let _ = writeln!(
        s,
        "{} attach points ({} enriched), {} runtime aliases; CUDA headers {}. \
         `gpubpf attach-points NAME` shows the ctx fields.",
        points.len(),
        typed,
        attach::all_aliases().len(),
        attach::cuda_headers_version()
    );
    s
}

fn rw(read: bool, write: bool) -> &'static str {
    match (read, write) {
        (true, true) => "rw",
        (true, false) => "r-",
        (false, true) => "-w",
        (false, false) => "--",
    }
}

fn point_text(p: &AttachPoint, asked: &str, via: Via) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} (api id {}, {})", p.name, p.id, p.category().as_str());
    match via {
        Via::Alias(a) => {
            let _ = writeln!(s, "  `{asked}` is a runtime-API alias of `{}`", a.target);
            if !a.also.is_empty() {
                let _ = writeln!(s, "  `{asked}` may also reach: {}", a.also.join(", "));
            }
        }
        Via::Symbol(_) => {
            let _ = writeln!(s, "  `{asked}` is an exported symbol of `{}`", p.name);
        }
        Via::Base => {}
    }
    let _ = writeln!(
        s,
        "  sections: {} (entry), {} (exit)",
        p.section_name(Phase::Entry),
        p.section_name(Phase::Exit)
    );
    let _ = writeln!(
        s,
        "  C structs: struct gpubpf_{0}_entry, struct gpubpf_{0}_exit",
        p.name
    );
    s.push_str("  symbols:\n");
    for (i, v) in p.variants.iter().enumerate() {
        let mut notes = Vec::new();
        if i == p.current {
            notes.push("current");
        }
        if !v.per_thread.as_str().is_empty() {
            notes.push("per-thread stream");
        }
        if !p.variant_has_current_abi(i) {
            notes.push("older signature");
        }
        let _ = writeln!(
            s,
            "    {:<40} CUDA {:>5}  {}",
            v.symbol,
            v.version,
            notes.join(", ")
        );
    }
    if !p.aliases().is_empty() {
        let names: Vec<String> = p
            .aliases()
            .iter()
            .map(|a| {
                if a.target == p.name {
                    a.name.to_string()
                } else {
                    format!("{} (related; resolves to {})", a.name, a.target)
                }
            })
            .collect();
        let _ = writeln!(s, "  runtime aliases: {}", names.join(", "));
    }
    s.push_str("  parameters:\n");
    for q in p.params() {
        let _ = writeln!(
            s,
            "    {:<24} {:<40} {}",
            q.name,
            q.c_type,
            q.class.as_str()
        );
    }
    let _ = writeln!(s, "  ctx ({} bytes; entry / exit access):", p.ctx_size);
    for f in p.fields() {
        let _ = writeln!(
            s,
            "    {:>4} {:>2}  {:<28} {:<6} {}  {}  {}",
            f.offset,
            f.size,
            f.name,
            f.c_type,
            rw(f.entry.read, f.entry.write),
            rw(f.exit.read, f.exit.write),
            f.cuda_type.unwrap_or("")
        );
    }
    let (_, max) = bounds(&p.return_rule(Phase::Entry));
    let _ = writeln!(
        s,
        "  returns: entry 0 (proceed) or a CUresult 1..={max} (skip the call); exit 0"
    );
    let _ = writeln!(
        s,
        "  hdr.flags: capturing={:#x} per_thread_stream={:#x} legacy_abi={:#x} out_valid={:#x}",
        abi::FLAG_CAPTURING,
        abi::FLAG_PER_THREAD_STREAM,
        abi::FLAG_LEGACY_ABI,
        abi::FLAG_OUT_VALID
    );
    s
}
