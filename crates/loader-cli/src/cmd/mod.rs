//! One module per subcommand.

pub mod attach_points;
pub mod build;
pub mod demo;
pub mod inspect;
pub mod load;
pub mod maps;
pub mod prog;
pub mod prog_dump;
pub mod run;
pub mod test_run;
pub mod verify;

/// The items `--prog NAME` selects (all of them without it), or an error naming the
/// available programs of `owner` (an object file or a loaded object).
pub fn select_programs<'a, T>(
    items: &'a [T],
    name_of: impl Fn(&T) -> &str,
    wanted: Option<&str>,
    owner: &str,
) -> anyhow::Result<Vec<&'a T>> {
    let selected: Vec<&T> = items
        .iter()
        .filter(|p| wanted.is_none_or(|n| name_of(p) == n))
        .collect();
    if selected.is_empty() {
        let names: Vec<&str> = items.iter().map(&name_of).collect();
        anyhow::bail!(match wanted {
            Some(n) => format!(
                "`{owner}` has no program named `{n}` (programs: {})",
                names.join(", ")
            ),
            None => format!("`{owner}` contains no programs"),
        });
    }
    Ok(selected)
}

/// Opens the default registry for a command that only reads it: `None` when none exists
/// yet, since reading never creates one.
pub fn existing_registry() -> anyhow::Result<Option<gpubpf_runtime::registry::Registry>> {
    use anyhow::Context as _;
    let home = gpubpf_runtime::registry::default_home();
    if !home.join("control").exists() {
        return Ok(None);
    }
    gpubpf_runtime::registry::Registry::open(&home)
        .map(Some)
        .context("cannot open the registry")
}

/// The error of a command that needs a registry when there is none.
pub fn no_registry() -> anyhow::Error {
    anyhow::anyhow!(
        "no registry at {}: nothing is loaded yet (`gpubpf load` creates it; GPUBPF_HOME \
         chooses another)",
        gpubpf_runtime::registry::default_home().display()
    )
}
