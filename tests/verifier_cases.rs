//! Table-driven verifier suite: every case in `tests/verifier_cases/*.txt` is a small
//! program in assembler text with the expected verdict (and error fragment).

#[path = "verifier_cases/support.rs"]
mod verifier_support;

use gpubpf_verifier::{Verifier, VerifierConfig, VerifyInput};
use verifier_support::{parse_cases, test_ctx, Case};

fn run_case(c: &Case) -> Result<(), String> {
    let insns = gpubpf_isa::assemble(&c.asm).map_err(|e| format!("assembler: {e}"))?;
    let ctx = test_ctx(c.ret.clone());
    let mut cfg = VerifierConfig::default();
    if let Some(b) = c.budget {
        cfg.budget = b;
    }
    let res = Verifier::new(&cfg).verify(&VerifyInput {
        insns: &insns,
        maps: &c.maps,
        ctx: &ctx,
        line_info: None,
    });
    match (&c.reject, res) {
        (None, Ok(_)) => Ok(()),
        (None, Err(e)) => Err(format!("expected accept, got:\n{}", e.render())),
        (Some(f), Ok(_)) => Err(format!(
            "expected reject containing `{f}`, but it was accepted"
        )),
        (Some(f), Err(e)) => {
            let msg = e.kind.to_string();
            if !msg.contains(f.as_str()) {
                return Err(format!(
                    "expected reject containing `{f}`, got:\n{}",
                    e.render()
                ));
            }
            if let Some(h) = &c.hint {
                if !e.hint.as_deref().unwrap_or("").contains(h.as_str()) {
                    return Err(format!("expected hint containing `{h}`, got {:?}", e.hint));
                }
            }
            Ok(())
        }
    }
}

#[test]
fn verifier_case_tables() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verifier_cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/verifier_cases exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    let filter = std::env::var("VERIFIER_CASE").ok();
    let mut total = 0;
    let mut accepts = 0;
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let cases = parse_cases(&name, &text).unwrap();
        for c in &cases {
            if filter
                .as_ref()
                .is_some_and(|x| !c.name.contains(x.as_str()))
            {
                continue;
            }
            total += 1;
            if c.reject.is_none() {
                accepts += 1;
            }
            if let Err(e) = run_case(c) {
                failures.push(format!("{}:{} `{}`: {e}", c.file, c.line, c.name));
            }
        }
    }
    eprintln!(
        "{total} verifier cases ({accepts} accepted, {} rejected), {} failed",
        total - accepts,
        failures.len()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
    if filter.is_none() {
        assert!(total >= 300, "only {total} cases");
    }
}
