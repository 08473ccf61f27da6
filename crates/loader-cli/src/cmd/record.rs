//! `gpubpf record -o FILE [--policy OBJ[:API,…]]… [--set VAR=VALUE]… -- CMD ARGS…`: runs
//! `CMD` as `gpubpf run` does, with `GPUBPF_RECORD=FILE` set, so that the shim writes every
//! hooked call of the command as one JSON line (`docs/record-replay.md`). The first process
//! that makes a driver call writes `FILE`; any other (a forked child…) `FILE.PID`.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::cmd::run;
use crate::output::Output;

/// Environment variable the shim reads (`gpubpf_shim::record::RECORD_ENV`).
pub const RECORD_ENV: &str = "GPUBPF_RECORD";

/// Arguments of `gpubpf record`.
#[derive(Debug, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Where the calls go (JSON lines); an existing file is replaced.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub run: run::Args,
}

/// `FILE` as an absolute path in an existing directory (the command may change directory).
fn absolute(p: &std::path::Path) -> anyhow::Result<PathBuf> {
    let name = p
        .file_name()
        .with_context(|| format!("-o `{}`: not a file name", p.display()))?;
    let dir = match p.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&dir)
        .with_context(|| format!("-o `{}`: no directory `{}`", p.display(), dir.display()))?;
    Ok(dir.join(name))
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let path = absolute(&args.output)?;
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot replace `{}`", path.display()));
        }
    }
    std::env::set_var(RECORD_ENV, &path);
    eprintln!("gpubpf: recording calls to {}", path.display());
    run::run(args.run, out)
}
