//! `gpubpf audit [-f] [-j]`: the decisions policies made in every policed process, read from
//! the registry's audit ring (map `audit`, `registry::audit::AUDIT_RING`), as `gpubpf trace`
//! reads the trace ring.
//!
//! One record per decision: an entry verdict that refused a call, an exit program's
//! override of the result, and the same decisions of shadow programs (`load --shadow`),
//! which were counted but not applied. Text: one line per decision,
//! `seconds pid/tid API phase object/program verdict N [was M] [shadow|enforced]`; with
//! `-j` a JSON array of the records without `-f`, one JSON object per line with `-f`.
//! Reading consumes: a record is printed once, by whichever reader takes it. The ring is
//! created by the first policed process; until then there is nothing to print. When it is
//! full new records are dropped (`gpubpf maps show audit`); `-f` says so on stderr.

use gpubpf_runtime::registry::audit::{AuditRecord, AUDIT_RING};
use gpubpf_runtime::registry::Registry;
use serde_json::{json, Value};

use super::ring_reader::Ring;
use crate::output::Output;

/// Arguments of `gpubpf audit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep printing new decisions until interrupted (Ctrl-C).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
}

/// One record read from the ring: decoded, or the raw text of one that is not a record.
enum Entry {
    Record(AuditRecord),
    Raw(String),
}

fn entry(bytes: &[u8]) -> Entry {
    match AuditRecord::decode(bytes) {
        Some(r) => Entry::Record(r),
        None => Entry::Raw(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// The text line of a decision.
fn text(r: &AuditRecord) -> String {
    let was = r.previous.map(|p| format!(" was {p}")).unwrap_or_default();
    format!(
        "{}.{:06} {}/{} {} {} {}/{} {} {}{was} {}",
        r.time_ns / 1_000_000_000,
        r.time_ns % 1_000_000_000 / 1000,
        r.pid,
        r.tid,
        r.api,
        r.phase,
        r.object,
        r.program,
        if r.phase == "exit" {
            "result"
        } else {
            "verdict"
        },
        r.verdict,
        if r.shadow { "shadow" } else { "enforced" },
    )
}

fn entry_text(e: &Entry) -> String {
    match e {
        Entry::Record(r) => text(r),
        Entry::Raw(s) => s.clone(),
    }
}

fn entry_json(e: &Entry) -> Value {
    match e {
        Entry::Record(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Entry::Raw(s) => json!({ "raw": s }),
    }
}

/// The audit ring as `gpubpf audit` reads it.
const AUDIT: Ring<'static, Entry> = Ring {
    name: AUDIT_RING,
    record: "audit record",
    text: entry_text,
    json: entry_json,
};

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    AUDIT.run(Registry::audit_ring, entry, args.follow, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_print_as_one_line_each() {
        let mut r = AuditRecord {
            time_ns: 12_345_678_901,
            realtime_ns: 0,
            pid: 10,
            tid: 11,
            api_id: 1,
            api: "cuMemAlloc".into(),
            phase: "entry".into(),
            object: "quota".into(),
            program: "quota_alloc".into(),
            verdict: 2,
            previous: None,
            shadow: true,
        };
        assert_eq!(
            text(&r),
            "12.345678 10/11 cuMemAlloc entry quota/quota_alloc verdict 2 shadow"
        );
        r.phase = "exit".into();
        r.previous = Some(0);
        r.shadow = false;
        assert_eq!(
            text(&r),
            "12.345678 10/11 cuMemAlloc exit quota/quota_alloc result 2 was 0 enforced"
        );
        assert_eq!(entry_text(&entry(b"junk")), "junk");
        assert_eq!(entry_json(&entry(b"junk")), json!({ "raw": "junk" }));
    }
}
