//! Name resolution: driver base names, exported symbols, runtime aliases, section names, and
//! "did you mean" suggestions for everything else.

use super::aliases::Alias;
use super::catalog::{catalog, AttachPoint};
use super::{AttachError, Phase};

/// How a name resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A driver base name (`cuMemAlloc`).
    Base,
    /// An exported symbol (`cuMemAlloc_v2`): index into the point's variants.
    Symbol(usize),
    /// A runtime-API alias (`cudaMalloc`).
    Alias(&'static Alias),
}

/// A resolved name.
#[derive(Clone, Copy, Debug)]
pub struct Resolved {
    /// The attach point.
    pub point: &'static AttachPoint,
    /// How the name was recognized.
    pub via: Via,
}

/// Resolves `name` (driver base name, exported symbol or runtime alias) to its attach point.
/// Attaching by any name of a point attaches to all of its variants (`hdr.variant` and
/// `GPUBPF_CTX_F_PER_THREAD_STREAM` tell programs which symbol was called).
///
/// Unknown names give [`AttachError::UnknownName`] with the closest known name.
pub fn resolve(name: &str) -> Result<&'static AttachPoint, AttachError> {
    lookup(name).map(|r| r.point)
}

/// Like [`resolve`], also saying how the name was recognized.
pub fn lookup(name: &str) -> Result<Resolved, AttachError> {
    let c = catalog();
    if let Some(point) = c.by_name.get(name).and_then(|&i| c.points.get(i)) {
        let via = if point.name == name {
            Via::Base
        } else {
            point
                .variant_by_symbol(name)
                .map_or(Via::Base, |(i, _)| Via::Symbol(i))
        };
        return Ok(Resolved { point, via });
    }
    if let Some(alias) = c.aliases.get(name) {
        if let Some(point) = c.by_name.get(alias.target).and_then(|&i| c.points.get(i)) {
            return Ok(Resolved {
                point,
                via: Via::Alias(alias),
            });
        }
    }
    Err(AttachError::UnknownName {
        name: name.to_string(),
        suggestion: suggest(name),
    })
}

/// Every attach point a name stands for: the alias target plus its related driver functions
/// for a runtime alias (`cudaMemcpy` → `cuMemcpy`, `cuMemcpyHtoD`, …), the single point
/// otherwise.
pub fn resolve_alias_targets(name: &str) -> Result<Vec<&'static AttachPoint>, AttachError> {
    let r = lookup(name)?;
    let Via::Alias(alias) = r.via else {
        return Ok(vec![r.point]);
    };
    let mut out = vec![r.point];
    for also in alias.also {
        let p = resolve(also)?;
        if !out.iter().any(|q| q.id == p.id) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Splits `cuda/<name>` (entry) or `cudaret/<name>` (exit) without resolving the name.
/// `None` when the section has neither prefix (it is not a program section of gpubpf).
pub fn split_section(section: &str) -> Option<(Phase, &str)> {
    if let Some(rest) = section.strip_prefix(Phase::Exit.section_prefix()) {
        Some((Phase::Exit, rest))
    } else {
        section
            .strip_prefix(Phase::Entry.section_prefix())
            .map(|rest| (Phase::Entry, rest))
    }
}

/// Parses a program section name: `cuda/<name>` runs on entry, `cudaret/<name>` on exit;
/// `<name>` is anything [`resolve`] accepts.
pub fn parse_section(section: &str) -> Result<(&'static AttachPoint, Phase), AttachError> {
    match split_section(section) {
        Some((phase, name)) if !name.is_empty() && !name.contains('/') => {
            resolve(name).map(|p| (p, phase))
        }
        _ => Err(AttachError::BadSection {
            section: section.to_string(),
        }),
    }
}

/// The known name closest to `name`: a case-insensitive exact match, else the smallest edit
/// distance within a third of the length (at least 2, at most 5), else the shortest name containing
/// it (case-insensitively, for queries of 4+ characters).
pub(crate) fn suggest(name: &str) -> Option<String> {
    let c = catalog();
    let wanted = name.to_ascii_lowercase();
    let candidates = || c.by_name.keys().chain(c.aliases.keys()).copied();
    if let Some(exact) = candidates().find(|k| k.eq_ignore_ascii_case(name)) {
        return Some(exact.to_string());
    }
    let limit = (wanted.chars().count() / 3).clamp(2, 5);
    let best = candidates()
        // The distance is at least the length difference: skip hopeless candidates.
        .filter(|k| k.len().abs_diff(wanted.len()) <= limit)
        .filter_map(|k| Some((edit_distance(&wanted, &k.to_ascii_lowercase(), limit)?, k)))
        .min_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.len().cmp(&b.1.len()))
                .then(a.1.cmp(b.1))
        });
    if let Some((_, k)) = best {
        return Some(k.to_string());
    }
    if wanted.len() < 4 {
        return None;
    }
    candidates()
        .filter(|k| k.to_ascii_lowercase().contains(&wanted))
        .min_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)))
        .map(str::to_string)
}

