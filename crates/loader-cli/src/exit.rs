//! Exit codes, documented in `gpubpf --help`.

/// Generic failure.
pub const ERROR: u8 = 1;
/// Command-line usage error.
pub const USAGE: u8 = 2;
/// A program was rejected by the verifier.
pub const VERIFIER_REJECTED: u8 = 3;
/// The object file could not be read or parsed.
pub const BAD_OBJECT: u8 = 4;

/// An error that carries its exit code; anything else exits with [`ERROR`].
#[derive(Debug)]
pub struct CliError {
    /// Process exit code.
    pub code: u8,
    /// Message (already fully rendered, may be multi-line).
    pub message: String,
    /// Structured detail for JSON mode (e.g. a verifier diagnostic), if any.
    pub json: Option<serde_json::Value>,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}
