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
