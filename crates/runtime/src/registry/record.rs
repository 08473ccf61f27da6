//! What the registry records about a loaded object: everything the shim needs to rebuild
//! and re-verify the programs on its own (the original object, per-program attach points,
//! phases and priorities, the registry names of the maps the object binds, `--set` values).

use std::collections::BTreeMap;

use crate::maps::MapSpec;

/// Format version of `meta.json`.
pub const RECORD_FORMAT: u32 = 1;

/// Entry (before the real call) or exit (after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `SEC("cuda/…")`: runs before the driver call, may veto it.
    Entry,
    /// `SEC("cudaret/…")`: runs after the driver call, may override its result.
    Exit,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Entry => "entry",
            Phase::Exit => "exit",
        })
    }
}

/// One program ↔ attach point link.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkRecord {
    /// Canonical attach point (driver API name, e.g. `cuMemAlloc`).
    pub attach_point: String,
    /// What the user asked for (`cudaMalloc`, or the section's name).
    pub requested: String,
    /// Entry or exit.
    pub phase: Phase,
    /// Lower runs first; ties run in load order.
    pub priority: i32,
}

/// One program of a loaded object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramRecord {
    /// Function name in the object.
    pub name: String,
    /// ELF section it came from.
    pub section: String,
    /// Instruction slots.
    pub insn_count: usize,
    /// Where it is attached.
    pub links: Vec<LinkRecord>,
}

/// How one map of the object is bound in the registry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MapBinding {
    /// Index of the map in the object's map list (the `imm` of `lddw MapIdx`).
    pub index: usize,
    /// Name in the object (`counts`, `.rodata`, …).
    pub object_name: String,
    /// Name of the map file in the registry.
    pub registry_name: String,
    /// Definition.
    pub spec: MapSpec,
    /// Whether this load created the map (false: bound to an existing one).
    pub created: bool,
}

/// The object a `load --replace` took the place of.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replaced {
    /// Its id ([`ObjectRecord::id`]).
    pub id: u64,
    /// Its registry name.
    pub name: String,
}

/// A loaded object (`gpubpf load OBJ --name NAME`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// Registry name.
    pub name: String,
    /// Id given at load time, from the registry's counter ([`super::Writer::allocate_ids`]):
    /// increasing, never reused. Program `i` of the object has id `id + 1 + i`
    /// ([`ObjectRecord::program_id`]). 0 in records written before ids existed.
    #[serde(default)]
    pub id: u64,
    /// The object this one replaced (`load --replace`, or a load under a loaded name). While
    /// both are on disk (inside the replacing writer's transaction, or after it was killed)
    /// readers see only this one: see [`super::Snapshot`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Replaced>,
    /// File name of the original object inside the program's directory.
    pub object_file: String,
    /// SHA-256 of the object, hex.
    pub object_sha256: String,
    /// Size of the object in bytes.
    pub object_size: u64,
    /// Where it was loaded from.
    #[serde(default)]
    pub source_path: Option<String>,
    /// Load time, seconds since the epoch.
    pub loaded_at_unix: u64,
    /// `--set VAR=VALUE` as given.
    #[serde(default)]
    pub globals: BTreeMap<String, String>,
    /// Maps, by object index.
    pub maps: Vec<MapBinding>,
    /// Programs and their links.
    pub programs: Vec<ProgramRecord>,
    /// `load --shadow`: the programs run and their decisions are counted and audited, but
    /// never enforced (entry verdicts ignored, exit result and out-value changes discarded).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

impl ObjectRecord {
    /// Id of program `index` of the object (`None` without an object id).
    pub fn program_id(&self, index: usize) -> Option<u64> {
        (self.id != 0).then(|| self.id + 1 + index as u64)
    }

    /// How many ids an object with `programs` programs takes.
    pub fn ids_needed(programs: usize) -> u64 {
        1 + programs as u64
    }

    /// Whether this record replaced `other` (so that `other` is hidden while both exist).
    pub fn supersedes(&self, other: &ObjectRecord) -> bool {
        self.name != other.name
            && self
                .replaced
                .as_ref()
                .is_some_and(|r| r.id == other.id && r.name == other.name)
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}
