//! The maps a `test-run` program runs against, one set per engine so that the interpreter
//! and the JIT each see the same state and their effects can be compared:
//!
//! - scratch (the default): two private temporary registries, each with the object's maps
//!   bound exactly as `gpubpf load` binds them (globals from the object and `--set`), both
//!   removed at the end;
//! - `--registry`: the JIT runs against the real registry's maps (`$GPUBPF_HOME`, bound as
//!   `gpubpf load --name NAME` bound them: `NAME.MAP`, pinned maps by name, `NAME.rodata`
//!   with the values the object was loaded with) and changes them, as the shim would; the
//!   interpreter runs against a scratch copy taken before the first run.
//!
//! Ring buffers of the real registry are never consumed (that would steal records from their
//! reader): only the bytes produced are compared for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use gpubpf_runtime::maps::types::{format_value, parse_patch, parse_value};
use gpubpf_runtime::maps::{Map, MapType, BPF_ANY};
use gpubpf_runtime::program::{bind_maps, registry_map_name, MapDef};
use gpubpf_runtime::registry::{Registry, RegistryError};
use serde::Serialize;
use serde_json::Value;

/// One set of maps, indexed like the object's maps.
pub struct World {
    /// The registry holding them.
    pub reg: Registry,
    /// The maps.
    pub maps: Vec<Arc<Map>>,
    /// Whether ring buffers may be consumed (scratch registries only).
    consume_rings: bool,
    /// Keeps a scratch registry's directory until the world is dropped.
    _dir: Option<tempfile::TempDir>,
}

fn scratch_registry() -> anyhow::Result<(tempfile::TempDir, Registry)> {
    let dir = tempfile::Builder::new()
        .prefix("gpubpf-test-run-")
        .tempdir()
        .context("cannot create a scratch registry")?;
    let reg = Registry::open(&dir.path().join("reg")).context("cannot open a scratch registry")?;
    Ok((dir, reg))
}

impl World {
    /// A scratch registry with the object's maps bound as `gpubpf load` binds them.
    pub fn scratch(object: &str, defs: &[MapDef]) -> anyhow::Result<World> {
        let (dir, reg) = scratch_registry()?;
        let bound = bind_maps(
            &mut reg.writer().context("cannot lock a scratch registry")?,
            object,
            defs,
        )
        .context("cannot create the object's maps in a scratch registry")?;
        Ok(World {
            maps: bound.into_iter().map(|b| b.map).collect(),
            reg,
            consume_rings: true,
            _dir: Some(dir),
        })
    }

    /// The maps of the real registry `reg` that object `object` binds; every one must
    /// exist (test-run never creates maps there) with the object's definition.
    pub fn registry(reg: Registry, object: &str, defs: &[MapDef]) -> anyhow::Result<World> {
        let mut maps = Vec::with_capacity(defs.len());
        for def in defs {
            let name = registry_map_name(object, def);
            let map = match reg.open_map(&name) {
                Ok(m) => m,
                Err(RegistryError::NoSuchMap { .. }) => bail!(
                    "map `{name}` is not in the registry at {}: load the object first \
                     (`gpubpf load OBJ --name {object}`), or leave out --registry to run on \
                     scratch maps",
                    reg.home().display()
                ),
                Err(e) => {
                    return Err(anyhow::Error::from(e).context(format!("cannot open map `{name}`")))
                }
            };
            if map.spec() != &def.spec {
                bail!(
                    "map `{name}` in the registry is `{}`, the object defines `{}`",
                    map.spec(),
                    def.spec
                );
            }
            maps.push(map);
        }
        Ok(World {
            reg,
            maps,
            consume_rings: false,
            _dir: None,
        })
    }

    /// A scratch registry holding a copy of this world's maps (same names, definitions and
    /// entries; ring buffers empty).
    pub fn copy(&self) -> anyhow::Result<World> {
        let (dir, reg) = scratch_registry()?;
        let mut maps = Vec::with_capacity(self.maps.len());
        {
            let mut w = reg.writer().context("cannot lock a scratch registry")?;
            for m in &self.maps {
                let copy = match reg.open_map(m.name()) {
                    // A map the object lists twice.
                    Ok(c) => c,
                    Err(_) => w
                        .create_map(m.name(), m.spec(), m.meta())
                        .with_context(|| format!("cannot copy map `{}`", m.name()))?,
                };
                if m.spec().map_type != MapType::RingBuf {
                    for e in m
                        .entries()
                        .with_context(|| format!("cannot read map `{}`", m.name()))?
                    {
                        copy.update(&e.key, &e.value, BPF_ANY)
                            .with_context(|| format!("cannot copy map `{}`", m.name()))?;
                    }
                }
                maps.push(copy);
            }
        }
        Ok(World {
            reg,
            maps,
            consume_rings: true,
            _dir: Some(dir),
        })
    }

