//! Binding an object's maps to registry maps.

use std::sync::Arc;

use crate::maps::{Map, MapMeta, MapSpec, MapType};
use crate::registry::{MapBinding, ObjectRecord, RegistryError, Writer};

/// One map an object defines.
#[derive(Clone, Debug, PartialEq)]
pub struct MapDef {
    /// Name in the object (`counts`, `.rodata`, …).
    pub name: String,
    /// Definition.
    pub spec: MapSpec,
    /// Key/value types (for typed dumps).
    pub meta: MapMeta,
    /// Global-data maps: the section contents (after `--set`), written into value 0.
    pub initial: Option<Vec<u8>>,
    /// `LIBBPF_PIN_BY_NAME`: bound by its own name, shared across objects and pinned.
    pub pinned: bool,
}

impl MapDef {
    /// Whether this is a global-data map (`.rodata`, `.data`, `.bss`, …).
    pub fn is_global(&self) -> bool {
        self.meta.global_section.is_some() || self.name.starts_with('.')
    }

    /// Whether its contents are read-only for programs (and reset on every load).
    pub fn is_rodata(&self) -> bool {
        self.name.starts_with(".rodata")
    }
}

/// Errors binding maps.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "map `{name}` exists with an incompatible definition: the object defines `{wanted}`, \
         the registry has `{existing}`; remove it (`gpubpf maps rm {name}`) or rename the map"
    )]
    Incompatible {
        name: String,
        wanted: MapSpec,
        existing: MapSpec,
    },
    #[error(
        "map `{name}` changed its definition ({how}): a reload keeps each map with its \
         contents, so its definition must stay; `--recreate-maps` creates changed maps anew, \
         empty, or rename the map in the source"
    )]
    Changed { name: String, how: String },
    #[error(
        "map `{name}` exists already, so it cannot take over `{from}` with its contents; \
         remove it first (`gpubpf maps rm {name}`)"
    )]
    TakeOverTarget { name: String, from: String },
    #[error("global data `{name}`: {len} initial bytes for a {size}-byte value")]
    BadInitial { name: String, len: usize, size: u32 },
    #[error("binding map `{name}`")]
    Registry {
        name: String,
        #[source]
        source: RegistryError,
    },
}

/// A bound map.
#[derive(Debug, Clone)]
pub struct BoundMap {
    /// The opened map.
    pub map: Arc<Map>,
    /// What the registry records about the binding.
    pub binding: MapBinding,
    /// The replaced object's map it took over (another name for the same map).
    pub taken_over: Option<String>,
    /// Whether it replaced a map of the same name whose definition changed (contents lost).
    pub recreated: bool,
}

/// How [`bind_maps_with`] binds.
#[derive(Clone, Copy, Debug, Default)]
pub struct BindOptions<'a> {
    /// The loaded object this one replaces (`load --replace`). Under another name, each map
    /// the old object had privately (`OLD.m`) is taken over by the new object's map of the
    /// same name in the object (`m`): `NEW.m` becomes a second name of the same map.
    pub replacing: Option<&'a ObjectRecord>,
    /// Create a map whose definition changed anew, empty, instead of refusing (unless other
    /// loaded objects share it).
    pub recreate_changed: bool,
}

/// Registry name of a global-data map of object `object`: `object.rodata`, `object.bss`.
pub fn global_map_name(object: &str, section: &str) -> String {
    format!("{object}.{}", section.trim_start_matches('.'))
}

/// Registry name of map `def` of object `object`, as libbpf scopes maps: private to the
/// object (`object.NAME`, `object.rodata`) unless pinned by name (`NAME`, shared).
pub fn registry_map_name(object: &str, def: &MapDef) -> String {
    if def.is_global() {
        global_map_name(object, &def.name)
    } else if def.pinned {
        def.name.clone()
    } else {
        format!("{object}.{}", def.name)
    }
}

/// What `old` → `new` changes, field by field (`value 16B -> 24B, max_entries 1 -> 2`).
pub fn spec_change(old: &MapSpec, new: &MapSpec) -> String {
    let mut parts = Vec::new();
    if old.map_type != new.map_type {
        parts.push(format!("type {} -> {}", old.map_type, new.map_type));
    }
    if old.key_size != new.key_size {
        parts.push(format!("key {}B -> {}B", old.key_size, new.key_size));
    }
    if old.value_size != new.value_size {
        parts.push(format!("value {}B -> {}B", old.value_size, new.value_size));
    }
    if old.max_entries != new.max_entries {
        parts.push(format!(
            "max_entries {} -> {}",
            old.max_entries, new.max_entries
        ));
    }
    if old.flags != new.flags {
        parts.push(format!("flags {:#x} -> {:#x}", old.flags, new.flags));
    }
    parts.join(", ")
}

