//! End-to-end tests of `gpubpf prog dump xlated|jited`: `policies/quota.bpf.c` built with
//! clang (`gpubpf build`), loaded into a private registry, then dumped: every instruction
//! listed with its C line, machine code grouped under the BPF instruction it came from, the
//! JSON form consistent with the code blob, and errors that name what is loaded.
//!
//! Prints `skipped: …` without clang (scripts/test.sh installs it).

mod common;

use std::path::Path;
use std::process::Output;

use gpubpf_runtime::registry::Registry;
use serde_json::Value;

use common::cli::{ok, ok_json as json};

/// `gpubpf ARGS` with the registry in `home/reg`.
fn run(home: &Path, args: &[&str]) -> Output {
    common::cli::run_with_registry(&home.join("reg"), args)
}

/// Programs of `policies/quota.bpf.c`.
const QUOTA_PROGRAMS: usize = 25;

/// Builds and loads `policies/quota.bpf.c` as `quota` into `home/reg`; false without clang.
fn load_quota(home: &Path) -> bool {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/quota.bpf.c");
    let obj = home.join("quota.o");
    if !common::cli::build_object(&src, &obj, &home.join("sdk")) {
        return false;
    }
    ok(&run(
        home,
        &[
            "load",
            obj.to_str().expect("utf-8 path"),
            "--set",
            "limit_bytes=1GiB",
        ],
    ));
    true
}

/// `(program, insn_count)` from `gpubpf prog show`.
fn shown_programs(home: &Path) -> Vec<(String, usize)> {
    let v = json(&run(home, &["-j", "prog", "show", "quota"]));
    v["programs"]
        .as_array()
        .expect("programs")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["insn_count"].as_u64().expect("insn_count") as usize,
            )
        })
        .collect()
}

/// The listing of each program: text after each `program NAME (` header.
fn sections(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("program ") {
            let name = rest.split(' ').next().expect("program name");
            out.push((name.to_string(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line);
        }
    }
    out
}

/// `(pc, opcode)` of an xlated line `   12: (bf) r2 = r10`.
fn xlated_insn(line: &str) -> Option<(usize, u8)> {
    let (pc, rest) = line.trim_start().split_once(": (")?;
    let pc = pc.parse().ok()?;
    let op = u8::from_str_radix(rest.get(..2)?, 16).ok()?;
    (rest.get(2..4) == Some(") ")).then_some((pc, op))
}

fn hex_bytes(s: &str) -> Vec<u8> {
    s.as_bytes()
        .chunks(2)
        .map(|c| {
            assert_eq!(c.len(), 2, "odd hex `{s}`");
            u8::from_str_radix(std::str::from_utf8(c).expect("ascii"), 16).expect("hex")
        })
        .collect()
}

#[test]
fn xlated_lists_every_instruction_with_source_lines() {
    let home = tempfile::tempdir().expect("tempdir");
    if !load_quota(home.path()) {
        return;
    }
    let shown = shown_programs(home.path());
    assert_eq!(shown.len(), QUOTA_PROGRAMS);

    let text = ok(&run(
        home.path(),
        &["prog", "dump", "xlated", "quota", "--linum", "--opcodes"],
    ));
    let listed = sections(&text);
    assert_eq!(
        listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        shown.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        "{text}"
    );
    for ((name, lines), (_, insn_count)) in listed.iter().zip(&shown) {
        // Every slot is covered, in order: `lddw` (0x18) takes two.
        let mut next = 0;
        for (i, line) in lines.iter().enumerate() {
            let Some((pc, op)) = xlated_insn(line) else {
                continue;
            };
            assert_eq!(pc, next, "{name}: {line}");
            next += if op == 0x18 { 2 } else { 1 };
            // --opcodes: the raw slot(s) on the next line, starting with the opcode.
            let raw: Vec<&str> = lines[i + 1].split_whitespace().collect();
            assert_eq!(raw.len(), if op == 0x18 { 16 } else { 8 }, "{line}");
            assert_eq!(raw[0], format!("{op:02x}"), "{line}");
        }
        assert_eq!(next, *insn_count, "{name}: listed slots vs prog show");
        // C lines from BTF line info, with --linum their file and line.
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("; ") && l.contains("quota.bpf.c:")),
            "{name}: no source lines"
        );
    }
    assert!(
        text.contains("; if (take(p, size, limit_bytes)) {"),
        "{text}"
    );
    // Map references are rewritten to addresses and say which registry map they name.
    // (`proc_usage` is pinned by name, `.rodata` private to the object.)
    assert!(text.contains("/* map[proc_usage] */"), "{text}");
    assert!(text.contains("/* map[quota.rodata][0]+"), "{text}");
    // The subprogram is labelled.
    assert!(text.lines().any(|l| l == "reserve:"), "{text}");

    // -j: the same instructions, with bytes and source.
    let v = json(&run(
        home.path(),
        &["-j", "prog", "dump", "xlated", "quota"],
    ));
    let progs = v.as_array().expect("array");
    assert_eq!(progs.len(), QUOTA_PROGRAMS);
    for (p, (name, insn_count)) in progs.iter().zip(&shown) {
        assert_eq!(p["program"], name.as_str());
        assert_eq!(p["insn_count"].as_u64(), Some(*insn_count as u64));
        assert!(p.get("jited").is_none());
        let insns = p["insns"].as_array().expect("insns");
        let slots: usize = insns
            .iter()
            .map(|i| hex_bytes(i["bytes"].as_str().expect("bytes")).len() / 8)
            .sum();
        assert_eq!(slots, *insn_count, "{name}");
        assert!(insns
            .iter()
            .all(|i| i["text"].as_str().is_some_and(|t| !t.is_empty())));
        assert!(insns.iter().any(|i| i["source"]["line"].as_u64().is_some()));
    }

    // One program only.
    let one = ok(&run(
        home.path(),
        &[
            "prog",
            "dump",
            "xlated",
            "quota",
            "--prog",
            "quota_free_done",
        ],
    ));
    assert_eq!(sections(&one).len(), 1);
    assert!(one.starts_with("program quota_free_done ("), "{one}");
    // Without --linum no `[file:line]`.
    assert!(!one.contains("quota.bpf.c:"), "{one}");
}