/// Levenshtein distance over bytes (names are ASCII identifiers), `None` when it exceeds
/// `limit` (stops as soon as a whole row exceeds it).
fn edit_distance(a: &str, b: &str, limit: usize) -> Option<usize> {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
        if prev.iter().all(|&d| d > limit) {
            return None;
        }
    }
    prev.last().copied().filter(|&d| d <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("", "", 9), Some(0));
        assert_eq!(edit_distance("abc", "abc", 9), Some(0));
        assert_eq!(edit_distance("abc", "abd", 9), Some(1));
        assert_eq!(edit_distance("abc", "", 9), Some(3));
        assert_eq!(edit_distance("kitten", "sitting", 9), Some(3));
        assert_eq!(edit_distance("kitten", "sitting", 3), Some(3));
        assert_eq!(edit_distance("kitten", "sitting", 2), None);
        assert_eq!(edit_distance("abcdef", "uvwxyz", 2), None);
    }

    #[test]
    fn resolves_every_kind_of_name() {
        assert_eq!(resolve("cuMemAlloc").unwrap().name, "cuMemAlloc");
        let r = lookup("cuMemAlloc_v2").unwrap();
        assert_eq!(r.point.name, "cuMemAlloc");
        assert!(matches!(r.via, Via::Symbol(i) if r.point.variants[i].symbol == "cuMemAlloc_v2"));
        assert_eq!(
            resolve("cuLaunchKernel_ptsz").unwrap().name,
            "cuLaunchKernel"
        );
        let r = lookup("cudaMalloc").unwrap();
        assert_eq!(r.point.name, "cuMemAlloc");
        assert!(matches!(r.via, Via::Alias(a) if a.name == "cudaMalloc"));
        assert_eq!(
            resolve("cudaLaunchKernelExC").unwrap().name,
            "cuLaunchKernelEx"
        );
    }

    #[test]
    fn unknown_names_get_suggestions() {
        let err = resolve("cuMemAloc").unwrap_err();
        assert_eq!(
            err,
            AttachError::UnknownName {
                name: "cuMemAloc".into(),
                suggestion: Some("cuMemAlloc".into())
            }
        );
        assert!(
            err.to_string().contains("did you mean `cuMemAlloc`?"),
            "{err}"
        );
        let err = resolve("cudamalloc").unwrap_err();
        assert!(err.to_string().contains("`cudaMalloc`"), "{err}");
        let err = resolve("cudaMallocAsnyc").unwrap_err();
        assert!(err.to_string().contains("`cudaMallocAsync`"), "{err}");
        let err = resolve("LaunchKernelEx").unwrap_err();
        assert!(err.to_string().contains("`cuLaunchKernelEx`"), "{err}");
        let err = resolve("zzzzzzzzzzzzzzzzzz").unwrap_err();
        assert!(err.to_string().contains("gpubpf attach-points"), "{err}");
        assert!(resolve("").is_err());
    }

    #[test]
    fn sections() {
        let (p, ph) = parse_section("cuda/cuMemAlloc").unwrap();
        assert_eq!((p.name, ph), ("cuMemAlloc", Phase::Entry));
        let (p, ph) = parse_section("cudaret/cudaMemGetInfo").unwrap();
        assert_eq!((p.name, ph), ("cuMemGetInfo", Phase::Exit));
        for bad in [
            "cuda/",
            "cudaret/",
            "kprobe/cuMemAlloc",
            "cuMemAlloc",
            "cuda/a/b",
            "",
        ] {
            let err = parse_section(bad).unwrap_err();
            assert!(
                matches!(err, AttachError::BadSection { .. }),
                "{bad}: {err}"
            );
            let msg = err.to_string();
            assert!(msg.contains("`cuda/<name>`") && msg.contains("`cudaret/<name>`"));
        }
        let err = parse_section("cuda/cuMemAllocc").unwrap_err();
        assert!(
            err.to_string().contains("did you mean `cuMemAlloc`"),
            "{err}"
        );
        assert_eq!(split_section("maps"), None);
        assert_eq!(split_section("cudaret/x"), Some((Phase::Exit, "x")));
    }

    #[test]
    fn alias_targets_include_related_functions() {
        let names: Vec<_> = resolve_alias_targets("cudaMemcpy")
            .unwrap()
            .iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names[0], "cuMemcpy");
        assert!(names.contains(&"cuMemcpyHtoD"));
        assert_eq!(resolve_alias_targets("cuMemAlloc").unwrap().len(), 1);
    }
}