/// Binds every map of `defs` (in object order) for object `object`: its private maps
/// (`object.NAME`, carried over when the object is loaded again under the same name) and
/// the pinned ones by name (shared with every object that pins the same definition; pinned
/// on creation). Global data of `.rodata*` sections is (re)written from the object on
/// every load; `.data`/`.bss` keep their values when bound to an existing map.
pub fn bind_maps(
    w: &mut Writer<'_>,
    object: &str,
    defs: &[MapDef],
) -> Result<Vec<BoundMap>, BindError> {
    bind_maps_with(w, object, defs, &BindOptions::default())
}

/// What binding one map does.
enum Action {
    Open(Arc<Map>),
    Create,
    TakeOver(String),
    Recreate,
}

/// [`bind_maps`] with options (`load --replace`, `--recreate-maps`). Every map is checked
/// before any is created, taken over or recreated, so a refused binding changes nothing.
pub fn bind_maps_with(
    w: &mut Writer<'_>,
    object: &str,
    defs: &[MapDef],
    opts: &BindOptions<'_>,
) -> Result<Vec<BoundMap>, BindError> {
    let reg_err = |name: &str| {
        let name = name.to_string();
        move |source| BindError::Registry { name, source }
    };
    let objects = w.registry().snapshot().map_err(reg_err(object))?.objects;
    // Loaded objects other than this one and the one it replaces that bind `name`.
    let others = |name: &str| -> bool {
        objects.iter().any(|o| {
            o.name != object
                && opts.replacing.is_none_or(|r| r.name != o.name)
                && o.maps.iter().any(|b| b.registry_name == name)
        })
    };
    let mut plan = Vec::with_capacity(defs.len());
    for def in defs {
        let name = registry_map_name(object, def);
        // Only a map scoped to the replaced object (`OLD.m`) is taken over under the new
        // object's name; a map pinned by name is the same registry map for both, so it is
        // simply bound again, with its contents.
        let from = opts.replacing.and_then(|r| {
            let old_name = registry_map_name(&r.name, def);
            if old_name == name {
                return None;
            }
            r.maps
                .iter()
                .find(|b| b.object_name == def.name && b.registry_name == old_name)
                .map(|b| b.registry_name.clone())
        });
        if let Some(from) = &from {
            if w.registry()
                .map_path(&name)
                .map_err(reg_err(&name))?
                .exists()
            {
                return Err(BindError::TakeOverTarget {
                    name,
                    from: from.clone(),
                });
            }
        }
        let looked_up = from.clone().unwrap_or_else(|| name.clone());
        let looked_up = looked_up.as_str();
        let existing = match w.registry().open_map(looked_up) {
            Ok(m) => Some(m),
            Err(RegistryError::NoSuchMap { .. }) => None,
            Err(e) => return Err(reg_err(looked_up)(e)),
        };
        let action = match (existing, from) {
            (None, _) => Action::Create,
            (Some(m), from) if m.spec() == &def.spec => match from {
                Some(f) => Action::TakeOver(f),
                None => Action::Open(m),
            },
            (Some(m), from) => {
                if others(looked_up) {
                    return Err(BindError::Incompatible {
                        name: looked_up.to_string(),
                        wanted: def.spec,
                        existing: *m.spec(),
                    });
                }
                if !opts.recreate_changed {
                    return Err(BindError::Changed {
                        name: looked_up.to_string(),
                        how: spec_change(m.spec(), &def.spec),
                    });
                }
                // Under a new name the old map simply retires with the replaced object.
                if from.is_some() {
                    Action::Create
                } else {
                    Action::Recreate
                }
            }
        };
        plan.push((def, name, action));
    }

    let mut out = Vec::with_capacity(defs.len());
    for (index, (def, registry_name, action)) in plan.into_iter().enumerate() {
        let mut meta = def.meta.clone();
        if def.is_global() && meta.global_section.is_none() {
            meta.global_section = Some(def.name.clone());
        }
        let (map, created, taken_over, recreated) = match action {
            Action::Open(m) => (m, false, None, false),
            Action::Create => {
                let (m, created) = w
                    .open_or_create_map(&registry_name, &def.spec, &meta)
                    .map_err(reg_err(&registry_name))?;
                (m, created, None, false)
            }
            Action::TakeOver(from) => {
                let m = w
                    .take_over_map(&from, &registry_name)
                    .map_err(reg_err(&registry_name))?;
                (m, false, Some(from), false)
            }
            Action::Recreate => {
                let m = w
                    .recreate_map(&registry_name, &def.spec, &meta)
                    .map_err(reg_err(&registry_name))?;
                (m, true, None, true)
            }
        };
        if map.spec() != &def.spec {
            // Created by someone else between the check and now (e.g. the trace ring).
            return Err(BindError::Incompatible {
                name: registry_name,
                wanted: def.spec,
                existing: *map.spec(),
            });
        }
        if def.pinned {
            w.pin_map(&registry_name).map_err(reg_err(&registry_name))?;
        }
        if let Some(init) = &def.initial {
            if def.spec.map_type != MapType::Array || init.len() > def.spec.value_size as usize {
                return Err(BindError::BadInitial {
                    name: registry_name,
                    len: init.len(),
                    size: def.spec.value_size,
                });
            }
            if created || def.is_rodata() {
                let mut v = init.clone();
                v.resize(def.spec.value_size as usize, 0);
                map.update(&0u32.to_ne_bytes(), &v, crate::maps::BPF_ANY)
                    .map_err(|source| BindError::Registry {
                        name: registry_name.clone(),
                        source: RegistryError::Map {
                            name: registry_name.clone(),
                            source,
                        },
                    })?;
            }
        }
        out.push(BoundMap {
            map,
            binding: MapBinding {
                index,
                object_name: def.name.clone(),
                registry_name,
                spec: def.spec,
                created,
            },
            taken_over,
            recreated,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::prepare;
    use crate::registry::Registry;
    use gpubpf_isa::opcode::{BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE, LDDW};
    use gpubpf_isa::Insn;

    fn def(name: &str, t: MapType, v: u32, n: u32) -> MapDef {
        MapDef {
            name: name.into(),
            spec: MapSpec {
                map_type: t,
                key_size: 4,
                value_size: v,
                max_entries: n,
                flags: 0,
            },
            meta: MapMeta::default(),
            initial: None,
            pinned: false,
        }
    }

    #[test]
    fn bind_reuses_creates_and_rejects_conflicts() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::open(&d.path().join("reg")).unwrap();
        let mut rodata = def(".rodata", MapType::Array, 8, 1);
        rodata.initial = Some(vec![1, 2, 3]);
        let mut shared = def("shared", MapType::Hash, 8, 64);
        shared.pinned = true;
        let defs = vec![def("counts", MapType::Hash, 8, 64), rodata.clone(), shared];
        let b = bind_maps(&mut r.writer().unwrap(), "p", &defs).unwrap();
        assert!(b.iter().all(|b| b.binding.created));
        let names: Vec<_> = b.iter().map(|b| b.binding.registry_name.as_str()).collect();
        assert_eq!(names, ["p.counts", "p.rodata", "shared"]);
        assert!(r.is_pinned("shared") && !r.is_pinned("p.counts"));
        assert_eq!(
            b[1].map.lookup(&0u32.to_ne_bytes()).unwrap().unwrap(),
            vec![1, 2, 3, 0, 0, 0, 0, 0]
        );
        b[0].map.update(&1u32.to_ne_bytes(), &[9; 8], 0).unwrap();
        // Reload: counters kept, rodata rewritten.
        let mut defs2 = defs.clone();
        defs2[1].initial = Some(vec![4]);
        let b2 = bind_maps(&mut r.writer().unwrap(), "p", &defs2).unwrap();
        assert!(b2.iter().all(|b| !b.binding.created));
        assert_eq!(
            b2[0].map.lookup(&1u32.to_ne_bytes()).unwrap(),
            Some(vec![9; 8])
        );
        assert_eq!(
            b2[1].map.lookup(&0u32.to_ne_bytes()).unwrap().unwrap()[0],
            4
        );
        // Another object: its own private `counts`; a pinned map is shared, and a
        // conflicting definition of it names both definitions.
        let mut other = def("shared", MapType::Hash, 8, 64);
        other.pinned = true;
        let q = bind_maps(
            &mut r.writer().unwrap(),
            "q",
            &[def("counts", MapType::Hash, 16, 64), other.clone()],
        )
        .unwrap();
        assert_eq!(q[0].binding.registry_name, "q.counts");
        assert!(q[0].binding.created && !q[1].binding.created);
        other.spec.value_size = 16;
        let e = bind_maps(&mut r.writer().unwrap(), "q", &[other.clone()]).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, BindError::Changed { .. }) && msg.contains("value 8B -> 16B"),
            "{msg}"
        );
        // Shared with a loaded object: an incompatible definition, naming both, even when
        // changed maps may be recreated.
        let mut user = crate::registry::ObjectRecord {
            format: crate::registry::RECORD_FORMAT,
            name: "p".into(),
            id: 1,
            replaced: None,
            object_file: "object.o".into(),
            object_sha256: String::new(),
            object_size: 0,
            source_path: None,
            loaded_at_unix: 0,
            globals: Default::default(),
            maps: b.iter().map(|b| b.binding.clone()).collect(),
            programs: vec![],
            shadow: false,
        };
        r.writer().unwrap().publish_object(&user, b"").unwrap();
        let recreate = BindOptions {
            replacing: None,
            recreate_changed: true,
        };
        let e =
            bind_maps_with(&mut r.writer().unwrap(), "q", &[other.clone()], &recreate).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("value 16B") && msg.contains("value 8B"),
            "{msg}"
        );
        // Only this object's: recreated, empty, with its pin.
        user.maps.retain(|m| m.registry_name != "shared");
        r.writer().unwrap().publish_object(&user, b"").unwrap();
        let q2 = bind_maps_with(&mut r.writer().unwrap(), "q", &[other], &recreate).unwrap();
        assert!(q2[0].recreated && q2[0].binding.created);
        assert_eq!(q2[0].map.spec().value_size, 16);
        assert!(r.is_pinned("shared"));

        // Prepare: handle and value addresses.
        let maps: Vec<_> = b2.iter().map(|b| b.map.clone()).collect();
        let insns = vec![
            Insn::new(LDDW, 1, BPF_PSEUDO_MAP_IDX, 0, 0),
            Insn::new(0, 0, 0, 0, 0),
            Insn::new(LDDW, 2, BPF_PSEUDO_MAP_IDX_VALUE, 0, 1),
            Insn::new(0, 0, 0, 0, 4),
            Insn::new(0x95, 0, 0, 0, 0),
        ];
        let p = prepare(&insns, &maps).unwrap();
        let imm =
            |i: usize| (p.insns[i].imm as u32 as u64) | ((p.insns[i + 1].imm as u32 as u64) << 32);
        assert_eq!(imm(0), maps[0].handle());
        assert_eq!(imm(2), maps[1].array_value_ptr(0).unwrap() as u64 + 4);
        assert!(p.insns.iter().all(|i| i.src == 0));
        let mut bad = insns.clone();
        bad[3].imm = 8;
        assert!(matches!(
            prepare(&bad, &maps),
            Err(crate::program::PrepareError::BadValueOffset { .. })
        ));
        bad[2].imm = 0;
        bad[3].imm = 0;
        assert!(matches!(
            prepare(&bad, &maps),
            Err(crate::program::PrepareError::NotAnArray { .. })
        ));
        bad[0].imm = 7;
        assert!(matches!(
            prepare(&bad, &maps),
            Err(crate::program::PrepareError::BadMapIndex { .. })
        ));
    }

    #[test]
    fn a_replacement_binds_pinned_maps_again_and_takes_over_private_ones() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::open(&d.path().join("reg")).unwrap();
        let mut shared = def("shared", MapType::Hash, 8, 64);
        shared.pinned = true;
        let defs = vec![def("counts", MapType::Hash, 8, 64), shared];
        let a = bind_maps(&mut r.writer().unwrap(), "a", &defs).unwrap();
        a[1].map.update(&1u32.to_ne_bytes(), &[7; 8], 0).unwrap();
        let old = crate::registry::ObjectRecord {
            format: crate::registry::RECORD_FORMAT,
            name: "a".into(),
            id: 1,
            replaced: None,
            object_file: "object.o".into(),
            object_sha256: String::new(),
            object_size: 0,
            source_path: None,
            loaded_at_unix: 0,
            globals: Default::default(),
            maps: a.iter().map(|b| b.binding.clone()).collect(),
            programs: vec![],
            shadow: false,
        };
        r.writer().unwrap().publish_object(&old, b"").unwrap();
        for name in ["a", "b"] {
            let opts = BindOptions {
                replacing: Some(&old),
                recreate_changed: false,
            };
            let b = bind_maps_with(&mut r.writer().unwrap(), name, &defs, &opts).unwrap();
            // The pinned map is the same registry map for both objects: bound again.
            assert_eq!(b[1].binding.registry_name, "shared");
            assert_eq!(b[1].taken_over, None);
            assert!(!b[1].binding.created);
            assert_eq!(
                b[1].map.lookup(&1u32.to_ne_bytes()).unwrap(),
                Some(vec![7; 8])
            );
            // The private one is taken over only under another name.
            let expected = (name != "a").then(|| "a.counts".to_string());
            assert_eq!(b[0].taken_over, expected, "{name}");
            assert_eq!(b[0].binding.registry_name, format!("{name}.counts"));
        }
    }
}