#[test]
fn jited_groups_machine_code_under_bpf_instructions() {
    let home = tempfile::tempdir().expect("tempdir");
    if !load_quota(home.path()) {
        return;
    }
    let text = ok(&run(home.path(), &["prog", "dump", "jited", "quota"]));
    let listed = sections(&text);
    assert_eq!(listed.len(), QUOTA_PROGRAMS, "{text}");
    for (name, lines) in &listed {
        // Comments with BPF instructions above their machine code (pc 0 among them unless
        // Cranelift folded its register move away, as in `quota_pitch`).
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(";  ") && l.contains(": (")),
            "{name}: no instruction comment"
        );
        if name == "quota_alloc" {
            assert!(
                lines.iter().any(|l| l.starts_with(";    0: (")),
                "{name}: no comment for pc 0"
            );
        }
        // The program's main function is its entry point: no trampoline before it.
        assert!(!lines.iter().any(|l| l.contains("trampoline")), "{name}");
        assert!(
            lines.contains(&format!("{name}:").as_str()),
            "{name}: no main function"
        );
        if cfg!(target_arch = "x86_64") {
            assert!(
                lines.iter().any(|l| l.ends_with(":\tret")),
                "{name}: no ret"
            );
        }
    }
    assert!(text.contains("bytes of"), "{text}");

    let v = json(&run(home.path(), &["-j", "prog", "dump", "jited", "quota"]));
    for p in v.as_array().expect("array") {
        let name = p["program"].as_str().expect("program");
        let j = &p["jited"];
        let code = hex_bytes(j["code"].as_str().expect("code"));
        assert!(!code.is_empty(), "{name}");
        assert_eq!(j["code_size"].as_u64(), Some(code.len() as u64));
        let functions = p["functions"].as_array().expect("functions");
        assert_eq!(j["function_count"].as_u64(), Some(functions.len() as u64));
        if !cfg!(target_arch = "x86_64") {
            assert_eq!(j["disassembled"], false);
            continue;
        }
        assert_eq!(j["disassembled"], true);
        // (offset, bytes, pc) of every native instruction.
        let mut natives: Vec<(usize, Vec<u8>, Option<usize>)> = Vec::new();
        for insn in p["insns"].as_array().expect("insns") {
            let pc = insn["pc"].as_u64().expect("pc") as usize;
            for n in insn["native"].as_array().expect("native") {
                assert!(n["asm"].as_str().is_some_and(|a| !a.is_empty()));
                natives.push((
                    n["offset"].as_u64().expect("offset") as usize,
                    hex_bytes(n["bytes"].as_str().expect("bytes")),
                    Some(pc),
                ));
            }
        }
        for n in j["unmapped"].as_array().expect("unmapped") {
            natives.push((
                n["offset"].as_u64().expect("offset") as usize,
                hex_bytes(n["bytes"].as_str().expect("bytes")),
                None,
            ));
        }
        natives.sort_by_key(|n| n.0);
        // Contiguous from 0, and together exactly the code blob.
        let mut at = 0;
        let mut joined = Vec::new();
        for (off, bytes, _) in &natives {
            assert_eq!(*off, at, "{name}: gap or overlap at {off:#x}");
            assert!(!bytes.is_empty());
            at += bytes.len();
            joined.extend_from_slice(bytes);
        }
        assert_eq!(joined, code, "{name}");
        // The pc map is monotone per function: functions are laid out in pc order, and the
        // code of each BPF instruction lies inside its own function's code.
        let range = |f: &Value| {
            let o = f["code_offset"].as_u64().expect("code_offset") as usize;
            o..o + f["code_size"].as_u64().expect("code_size") as usize
        };
        let func_of = |pc: usize| {
            functions
                .iter()
                .rposition(|f| f["pc"].as_u64().expect("pc") as usize <= pc)
                .expect("function of pc")
        };
        for w in functions.windows(2) {
            assert!(range(&w[0]).end <= range(&w[1]).start, "{name}");
            assert!(w[0]["pc"].as_u64() < w[1]["pc"].as_u64(), "{name}");
        }
        let mut last_func = 0;
        for (off, bytes, pc) in &natives {
            let Some(pc) = pc else { continue };
            let f = func_of(*pc);
            assert!(
                range(&functions[f]).contains(off)
                    && range(&functions[f]).contains(&(off + bytes.len() - 1)),
                "{name}: pc {pc} has code at {off:#x}, outside its function"
            );
            assert!(f >= last_func, "{name}: function order at {off:#x}");
            last_func = f;
        }
        // Every function has mapped code; pc 0 has some unless its move was folded away.
        for f in 0..functions.len() {
            assert!(
                natives
                    .iter()
                    .any(|n| n.2.is_some_and(|pc| func_of(pc) == f)),
                "{name}: function {f} has no mapped code"
            );
        }
        if name == "quota_alloc" {
            assert!(natives.iter().any(|n| n.2 == Some(0)), "{name}");
        }
    }
}

