//! Fuzzes `Object::parse` and everything a caller does with a loaded object: any panic is a
//! bug (the loader must return an error value for every input).
//!
//! Seeds: `mkdir -p fuzz/corpus/object_parse && cp tests/data/crafted/*.o policies/build/*.o
//! fuzz/corpus/object_parse/` (after `policies/build.sh`), then
//! `cargo +nightly fuzz run object_parse`.
#![no_main]

use gpubpf_runtime::object::{render_value, Object};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut obj) = Object::parse(data) else {
        return;
    };
    let btf = obj.btf.clone();
    for p in &obj.programs {
        let _ = p.line_coverage();
        let _ = p.line_at(p.insns.len().saturating_sub(1));
    }
    for m in &obj.maps {
        if let Some(b) = &btf {
            for t in m.key_type.iter().chain(m.value_type.iter()) {
                let _ = b.type_name(t.id);
                let _ = b.size_of(t.id);
            }
        }
    }
    for g in obj.globals.clone() {
        let _ = g.default_display(btf.as_ref());
        let _ = render_value(&g.default, g.btf_type, btf.as_ref());
        let _ = obj.set_global(&g.name, "1");
        let _ = obj.set_global(&g.name, "8GiB");
    }
});
