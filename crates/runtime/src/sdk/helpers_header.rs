//! Generation of `policies/include/gpubpf_helpers.h` from the helper table.
//!
//! The C declarations follow libbpf's `bpf_helper_defs.h`: every helper is a constant
//! function pointer whose value is the helper id, so clang emits `call <id>`.

use std::fmt::Write as _;

use gpubpf_verifier::helpers::{HelperSig, GPUBPF_HELPER_BASE, HELPERS};

/// Repository-relative path of the generated header.
pub const HELPERS_HEADER_PATH: &str = "policies/include/gpubpf_helpers.h";

/// The text of `gpubpf_helpers.h` for [`HELPERS`].
pub fn generate_helpers_header() -> String {
    generate_for(HELPERS)
}

fn generate_for(helpers: &[HelperSig]) -> String {
    let mut s = String::new();
    s.push_str(
        "/* SPDX-License-Identifier: MIT OR Apache-2.0 */\n\
         /*\n \
         * GENERATED from gpubpf_verifier::helpers::HELPERS — do not edit.\n \
         * Regenerate: GPUBPF_BLESS=1 cargo test -p gpubpf-runtime sdk\n \
         */\n\
         #ifndef __GPUBPF_HELPERS_H__\n\
         #define __GPUBPF_HELPERS_H__\n\n",
    );
    let mut own_started = false;
    for h in helpers {
        if h.id >= GPUBPF_HELPER_BASE && !own_started {
            own_started = true;
            let _ = writeln!(
                s,
                "/* gpubpf's own helpers (ids from {GPUBPF_HELPER_BASE:#x}). */\n"
            );
        }
        let ret = h.c_ret.trim_end();
        let sep = if ret.ends_with('*') { "" } else { " " };
        let _ = writeln!(s, "/* {} (id {}): {} */", h.name, h.id, h.doc);
        let _ = writeln!(
            s,
            "static {ret}{sep}(* const {name})({params}) = (void *) {id};\n",
            name = h.name,
            params = h.c_params,
            id = h.id
        );
    }
    s.push_str("#endif /* __GPUBPF_HELPERS_H__ */\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declares_every_helper_once_with_its_id() {
        let text = generate_helpers_header();
        for h in HELPERS {
            let needle = format!("(* const {})(", h.name);
            assert_eq!(text.matches(&needle).count(), 1, "{}", h.name);
            assert!(
                text.contains(&format!(") = (void *) {};", h.id)),
                "{}",
                h.name
            );
        }
    }

    #[test]
    fn pointer_return_types_have_no_extra_space() {
        let text = generate_helpers_header();
        assert!(text.contains("static void *(* const bpf_map_lookup_elem)(void *map"));
        assert!(text.contains("static long (* const bpf_map_delete_elem)("));
    }
}
