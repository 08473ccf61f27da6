//! Shared helpers of the verifier tests: a test ctx layout, map lists and the case-table
//! parser for `tests/verifier_cases/*.txt`.
#![allow(dead_code)]

use gpubpf_verifier::ctx::{CtxField, CtxLayout, ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind};

/// The ctx used by table cases: a header followed by argument slots.
pub fn test_ctx(ret: ReturnRule) -> ProgramContext {
    let f = |name: &str, offset: u32, size: u32, readable: bool, writable: bool| CtxField {
        name: name.into(),
        offset,
        size,
        readable,
        writable,
    };
    ProgramContext {
        description: "cuda/test (entry)".into(),
        ctx: CtxLayout {
            size: 72,
            fields: vec![
                f("api_id", 0, 4, true, false),
                f("phase", 4, 4, true, false),
                f("device", 8, 4, true, false),
                f("pid", 12, 4, true, false),
                f("tid", 16, 4, true, false),
                f("result", 24, 8, true, false),
                f("args[0]", 32, 8, true, false),
                f("args[1]", 40, 8, true, true),
                f("args[2]", 48, 8, true, true),
                f("secret", 56, 8, false, false),
                f("out[0]", 64, 8, false, true),
            ],
        },
        ret,
    }
}

/// One table case.
#[derive(Debug, Clone)]
pub struct Case {
    pub file: String,
    pub line: usize,
    pub name: String,
    pub maps: Vec<MapInfo>,
    pub ret: ReturnRule,
    /// `None`: must be accepted; `Some(fragment)`: rejected with an error containing it.
    pub reject: Option<String>,
    pub hint: Option<String>,
    pub budget: Option<u64>,
    pub asm: String,
}

fn parse_map(spec: &str) -> Result<MapInfo, String> {
    let p: Vec<&str> = spec.trim().split(':').collect();
    if p.len() < 5 {
        return Err(format!("bad map spec `{spec}`"));
    }
    let kind = match p[1] {
        "array" => MapKind::Array,
        "hash" => MapKind::Hash,
        "lru" => MapKind::LruHash,
        "ringbuf" => MapKind::Ringbuf,
        k => return Err(format!("bad map kind `{k}`")),
    };
    let n = |s: &str| s.parse::<u32>().map_err(|e| format!("{s}: {e}"));
    let mut m = MapInfo::new(p[0], kind, n(p[2])?, n(p[3])?, n(p[4])?);
    m.read_only = p.get(5) == Some(&"ro");
    Ok(m)
}

/// Parses a case file:
///
/// ```text
/// == case name
/// maps: counts:hash:4:8:16; ev:ringbuf:0:0:4096
/// ret: any | MIN..MAX          (default 0..1000)
/// expect: ok | reject FRAGMENT
/// hint: FRAGMENT               (optional)
/// budget: N                    (optional)
/// --
/// mov %r0, 0
/// exit
/// ```
pub fn parse_cases(file: &str, text: &str) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    let mut cur: Option<Case> = None;
    let mut in_asm = false;
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if let Some(name) = line.strip_prefix("== ") {
            if let Some(c) = cur.take() {
                out.push(c);
            }
            cur = Some(Case {
                file: file.into(),
                line: lineno,
                name: name.trim().into(),
                maps: Vec::new(),
                ret: ReturnRule::Range { min: 0, max: 1000 },
                reject: None,
                hint: None,
                budget: None,
                asm: String::new(),
            });
            in_asm = false;
            continue;
        }
        let Some(c) = cur.as_mut() else {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            return Err(format!("{file}:{lineno}: text before the first `== name`"));
        };
        if in_asm {
            c.asm.push_str(line);
            c.asm.push('\n');
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t == "--" {
            in_asm = true;
            continue;
        }
        let (k, v) = t
            .split_once(':')
            .ok_or_else(|| format!("{file}:{lineno}: expected `key: value`"))?;
        let v = v.trim();
        match k.trim() {
            "maps" => {
                for m in v.split(';').filter(|s| !s.trim().is_empty()) {
                    c.maps
                        .push(parse_map(m).map_err(|e| format!("{file}:{lineno}: {e}"))?);
                }
            }
            "ret" => {
                c.ret = if v == "any" {
                    ReturnRule::Any
                } else {
                    let (a, b) = v
                        .split_once("..")
                        .ok_or_else(|| format!("{file}:{lineno}: bad ret"))?;
                    ReturnRule::Range {
                        min: a
                            .trim()
                            .parse()
                            .map_err(|_| format!("{file}:{lineno}: bad ret"))?,
                        max: b
                            .trim()
                            .parse()
                            .map_err(|_| format!("{file}:{lineno}: bad ret"))?,
                    }
                }
            }
            "expect" => {
                if v == "ok" {
                    c.reject = None;
                } else if let Some(f) = v.strip_prefix("reject") {
                    c.reject = Some(f.trim().to_string());
                } else {
                    return Err(format!("{file}:{lineno}: bad expect `{v}`"));
                }
            }
            "hint" => c.hint = Some(v.to_string()),
            "budget" => {
                c.budget = Some(
                    v.parse()
                        .map_err(|_| format!("{file}:{lineno}: bad budget"))?,
                )
            }
            other => return Err(format!("{file}:{lineno}: unknown key `{other}`")),
        }
    }
    if let Some(c) = cur.take() {
        out.push(c);
    }
    Ok(out)
}
