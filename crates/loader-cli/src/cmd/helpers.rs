//! `gpubpf helpers [NAME]`: the helpers policies may call, from the one table the verifier,
//! the runtime and the SDK header (`gpubpf_helpers.h`) are built from. A Linux helper gpubpf
//! does not implement is named as such.

use gpubpf_verifier::helpers::{helper_by_name, HelperSig, HELPERS};
use gpubpf_verifier::linux_helpers::is_linux_helper;
use serde_json::{json, Value};

use crate::output::{print_line, Output};

/// Arguments of `gpubpf helpers`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show only this helper (`bpf_map_lookup_elem`).
    pub name: Option<String>,
}

/// The C declaration of a helper: `void *bpf_map_lookup_elem(void *map, const void *key)`.
fn declaration(h: &HelperSig) -> String {
    let ret = h.c_ret.trim_end();
    let sep = if ret.ends_with('*') { "" } else { " " };
    format!("{ret}{sep}{}({})", h.name, h.c_params)
}

fn helper_json(h: &HelperSig) -> Value {
    json!({ "id": h.id, "name": h.name, "declaration": declaration(h), "description": h.doc })
}

/// The error for a name that is no gpubpf helper (saying when it is a Linux one).
fn not_a_helper(name: &str) -> anyhow::Error {
    if is_linux_helper(name) {
        anyhow::anyhow!(
            "`{name}` is a Linux helper that gpubpf does not implement; `gpubpf helpers` \
             lists the ones it does"
        )
    } else {
        anyhow::anyhow!("no helper named `{name}`; `gpubpf helpers` lists them")
    }
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let list: Vec<&HelperSig> = match &args.name {
        Some(n) => vec![helper_by_name(n).ok_or_else(|| not_a_helper(n))?],
        None => HELPERS.iter().collect(),
    };
    if out.json() {
        let v: Vec<Value> = list.iter().map(|h| helper_json(h)).collect();
        return out.print_json(&if args.name.is_some() {
            v.into_iter().next().unwrap_or(Value::Null)
        } else {
            Value::Array(v)
        });
    }
    print_line(&format!("{:>7}  {:<32} DESCRIPTION", "ID", "NAME"))?;
    for h in &list {
        print_line(&format!("{:>7}  {:<32} {}", h.id, h.name, h.doc))?;
    }
    if args.name.is_some() {
        for h in &list {
            print_line(&format!("\n  {};", declaration(h)))?;
        }
    } else {
        print_line(
            "\nDeclared in the SDK header gpubpf_helpers.h (`gpubpf build` includes it); \
             `gpubpf helpers NAME` shows a declaration.",
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_read_as_c() {
        let h = helper_by_name("bpf_map_lookup_elem").unwrap();
        assert_eq!(
            declaration(h),
            "void *bpf_map_lookup_elem(void *map, const void *key)"
        );
        let e = not_a_helper("bpf_get_current_task").to_string();
        assert!(
            e.contains("Linux helper that gpubpf does not implement"),
            "{e}"
        );
        let e = not_a_helper("nope").to_string();
        assert!(e.contains("no helper named `nope`"), "{e}");
    }
}
