//! Text or JSON output, chosen by `-j/--json` and `-p/--pretty`.

use serde::Serialize;

use crate::exit::CliError;

/// Writes one line to stdout. A closed pipe (`gpubpf -j maps list | head`) is not an error:
/// the reader has what it wanted, so the rest is dropped quietly.
pub fn print_line(s: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{s}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Where and how results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    json: bool,
    pretty: bool,
}

impl Output {
    pub fn new(json: bool, pretty: bool) -> Self {
        Self { json, pretty }
    }

    /// Whether JSON output was requested.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Prints `value` as JSON (pretty when asked) on stdout.
    pub fn print_json<T: Serialize>(&self, value: &T) -> anyhow::Result<()> {
        let s = if self.pretty {
            serde_json::to_string_pretty(value)?
        } else {
            serde_json::to_string(value)?
        };
        print_line(&s)
    }

    /// Reports an error: `{"error": …}` on stdout in JSON mode, `error: …` on stderr otherwise.
    pub fn error(&self, e: &anyhow::Error) {
        if self.json {
            let mut v = serde_json::json!({ "error": format!("{e:#}") });
            if let Some(detail) = e.downcast_ref::<CliError>().and_then(|c| c.json.clone()) {
                v["detail"] = detail;
            }
            let _ = self.print_json(&v);
        } else {
            eprintln!("error: {e:#}");
        }
    }
}
