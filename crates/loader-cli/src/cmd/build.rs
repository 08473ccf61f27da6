//! `gpubpf build file.bpf.c [-o out.o]`: compile a restricted-C policy with clang against
//! the SDK headers embedded in this binary, then check that the loader accepts the result.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use gpubpf_runtime::object::Object;
use gpubpf_runtime::sdk;
use serde_json::json;

use crate::exit::{self, CliError};
use crate::output::Output;

/// Arguments of `gpubpf build`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy source (`x.bpf.c`).
    pub source: PathBuf,
    /// Output object (default: the source with `.bpf.c`/`.c` replaced by `.o`).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// The clang to run (default: `$GPUBPF_CLANG`, else `clang`, else `clang-19` … on PATH).
    #[arg(long = "clang", value_name = "PATH")]
    pub clang: Option<PathBuf>,
    /// Extra include directory (after the SDK's).
    #[arg(short = 'I', value_name = "DIR")]
    pub include: Vec<PathBuf>,
    /// Preprocessor definition (`-D NAME` or `-D NAME=VALUE`).
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    pub define: Vec<String>,
    /// Where the SDK headers are materialised (default: `$GPUBPF_CACHE_DIR`,
    /// `$XDG_CACHE_HOME/gpubpf` or `~/.cache/gpubpf`).
    #[arg(long = "cache-dir", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// Default output path for a source file.
pub fn default_output(source: &Path) -> PathBuf {
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let stem = name
        .strip_suffix(".bpf.c")
        .or_else(|| name.strip_suffix(".c"))
        .unwrap_or(&name);
    source.with_file_name(format!("{stem}.o"))
}

/// The clang to use: explicit, `$GPUBPF_CLANG`, or the first of `clang`, `clang-19` …
/// `clang-14` found on `PATH`.
fn find_clang(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("GPUBPF_CLANG").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let names = [
        "clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14",
    ];
    for name in names {
        for dir in std::env::split_paths(&path) {
            let cand = dir.join(name);
            if cand.is_file() {
                return Ok(cand);
            }
        }
    }
    anyhow::bail!(
        "clang not found on PATH (looked for {}): install clang (Debian: `apt install clang`) or pass `--clang PATH`",
        names.join(", ")
    )
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    if !args.source.is_file() {
        anyhow::bail!("source `{}` does not exist", args.source.display());
    }
    if args.source.extension().is_none_or(|x| x != "c") {
        anyhow::bail!(
            "`{}` is not a C file: `gpubpf build` compiles restricted C policies (`NAME.bpf.c`)",
            args.source.display()
        );
    }
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args.source));
    let clang = find_clang(args.clang.as_deref())?;
    let cache = args
        .cache_dir
        .clone()
        .unwrap_or_else(sdk::default_cache_root);
    let include = sdk::materialize(&cache).context("cannot write the SDK headers")?;

    let mut cmd = Command::new(&clang);
    cmd.args(sdk::CLANG_FLAGS).arg("-I").arg(&include);
    for dir in &args.include {
        cmd.arg("-I").arg(dir);
    }
    for d in &args.define {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg("-c").arg(&args.source).arg("-o").arg(&output);
    if !out.json() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        cmd.arg("-fcolor-diagnostics");
    }
    tracing::debug!(?cmd, "running clang");
    let result = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!(
                "clang not found at `{}`: install clang or pass `--clang PATH`",
                clang.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("cannot run `{}`", clang.display()))
        }
    })?;
    let diagnostics = String::from_utf8_lossy(&result.stderr).into_owned();
    if !out.json() && !diagnostics.is_empty() {
        eprint!("{diagnostics}");
    }
    if !result.status.success() {
        return Err(CliError {
            code: exit::ERROR,
            message: format!(
                "clang failed to compile `{}` ({}){}",
                args.source.display(),
                result.status,
                if out.json() {
                    format!(":\n{diagnostics}")
                } else {
                    String::new()
                }
            ),
            json: Some(json!({ "clang": clang.display().to_string(), "diagnostics": diagnostics })),
        }
        .into());
    }
    let bytes = std::fs::read(&output)
        .with_context(|| format!("cannot read clang's output `{}`", output.display()))?;
    let obj = Object::parse(&bytes).map_err(|e| {
        // An object no gpubpf command accepts is not left behind to be loaded by mistake.
        let fate = match std::fs::remove_file(&output) {
            Ok(()) => "removed it".to_string(),
            Err(r) => format!("could not remove it: {r}"),
        };
        let hint = super::object_hint(&e)
            .map(|h| format!("\nhint: {h}"))
            .unwrap_or_default();
        CliError {
            code: exit::BAD_OBJECT,
            message: format!(
                "`{}` was compiled but the loader rejects it ({fate}): {e}{hint}",
                output.display()
            ),
            json: Some(json!({
                "output": output.display().to_string(),
                "removed": !output.exists(),
                "message": e.to_string(),
            })),
        }
    })?;
    if out.json() {
        out.print_json(&json!({
            "output": output.display().to_string(),
            "clang": clang.display().to_string(),
            "include": include.display().to_string(),
            "programs": obj.programs.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "maps": obj.maps.iter().map(|m| &m.name).collect::<Vec<_>>(),
            "diagnostics": diagnostics,
        }))?;
    } else {
        println!(
            "wrote {}: {} program(s), {} map(s)",
            output.display(),
            obj.programs.len(),
            obj.maps.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_output_names() {
        assert_eq!(
            default_output(Path::new("p/quota.bpf.c")),
            PathBuf::from("p/quota.o")
        );
        assert_eq!(default_output(Path::new("x.c")), PathBuf::from("x.o"));
        assert_eq!(default_output(Path::new("y")), PathBuf::from("y.o"));
    }
}