    /// The map `name` means: an object map name (`proc_usage`) or a registry name.
    fn find(&self, defs: &[MapDef], name: &str) -> anyhow::Result<&Arc<Map>> {
        let i = defs
            .iter()
            .position(|d| d.name == name)
            .or_else(|| self.maps.iter().position(|m| m.name() == name))
            .with_context(|| {
                let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
                format!(
                    "the object has no map `{name}` (maps: {})",
                    names.join(", ")
                )
            })?;
        Ok(&self.maps[i])
    }

    /// `--map-set MAP KEY VALUE`: writes one entry as `gpubpf maps update` does (typed with
    /// BTF; named fields change only those fields).
    pub fn set_entry(
        &self,
        defs: &[MapDef],
        name: &str,
        key: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        let map = self.find(defs, name)?;
        let meta = map.meta();
        let k = parse_value(meta.key_type.as_ref(), key, map.spec().key_size as usize)
            .with_context(|| format!("--map-set {name}: bad key `{key}`"))?;
        let patch = parse_patch(
            meta.value_type.as_ref(),
            value,
            map.spec().value_size as usize,
        )
        .with_context(|| format!("--map-set {name}: bad value `{value}`"))?;
        if patch.is_whole() {
            map.update(&k, &patch.bytes, BPF_ANY)
        } else {
            map.update_masked(&k, &patch.bytes, &patch.mask, BPF_ANY)
        }
        .with_context(|| format!("--map-set {name}"))
    }

    /// The contents of every map now.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut maps = Vec::with_capacity(self.maps.len());
        for m in &self.maps {
            maps.push(match m.ringbuf_stats() {
                Some(st) => Contents::Ring(st.producer_pos),
                None => Contents::Entries(
                    m.entries()
                        .with_context(|| format!("cannot read map `{}`", m.name()))?
                        .into_iter()
                        .map(|e| (e.key, e.value))
                        .collect(),
                ),
            });
        }
        Ok(Snapshot(maps))
    }

    /// What changed in the maps since `before`, ring-buffer records consumed (scratch).
    pub fn changes(&self, before: &Snapshot) -> anyhow::Result<Vec<MapChange>> {
        let after = self.snapshot()?;
        let mut out = Vec::new();
        for ((m, b), a) in self.maps.iter().zip(&before.0).zip(&after.0) {
            match (b, a) {
                (Contents::Entries(b), Contents::Entries(a)) => {
                    let kt = m.meta().key_type.as_ref();
                    let vt = m.meta().value_type.as_ref();
                    let keys: std::collections::BTreeSet<&Vec<u8>> =
                        b.keys().chain(a.keys()).collect();
                    for k in keys {
                        let (old, new) = (b.get(k), a.get(k));
                        if old != new {
                            out.push(MapChange::Entry {
                                map: m.name().to_string(),
                                key: format_value(kt, k),
                                before: old.map(|v| format_value(vt, v)),
                                after: new.map(|v| format_value(vt, v)),
                            });
                        }
                    }
                }
                (Contents::Ring(b), Contents::Ring(a)) if a != b => {
                    let records = if self.consume_rings {
                        let mut rs = Vec::new();
                        m.ringbuf_consume(|r| rs.push(format_value(None, r)))
                            .with_context(|| format!("cannot consume `{}`", m.name()))?;
                        Some(rs)
                    } else {
                        None
                    };
                    out.push(MapChange::Ring {
                        map: m.name().to_string(),
                        produced_bytes: a.saturating_sub(*b),
                        records,
                    });
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

enum Contents {
    Entries(BTreeMap<Vec<u8>, Vec<u8>>),
    /// A ring buffer's producer position.
    Ring(u64),
}

/// The maps of a world at one moment.
pub struct Snapshot(Vec<Contents>);

/// One change a run made to a map.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MapChange {
    /// An entry created (`before` null), changed, or deleted (`after` null).
    Entry {
        map: String,
        key: Value,
        before: Option<Value>,
        after: Option<Value>,
    },
    /// Records written to a ring buffer (`records`: null where they were not consumed).
    Ring {
        map: String,
        produced_bytes: u64,
        records: Option<Vec<Value>>,
    },
}

impl MapChange {
    /// Whether `other` is the same change, ring records compared only when both worlds
    /// consumed them.
    pub fn same_as(&self, other: &MapChange) -> bool {
        match (self, other) {
            (
                MapChange::Ring {
                    map: a,
                    produced_bytes: pa,
                    records: ra,
                },
                MapChange::Ring {
                    map: b,
                    produced_bytes: pb,
                    records: rb,
                },
            ) => a == b && pa == pb && (ra.is_none() || rb.is_none() || ra == rb),
            _ => self == other,
        }
    }
}