#[test]
fn unknown_names_and_rejected_programs_are_clear_errors() {
    let home = tempfile::tempdir().expect("tempdir");
    if !load_quota(home.path()) {
        return;
    }
    let out = run(home.path(), &["prog", "dump", "xlated", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no loaded program named `nope`")
            && err.contains("quota")
            && err.contains("quota_alloc_done"),
        "{err}"
    );
    let out = run(home.path(), &["-j", "prog", "dump", "jited", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON error");
    assert!(v["error"]
        .as_str()
        .is_some_and(|e| e.contains("quota_free_done")));

    let out = run(
        home.path(),
        &["prog", "dump", "jited", "quota", "--prog", "nope"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no program named `nope`")
            && err.contains("quota_alloc, quota_alloc_done, quota_pitch, "),
        "{err}"
    );

    // A record whose link no longer verifies (the entry program's ctx reads do not fit
    // cuInit's ctx): dumping re-verifies as a process would, and refuses.
    let reg = Registry::open(&home.path().join("reg")).expect("open registry");
    let mut rec = reg.object("quota").expect("record");
    let bytes = reg.object_bytes("quota").expect("object bytes");
    rec.name = "broken".into();
    rec.programs[0].links[0].attach_point = "cuInit".into();
    reg.writer()
        .expect("writer")
        .publish_object(&rec, &bytes)
        .expect("publish");
    let out = run(home.path(), &["prog", "dump", "xlated", "broken"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("program `quota_alloc` of `broken` was rejected when re-verified at `cuInit`"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The other programs of the object still dump.
    ok(&run(
        home.path(),
        &[
            "prog",
            "dump",
            "jited",
            "broken",
            "--prog",
            "quota_free_done",
        ],
    ));
}

/// A listing with its addresses (maps, which differ between processes) blanked.
fn unaddressed(text: &str) -> String {
    text.split(' ')
        .map(|w| {
            if w.starts_with("0x") && w.len() > 10 {
                "ADDR"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `program NAME (` headers of a text dump, in order.
fn dumped(out: &Output) -> Vec<String> {
    sections(&ok(out)).into_iter().map(|(n, _)| n).collect()
}

#[test]
fn programs_are_selected_as_prog_show_selects_them() {
    let home = tempfile::tempdir().expect("tempdir");
    if !load_quota(home.path()) {
        return;
    }
    let h = home.path();
    let shown = json(&run(h, &["-j", "prog", "show", "quota"]));
    let ids: Vec<(String, u64)> = shown["programs"]
        .as_array()
        .expect("programs")
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("name").to_string();
            (name, p["id"].as_u64().expect("id"))
        })
        .collect();
    let object_id = shown["id"].as_u64().expect("object id");
    let (third, third_id) = ids[2].clone();

    // `id N`: the one program of that id, the same code as `NAME --prog`.
    let by_id = run(h, &["prog", "dump", "xlated", "id", &third_id.to_string()]);
    assert_eq!(dumped(&by_id), std::slice::from_ref(&third));
    let by_prog = run(h, &["prog", "dump", "xlated", "quota", "--prog", &third]);
    assert_eq!(unaddressed(&ok(&by_id)), unaddressed(&ok(&by_prog)));
    // An object's own id, like `prog show id N`, selects the whole object.
    let whole = run(h, &["prog", "dump", "xlated", "id", &object_id.to_string()]);
    assert_eq!(dumped(&whole).len(), QUOTA_PROGRAMS);
    // `name X`: programs of that function name, or the object of that name.
    let by_name = run(
        h,
        &["-j", "prog", "dump", "jited", "name", "quota_free_done"],
    );
    let v = json(&by_name);
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["program"], "quota_free_done");
    assert_eq!(
        dumped(&run(h, &["prog", "dump", "xlated", "name", "quota"])).len(),
        QUOTA_PROGRAMS
    );

    // A function name where an object's name goes: refused, with the two ways to say it.
    let out = run(h, &["prog", "dump", "xlated", "quota_alloc"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`quota_alloc` is a program of `quota`")
            && err.contains("`gpubpf prog dump xlated name quota_alloc`")
            && err.contains("`gpubpf prog dump xlated quota --prog quota_alloc`"),
        "{err}"
    );
    // Unknown ids and names list what is loaded, with the programs' ids.
    let out = run(h, &["prog", "dump", "xlated", "id", "9999"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let listed = format!("{third_id} {third}");
    assert!(
        err.contains("no loaded program has id 9999") && err.contains(&listed),
        "{err}"
    );
    let out = run(h, &["prog", "dump", "xlated", "name", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no loaded program or object named `nope`")
    );
    // Usage errors: `--prog` belongs to NAME, and a selector is one of three forms.
    let id = third_id.to_string();
    for args in [
        &["prog", "dump", "xlated", "id", &id, "--prog", "quota_alloc"][..],
        &["prog", "dump", "xlated", "id", "x"][..],
        &["prog", "dump", "xlated", "tag", "7"][..],
        &["prog", "dump", "xlated"][..],
    ] {
        let out = run(h, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
    let err = String::from_utf8_lossy(&run(h, &["prog", "dump", "xlated", "tag", "7"]).stderr)
        .into_owned();
    assert!(err.contains("`prog dump xlated id N`"), "{err}");
}
