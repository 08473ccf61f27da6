//! `gpubpf registry`: which registry the commands use, and creating a node's system
//! registry (docs/security.md, System mode).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::json;

use gpubpf_runtime::registry::system::{init_system, SYSTEM_HOME};
use gpubpf_runtime::registry::{default_home, filesystem, Mode, Registry};

use crate::output::Output;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a registry. With `--system`: the node's system registry (default
    /// /run/gpubpf), owned by you (normally root): every user's processes under the shim
    /// obey it, only you change it. Completes one that exists; refuses a user registry.
    Init {
        /// Create a system registry (without it: a private registry at the default place,
        /// as the first `gpubpf load` would).
        #[arg(long)]
        system: bool,
        /// Where (default: /run/gpubpf with `--system`, else the default registry).
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Which registry the commands use (GPUBPF_HOME, else the system registry when the
    /// node has one, else your own), its mode, owner, whether you may change it and the
    /// filesystem it is on (a note when that is not memory: tmpfs or ramfs).
    Show,
}

pub fn run(cmd: Command, out: &Output) -> anyhow::Result<()> {
    match cmd {
        Command::Init { system, home } => {
            let home = match (home, system) {
                (Some(h), _) => h,
                (None, true) => PathBuf::from(SYSTEM_HOME),
                (None, false) => default_home(),
            };
            if system {
                init_system(&home).with_context(|| {
                    format!("cannot create a system registry at {}", home.display())
                })?;
            } else {
                Registry::open(&home)
                    .with_context(|| format!("cannot create a registry at {}", home.display()))?;
            }
            show(&home, out)
        }
        Command::Show => show(&default_home(), out),
    }
}

fn show(home: &std::path::Path, out: &Output) -> anyhow::Result<()> {
    if !home.join("control").exists() {
        if out.json() {
            return out.print_json(&json!({ "home": home, "exists": false }));
        }
        println!(
            "{}: no registry yet (`gpubpf load` or `gpubpf registry init` creates it)",
            home.display()
        );
        return Ok(());
    }
    let reg = Registry::open(home).context("cannot open the registry")?;
    let (mode, owner) = match reg.mode() {
        Mode::User => ("user", None),
        Mode::System { owner } => ("system", Some(owner)),
    };
    let fs = filesystem(home).context("cannot tell the registry's filesystem")?;
    if out.json() {
        return out.print_json(&json!({
            "home": home,
            "exists": true,
            "mode": mode,
            "owner": owner,
            "may_change": reg.is_owner(),
            "generation": reg.generation(),
            "filesystem": fs.name,
            "in_memory": fs.in_memory,
        }));
    }
    match owner {
        None => println!(
            "{}: user registry (private to you), generation {}",
            home.display(),
            reg.generation()
        ),
        Some(o) => println!(
            "{}: system registry of uid {o}, generation {}; you {}",
            home.display(),
            reg.generation(),
            if reg.is_owner() {
                "own it (load, replace, unload, set map access)"
            } else {
                "may read it; your processes under the shim run its policies"
            }
        ),
    }
    if fs.in_memory {
        println!("  filesystem: {}", fs.name);
    } else {
        println!("  filesystem: {} (not memory: {ON_DISK})", fs.name);
    }
    Ok(())
}

/// What a registry that is not on a memory filesystem costs (`registry show`, and the
/// `gpubpf load` that creates one: docs/design-decisions.md).
const ON_DISK: &str = "the kernel writes policies' map pages back to disk and the next \
                       write to each faults; /dev/shm (gpubpf's default) or /run is tmpfs";

/// Says on stderr that the registry just made at `home` is not on a memory filesystem
/// (`gpubpf registry show` says it again).
pub fn note_if_on_disk(home: &std::path::Path) {
    if let Ok(fs) = filesystem(home) {
        if !fs.in_memory {
            eprintln!(
                "gpubpf: note: the new registry {} is on {}, not tmpfs: {ON_DISK}",
                home.display(),
                fs.name
            );
        }
    }
}
