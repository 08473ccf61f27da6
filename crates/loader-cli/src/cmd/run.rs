//! `gpubpf run [--policy OBJ[:API[,API…]]]… [--set VAR=VALUE]… -- CMD ARGS…`: loads the
//! given policies into the registry, then replaces itself with `CMD` started with the shim
//! (`libgpubpf.so`) preloaded, so the command's exit status (or the signal that ended it) is
//! the status of `gpubpf run` itself.
//!
//! The shim is found in `GPUBPF_SHIM`, else beside the `gpubpf` binary, else in `../lib`
//! relative to it. The command inherits the registry (`GPUBPF_HOME` is set to the one the
//! policies were loaded into) and any `LD_PRELOAD` already set (after the shim).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use anyhow::Context as _;
use gpubpf_runtime::registry;

use crate::cmd::load;
use crate::output::Output;

/// Environment variable naming the shim library.
pub const SHIM_ENV: &str = "GPUBPF_SHIM";
/// File name of the shim library.
pub const SHIM_FILE: &str = "libgpubpf.so";

/// Arguments of `gpubpf run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A policy object to load first, optionally with the APIs to attach it to
    /// (`quota.o`, `count.o:cuLaunchKernel,cuLaunchKernelEx`); repeatable.
    #[arg(long = "policy", value_name = "OBJ[:API,…]")]
    pub policy: Vec<String>,
    /// Set a global of every policy before loading (`--set limit_bytes=8GiB`); repeatable.
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `OBJ[:API,…]`: the object path and its attach list (empty: the sections').
pub fn parse_policy(spec: &str) -> (PathBuf, Vec<String>) {
    match spec.rsplit_once(':') {
        Some((obj, apis)) if !obj.is_empty() && !apis.is_empty() && !apis.contains('/') => (
            PathBuf::from(obj),
            apis.split(',').map(str::to_owned).collect(),
        ),
        _ => (PathBuf::from(spec), Vec::new()),
    }
}

/// Where the shim is: `GPUBPF_SHIM`, beside the running binary, or in `../lib`.
fn find_shim() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(SHIM_ENV) {
        let p = PathBuf::from(p);
        anyhow::ensure!(p.is_file(), "{SHIM_ENV}=`{}` is not a file", p.display());
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot locate the gpubpf binary")?;
    let dir = exe.parent().context("the gpubpf binary has no directory")?;
    let candidates = [dir.join(SHIM_FILE), dir.join("../lib").join(SHIM_FILE)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .with_context(|| {
            format!(
                "cannot find {SHIM_FILE} beside `{}` or in its ../lib: build it with \
                 `cargo build -p gpubpf-shim` or set {SHIM_ENV}",
                exe.display()
            )
        })
}

pub fn run(args: Args, _out: &Output) -> anyhow::Result<()> {
    let shim = find_shim()?;
    for spec in &args.policy {
        let (object, attach) = parse_policy(spec);
        let (record, generation, _) =
            load::load(&load::Args::policy(object, attach, args.set.clone()))
                .with_context(|| format!("--policy `{spec}`"))?;
        eprintln!("gpubpf: loaded {} (generation {generation})", record.name);
    }
    let preload = match std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        Some(existing) => {
            let mut p = shim.clone().into_os_string();
            p.push(":");
            p.push(existing);
            p
        }
        None => shim.into_os_string(),
    };
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given after `--`")?;
    let home = std::env::var_os(registry::HOME_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(registry::default_home);
    let err = std::process::Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", preload)
        .env(registry::HOME_ENV, home)
        .exec();
    Err(err).with_context(|| format!("cannot run `{}`", program.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_specs_split_at_the_attach_list() {
        assert_eq!(parse_policy("quota.o"), (PathBuf::from("quota.o"), vec![]));
        assert_eq!(
            parse_policy("/p/count.o:cuLaunchKernel,cudaMalloc"),
            (
                PathBuf::from("/p/count.o"),
                vec!["cuLaunchKernel".to_string(), "cudaMalloc".to_string()]
            )
        );
        // A colon inside the path is part of the path.
        assert_eq!(
            parse_policy("/a:b/quota.o"),
            (PathBuf::from("/a:b/quota.o"), vec![])
        );
    }
}
