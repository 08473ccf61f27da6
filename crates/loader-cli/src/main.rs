//! The `gpubpf` command-line tool.
//!
//! Grammar in the style of bpftool: `gpubpf [OPTIONS] OBJECT COMMAND …`. Every listing takes
//! `-j/--json` and `-p/--pretty`; in JSON mode errors are printed as `{"error": …}`.

mod cmd;
mod exit;
mod output;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use crate::exit::CliError;
use crate::output::Output;

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  error (I/O, registry, bad arguments detected after parsing)
  2  usage error (unknown command or option)
  3  a program was rejected by the verifier
  4  the object file could not be read or parsed";

/// gpubpf: load verified BPF policies into CUDA applications and manage their maps.
#[derive(Debug, Parser)]
#[command(name = "gpubpf", version, after_help = EXIT_CODES_HELP)]
struct Cli {
    /// Print machine-readable JSON.
    #[arg(short = 'j', long = "json", global = true)]
    json: bool,
    /// Print pretty JSON (implies --json).
    #[arg(short = 'p', long = "pretty", global = true)]
    pretty: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline on a mock CUDA driver: build, load, enforce, replace, dump.
    Demo(cmd::demo::Args),
    /// Compile a restricted-C policy with clang and the embedded SDK header.
    Build(cmd::build::Args),
    /// Show what the loader understood of an object file.
    Inspect(cmd::inspect::Args),
    /// Verify the programs of an object without loading them.
    Verify(cmd::verify::Args),
    /// Verify an object and record its programs, maps and links in the registry.
    Load(cmd::load::Args),
    /// Run a command with the shim preloaded, after loading the given policies.
    Run(cmd::run::Args),
    /// Run a command like `run`, recording every hooked call as JSON lines.
    Record(cmd::record::Args),
    /// Run policies offline over recorded calls and show what they would have decided.
    Replay(cmd::replay::Args),
    /// Processes running the shim: generation applied, calls and denials per attach point,
    /// failed objects, per-program run statistics (`--stats`).
    Ps(cmd::ps::Args),
    /// Run one program on a synthetic ctx (interpreter and JIT) and show what it did.
    TestRun(cmd::test_run::Args),
    /// Loaded programs.
    #[command(subcommand)]
    Prog(cmd::prog::Command),
    /// Unload a program (the same as `prog unload`).
    Unload(cmd::prog::UnloadArgs),
    /// Maps in the registry (`map` is accepted too, as bpftool spells it).
    #[command(subcommand, visible_alias = "map")]
    Maps(cmd::maps::Command),
    /// List hookable CUDA functions, their aliases and ctx fields.
    AttachPoints(cmd::attach_points::Args),
    /// List the helpers policies may call (ids, declarations).
    Helpers(cmd::helpers::Args),
    /// Print the `bpf_printk` lines of policed processes (`-f` to follow), like
    /// `bpftool prog tracelog`.
    Trace(cmd::trace::Args),
    /// Print the records a policy writes to a ring buffer (e.g. `trace.o`'s `events`),
    /// typed with the record struct's BTF, one JSON object per line (`-f` to follow).
    Events(cmd::events::Args),
    /// Print the decisions policies made (refusals, result overrides), enforced or shadowed
    /// (`load --shadow`), from the registry's audit ring: one line per decision.
    Audit(cmd::audit::Args),
    /// Serve Prometheus metrics of the node: processes, calls and denials, program
    /// statistics, chosen maps (`--map NAME[:METRIC]`).
    Exporter(cmd::exporter::Args),
    /// A live terminal view of the processes under the shim (`q` quits).
    Top(cmd::top::Args),
    /// Which registry the commands use; create a node's system registry (`init --system`).
    #[command(subcommand)]
    Registry(cmd::registry::Command),
}

/// Behave like other Unix filters when stdout is a closed pipe (`gpubpf maps dump m | head`):
/// die quietly of SIGPIPE instead of panicking on the failed write (Rust ignores SIGPIPE by
/// default, which turns every `println!` into a potential panic).
fn restore_default_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; setting the
    // disposition of SIGPIPE to its default has no other effect on Rust's runtime.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(exit::USAGE),
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let out = Output::new(cli.json || cli.pretty, cli.pretty);
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a, &out),
        Command::Build(a) => cmd::build::run(a, &out),
        Command::Inspect(a) => cmd::inspect::run(a, &out),
        Command::Verify(a) => cmd::verify::run(a, &out),
        Command::Load(a) => cmd::load::run(a, &out),
        Command::Run(a) => cmd::run::run(a, &out),
        Command::Record(a) => cmd::record::run(a, &out),
        Command::Replay(a) => cmd::replay::run(a, &out),
        Command::Ps(a) => cmd::ps::run(a, &out),
        Command::TestRun(a) => cmd::test_run::run(a, &out),
        Command::Prog(c) => cmd::prog::run(c, &out),
        Command::Unload(a) => cmd::prog::run_unload(a, &out),
        Command::Maps(c) => cmd::maps::run(c, &out),
        Command::AttachPoints(a) => cmd::attach_points::run(a, &out),
        Command::Helpers(a) => cmd::helpers::run(a, &out),
        Command::Trace(a) => cmd::trace::run(a, &out),
        Command::Events(a) => cmd::events::run(a, &out),
        Command::Audit(a) => cmd::audit::run(a, &out),
        Command::Registry(c) => cmd::registry::run(c, &out),
        Command::Exporter(a) => cmd::exporter::run(a, &out),
        Command::Top(a) => cmd::top::run(a, &out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e
                .downcast_ref::<CliError>()
                .map(|c| c.code)
                .unwrap_or(exit::ERROR);
            out.error(&e);
            ExitCode::from(code)
        }
    }
}
