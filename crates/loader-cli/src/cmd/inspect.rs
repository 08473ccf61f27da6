//! `gpubpf inspect OBJ`: what the loader understood of an object file.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use gpubpf_runtime::object::{render_value, Object, ObjectError};
use serde_json::{json, Value};

use crate::exit::{self, CliError};
use crate::output::Output;

/// Arguments of `gpubpf inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object file (`clang -target bpf` output).
    pub object: PathBuf,
    /// Set a global before showing values, as `gpubpf load` would (`--set limit_bytes=8GiB`).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
}

/// Reads and parses an object, turning loader errors into exit code 4.
pub fn load_object(path: &Path) -> anyhow::Result<Object> {
    read_object(path).map(|(_, obj)| obj)
}

/// [`load_object`], also returning the object's bytes.
pub fn read_object(path: &Path) -> anyhow::Result<(Vec<u8>, Object)> {
    let bytes = std::fs::read(path).map_err(|e| CliError {
        code: exit::BAD_OBJECT,
        message: format!("cannot read `{}`: {e}", path.display()),
        json: Some(json!({ "path": path.display().to_string(), "kind": "io" })),
    })?;
    let obj = Object::parse(&bytes).map_err(|e: ObjectError| {
        // A newcomer's first mistake: handing the C source to a command that takes objects.
        let hint = if !bytes.starts_with(b"\x7fELF")
            && path.extension().is_some_and(|x| x == "c" || x == "h")
        {
            format!(
                " (`{}` is C source: compile it with `gpubpf build {}` first)",
                path.display(),
                path.display()
            )
        } else {
            super::object_hint(&e)
                .map(|h| format!(" ({h})"))
                .unwrap_or_default()
        };
        CliError {
            code: exit::BAD_OBJECT,
            message: format!("`{}`: {e}{hint}", path.display()),
            json: Some(json!({ "path": path.display().to_string(), "kind": "object", "message": e.to_string() })),
        }
    })?;
    Ok((bytes, obj))
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let mut obj = load_object(&args.object)?;
    obj.apply_sets(&args.set)
        .with_context(|| format!("`{}`: --set", args.object.display()))?;
    let report = describe(&obj);
    if out.json() {
        out.print_json(&report)
    } else {
        print!("{}", render_text(&args.object, &report));
        Ok(())
    }
}

/// The JSON description of an object (also the source of the text form).
pub fn describe(obj: &Object) -> Value {
    let btf = obj.btf.as_ref();
    let programs: Vec<Value> = obj
        .programs
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "section": p.section,
                "attach": (!p.attach.is_empty()).then_some(&p.attach),
                "attach_id": p.attach_id,
                "phase": p.phase.as_str(),
                "insns": p.insns.len(),
                "entry_insns": p.entry_len,
                "subprograms": p.subprograms,
                "line_info": {
                    "records": p.line_info.len(),
                    "covered_insns": p.line_coverage(),
                },
            })
        })
        .collect();
    // Types spelled as `maps show` spells them, from the same descriptions.
    let defs = gpubpf_runtime::program::map_defs(obj);
    let c_name = |t: Option<&gpubpf_runtime::maps::TypeDesc>| t.map(|t| t.c_name());
    let maps: Vec<Value> = obj
        .maps
        .iter()
        .zip(&defs)
        .map(|(m, d)| {
            json!({
                "name": m.name,
                "type": m.kind.name(),
                "key_size": m.key_size,
                "value_size": m.value_size,
                "max_entries": m.max_entries,
                "flags": m.flags,
                "key_type": c_name(d.meta.key_type.as_ref()),
                "value_type": c_name(d.meta.value_type.as_ref()),
                "origin": m.origin,
                "pinned": m.pinned,
            })
        })
        .collect();
    let globals: Vec<Value> = obj
        .globals
        .iter()
        .map(|g| {
            let current = obj.global_value(g).unwrap_or(&g.default);
            json!({
                "name": g.name,
                "section": g.section,
                "offset": g.offset,
                "size": g.size,
                "type": g.type_name,
                "default": g.default_display(btf),
                "value": render_value(current, g.btf_type, btf),
                "settable": g.settable,
            })
        })
        .collect();
    json!({
        "license": obj.license,
        "btf": btf.is_some(),
        "programs": programs,
        "maps": maps,
        "globals": globals,
    })
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Human-readable rendering of [`describe`]'s output.
pub fn render_text(path: &Path, r: &Value) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "object: {}", path.display());
    let _ = writeln!(o, "license: {}", s(&r["license"]));
    let _ = writeln!(o, "btf: {}", if r["btf"] == true { "yes" } else { "no" });
    let empty = Vec::new();
    let list = |k: &str| r[k].as_array().unwrap_or(&empty).clone();
    let _ = writeln!(o, "programs:");
    for p in list("programs") {
        let _ = writeln!(
            o,
            "  {}: section {}, attach {}, phase {}, {} insns",
            s(&p["name"]),
            s(&p["section"]),
            s(&p["attach"]),
            s(&p["phase"]),
            s(&p["insns"])
        );
        let subs: Vec<String> = p["subprograms"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|sp| {
                format!(
                    "{} (pc {}, {} insns)",
                    s(&sp["name"]),
                    s(&sp["pc"]),
                    s(&sp["len"])
                )
            })
            .collect();
        if !subs.is_empty() {
            let _ = writeln!(o, "    subprograms: {}", subs.join(", "));
        }
        let _ = writeln!(
            o,
            "    line info: {} records, {}/{} insns covered",
            s(&p["line_info"]["records"]),
            s(&p["line_info"]["covered_insns"]),
            s(&p["insns"])
        );
    }
    let _ = writeln!(o, "maps:");
    for m in list("maps") {
        let _ = writeln!(
            o,
            "  {}: {}, key {} ({}), value {} ({}), max_entries {}, flags {:#x}{}",
            s(&m["name"]),
            s(&m["type"]),
            s(&m["key_size"]),
            s(&m["key_type"]),
            s(&m["value_size"]),
            s(&m["value_type"]),
            s(&m["max_entries"]),
            m["flags"].as_u64().unwrap_or(0),
            if m["pinned"] == true {
                ", pinned by name"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(o, "globals:");
    for g in list("globals") {
        let changed = g["value"] != g["default"];
        let _ = writeln!(
            o,
            "  {}: {}, {}+{}, {} bytes, default {}{}{}",
            s(&g["name"]),
            s(&g["type"]),
            s(&g["section"]),
            s(&g["offset"]),
            s(&g["size"]),
            s(&g["default"]),
            if changed {
                format!(", set to {}", s(&g["value"]))
            } else {
                String::new()
            },
            if g["settable"] == true {
                " (settable)"
            } else {
                ""
            }
        );
    }
    o
}
