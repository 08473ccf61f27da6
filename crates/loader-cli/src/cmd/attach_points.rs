//! `gpubpf attach-points` (scaffold: implemented by its issue).

use crate::output::Output;

/// Arguments of `gpubpf attach-points`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Arguments, not yet parsed.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

pub fn run(args: Args, _out: &Output) -> anyhow::Result<()> {
    anyhow::bail!(
        "`gpubpf attach-points` is not available in this build (args: {:?})",
        args.rest
    )
}
