//! `gpubpf maps` (scaffold: implemented by its issue).

use crate::output::Output;

/// Subcommands of `gpubpf maps`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List.
    List,
}

pub fn run(cmd: Command, _out: &Output) -> anyhow::Result<()> {
    anyhow::bail!("`gpubpf maps {cmd:?}` is not available in this build")
}
