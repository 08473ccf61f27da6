//! From a verified program to one the engines can run: map binding and the prepare step.
//!
//! - [`bind_maps`]: the object's map definitions are bound to registry maps by name,
//!   scoped as libbpf scopes them: `OBJECT.NAME` (private; a policy loaded again under
//!   the same name keeps its counters), or `NAME` for maps pinned with
//!   `LIBBPF_PIN_BY_NAME` (shared). An existing map with the same definition is reused, a
//!   missing one is created, a conflicting one is an error naming both definitions.
//!   Global-data sections become one-entry arrays named `OBJECT.SECTION`.
//! - [`prepare()`]: every `lddw` map reference (`MapIdx`, `MapIdxValue`) is rewritten to a
//!   plain 64-bit immediate: the address of the process-local [`crate::maps::Map`] (the
//!   map handle helpers receive) or the address of the value inside the shared mapping.
//!   The [`PreparedProgram`] keeps the maps alive as long as the code may run.
//! - [`plan_attach`]: what `--attach API` / `--attach PROG=API` means for each program.

mod attach_plan;
mod bind;
mod from_object;
mod prepare;
mod verify;
pub mod verify_cache;

pub use attach_plan::{plan_attach, section_api, AttachPlanError};
pub use bind::{
    bind_maps, bind_maps_with, global_map_name, registry_map_name, spec_change, BindError,
    BindOptions, BoundMap, MapDef,
};
pub use from_object::{map_defs, map_type, type_desc};
pub use prepare::{prepare, PrepareError, PreparedProgram};
pub use verify::{
    attach_phase, line_infos, map_infos, record_phase, resolve_links, verify_at, verify_at_with,
    verify_key,
};
