//! One module per subcommand.

pub mod attach_points;
pub mod audit;
pub mod build;
pub mod demo;
pub mod events;
pub mod exporter;
pub mod exporter_metrics;
pub mod helpers;
pub mod inspect;
pub mod load;
pub mod map_series;
pub mod maps;
pub mod prog;
pub mod prog_dump;
pub mod prog_info;
pub mod ps;
pub mod record;
pub mod registry;
pub mod replay;
pub mod ring_reader;
pub mod run;
pub mod test_run;
pub mod top;
pub mod top_view;
pub mod trace;
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

/// A hint for an object error a newcomer meets: a call of a helper gpubpf does not implement
/// (clang leaves an undeclared `bpf_*` function as an unresolved external symbol).
pub fn object_hint(e: &gpubpf_runtime::object::ObjectError) -> Option<String> {
    use gpubpf_runtime::object::ObjectError;
    use gpubpf_verifier::engine::HELPER_LIST_HINT;
    match e {
        ObjectError::UndefinedSymbol { symbol, .. } if symbol.starts_with("bpf_") => {
            Some(if gpubpf_verifier::linux_helpers::is_linux_helper(symbol) {
                format!("`{symbol}` is a Linux helper, not a gpubpf helper; {HELPER_LIST_HINT}")
            } else {
                format!("`{symbol}` is not a gpubpf helper; {HELPER_LIST_HINT}")
            })
        }
        _ => None,
    }
}
