//! Conventions the CLI keeps across commands (issue #14, "small things"): one spelling of
//! types in `inspect` and `maps show`, one size-suffix convention in every value parser,
//! a confirmation from every mutating command.
//!
//! Builds `gpubpf` with cargo like `cli_maps.rs`; prints `skipped: …` without clang.

mod common;

use serde_json::Value;

use common::cli::{ok_json as j, run_with_registry as run, with_policies};

#[test]
fn inspect_and_maps_show_spell_types_alike() {
    let Some((_d, home, objs)) = with_policies(["policies/quota.bpf.c", "policies/trace.bpf.c"])
    else {
        return;
    };
    let mut compared = 0;
    for obj in &objs {
        let o = obj.to_str().unwrap();
        let inspected = j(&run(&home, &["-j", "inspect", o]));
        let loaded = j(&run(&home, &["-j", "load", o]));
        let object = loaded["name"].as_str().unwrap().to_string();
        for m in inspected["maps"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            let registry = format!("{object}.{}", name.trim_start_matches('.'));
            let shown = j(&run(&home, &["-j", "maps", "show", &registry]));
            for k in ["key_type", "value_type"] {
                assert_eq!(
                    m[k],
                    shown.get(k).cloned().unwrap_or(Value::Null),
                    "{registry} {k}"
                );
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 9);
    // The spelling is the source's: typedef names kept, the section for global data.
    let shown = j(&run(&home, &["-j", "maps", "show", "quota.proc_usage"]));
    assert_eq!(
        (&shown["key_type"], &shown["value_type"]),
        (&"__u32".into(), &"struct usage".into())
    );
    let shown = j(&run(&home, &["-j", "maps", "show", "quota.rodata"]));
    assert_eq!(
        (&shown["key_type"], &shown["value_type"]),
        (&"__u32".into(), &".rodata".into())
    );
}
