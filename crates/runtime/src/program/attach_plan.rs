//! What `gpubpf load --attach …` means for each program of an object, so that no program
//! is moved to an API it was not written for without being named.
//!
//! - `PROG=API` attaches program `PROG` to `API`, in its section's phase. When the section
//!   names an API, `API` must be another spelling of it (an alias or exported symbol with
//!   an attach point in common, e.g. `cuMemAlloc_v2` for `cuda/cudaMalloc`).
//! - `API` alone attaches the programs not named by a `PROG=API`: those whose section
//!   names no API (`SEC("cuda")`, `SEC("cudaret")`) when there are any, else every program,
//!   provided they all name one API (e.g. one program per phase for that API). Programs
//!   written for different APIs need `PROG=API`.
//! - Without `--attach`, each program goes where its section says; a section without an API
//!   is an error.

use crate::attach::{self, AttachError};
use crate::object::Program;

/// Why `--attach` cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum AttachPlanError {
    #[error(
        "`--attach {api}` would move programs written for different APIs ({programs}); \
         say which program goes where with `--attach PROG=API` (e.g. `--attach {example}`)"
    )]
    DifferentApis {
        api: String,
        programs: String,
        example: String,
    },
    #[error(
        "`--attach {program}={api}`: no program `{program}` in the object (programs: {programs})"
    )]
    NoSuchProgram {
        program: String,
        api: String,
        programs: String,
    },
    #[error(
        "`--attach {program}={api}`: program `{program}` is written for `{section_api}` \
         (section `{section}`), not for `{api}`"
    )]
    OtherApi {
        program: String,
        api: String,
        section: String,
        section_api: String,
    },
    #[error(
        "program `{program}`: section `{section}` names no API; give one with \
         `--attach {program}=API` (or `--attach API` for every such program)"
    )]
    NoApi { program: String, section: String },
    #[error("`--attach {entry}`: empty program or API name")]
    Malformed { entry: String },
    #[error("`--attach {api}` applies to no program: every program is named by a `PROG=API`")]
    Unused { api: String },
    #[error("`--attach {api}`")]
    Attach {
        api: String,
        #[source]
        source: AttachError,
    },
}

/// The API a program's section names (`cudaMalloc` for `cuda/cudaMalloc`), if any.
pub fn section_api(p: &Program) -> Option<&str> {
    attach::split_section(&p.section)
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty())
}

/// For each program of `programs` (same order), the APIs `--attach` gives it; empty means
/// "where its section says". See the module docs for the rules.
pub fn plan_attach(
    programs: &[Program],
    attach: &[String],
) -> Result<Vec<Vec<String>>, AttachPlanError> {
    let mut plan: Vec<Vec<String>> = vec![Vec::new(); programs.len()];
    let mut bare: Vec<String> = Vec::new();
    let names = || {
        programs
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for entry in attach {
        let Some((prog, api)) = entry.split_once('=') else {
            bare.push(entry.trim().to_string());
            continue;
        };
        let (prog, api) = (prog.trim(), api.trim());
        if prog.is_empty() || api.is_empty() {
            return Err(AttachPlanError::Malformed {
                entry: entry.clone(),
            });
        }
        let idx = programs
            .iter()
            .position(|p| p.name == prog)
            .ok_or_else(|| AttachPlanError::NoSuchProgram {
                program: prog.into(),
                api: api.into(),
                programs: names(),
            })?;
        let p = &programs[idx];
        let targets =
            attach::resolve_alias_targets(api).map_err(|source| AttachPlanError::Attach {
                api: api.into(),
                source,
            })?;
        if let Some(written) = section_api(p) {
            if !targets.iter().any(|t| t.name == p.attach) {
                return Err(AttachPlanError::OtherApi {
                    program: prog.into(),
                    api: api.into(),
                    section: p.section.clone(),
                    section_api: written.into(),
                });
            }
        }
        plan[idx].push(api.to_string());
    }
    if !bare.is_empty() {
        let rest: Vec<usize> = (0..programs.len())
            .filter(|&i| plan[i].is_empty())
            .collect();
        let generic: Vec<usize> = rest
            .iter()
            .copied()
            .filter(|&i| section_api(&programs[i]).is_none())
            .collect();
        let targets = if generic.is_empty() { rest } else { generic };
        if targets.is_empty() {
            return Err(AttachPlanError::Unused {
                api: bare.join(","),
            });
        }
        let first = targets.first().map(|&i| programs[i].attach.as_str());
        if targets
            .iter()
            .any(|&i| Some(programs[i].attach.as_str()) != first)
        {
            let list: Vec<String> = targets
                .iter()
                .map(|&i| format!("`{}` for `{}`", programs[i].name, programs[i].attach))
                .collect();
            return Err(AttachPlanError::DifferentApis {
                api: bare.join(","),
                programs: list.join(", "),
                example: format!("{}={}", programs[targets[0]].name, bare[0]),
            });
        }
        for i in targets {
            plan[i].clone_from(&bare);
        }
    }
    for (p, apis) in programs.iter().zip(&plan) {
        if apis.is_empty() && section_api(p).is_none() {
            return Err(AttachPlanError::NoApi {
                program: p.name.clone(),
                section: p.section.clone(),
            });
        }
    }
    Ok(plan)
}
