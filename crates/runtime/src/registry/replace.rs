//! Changes that must look atomic to readers, although they touch several entries:
//! replacing an object (possibly under another name) in one generation, retiring what a
//! change leaves behind until the generation moved, and the object/program id counter.
//!
//! A reader ([`Registry::snapshot`]) takes no lock and trusts any state it read while the
//! generation stood still, so until [`Writer::commit`] bumps the generation every step only
//! adds entries or exchanges one atomically:
//!
//! - `load NEW --replace OLD` (names differ): `progs/NEW` is published with
//!   `replaced: {id, name}` of OLD; a reader that sees both hides OLD
//!   ([`ObjectRecord::supersedes`]), one that does not see NEW yet (it listed the directory
//!   before) sees OLD alone. `progs/OLD` is retired.
//! - A map NEW takes over from OLD gets a second name (a hard link, `OLD.m` → `NEW.m`: one
//!   file, one shared memory), so updates made by processes still running OLD are kept.
//! - Retired entries (OLD's directory, maps nothing binds any more) are removed after the
//!   bump. They are listed in `.tmp-retire-PID` meanwhile: when a writer is killed before
//!   removing them, the next writer does it (and bumps the generation, which the killed one
//!   may not have done).

use std::path::PathBuf;
use std::sync::Arc;

use crate::maps::{Map, MapMeta, MapSpec};

use super::{check_name, io_err, ObjectRecord, Registry, RegistryError, Writer};

/// Prefix of retire journals in the registry root (`.tmp-retire-PID`).
const JOURNAL_PREFIX: &str = ".tmp-retire-";
/// File of the id counter in the registry root.
const IDS_FILE: &str = "ids";

/// An object whose directory goes when the change is committed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct RetiredObject {
    name: String,
    /// Removed only while `progs/NAME` still holds the object with this id.
    id: u64,
}

/// What a writer removes after the generation moved (and journals until then).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Retired {
    objects: Vec<RetiredObject>,
    maps: Vec<String>,
}

impl Retired {
    fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.maps.is_empty()
    }
}

impl Registry {
    fn journal_path(&self) -> PathBuf {
        self.home
            .join(format!("{JOURNAL_PREFIX}{}", std::process::id()))
    }

    /// The record at `progs/NAME`, if it is readable (replaced ones included).
    fn record_on_disk(&self, name: &str) -> Option<ObjectRecord> {
        self.read_record(name).ok()
    }
}

impl Writer<'_> {
    /// Replaces loaded object `old` with `record` (and its object bytes) in this writer's
    /// one generation; returns the record of `old`.
    ///
    /// Under the same name this is [`Writer::publish_object`] (an atomic exchange). Under
    /// another name, `record.replaced` must name `old` (its id and name): `record` is
    /// published beside it and hides it from readers at once, and `old` is retired.
    /// Refused when `old` is not loaded or when another object has `record`'s name.
    pub fn replace_object(
        &mut self,
        old: &str,
        record: &ObjectRecord,
        object: &[u8],
    ) -> Result<ObjectRecord, RegistryError> {
        let previous = self.reg.object(old)?;
        // Its maps go at commit when nothing binds them (and they are not pinned), also
        // when this writer is killed after publishing.
        self.retire_maps_of(&previous)?;
        if record.name == old {
            self.publish_object(record, object)?;
            return Ok(previous);
        }
        check_name(&record.name)?;
        let err = |reason: String| RegistryError::Replace {
            old: old.into(),
            new: record.name.clone(),
            reason,
        };
        if self.reg.progs_dir().join(&record.name).exists() {
            return Err(err(format!(
                "`{}` is loaded too; unload it first or replace it instead",
                record.name
            )));
        }
        if !record.supersedes(&previous) {
            return Err(err(format!(
                "the new record must name the object it replaces (id {}, name `{old}`)",
                previous.id
            )));
        }
        // Journaled first: if this writer dies after publishing, the next one removes the
        // old object; it removes it only once a loaded record supersedes it.
        self.retire(|r| {
            r.objects.push(RetiredObject {
                name: previous.name.clone(),
                id: previous.id,
            })
        })?;
        self.publish_object(record, object)?;
        Ok(previous)
    }

    /// Gives map `from` the second name `to` (a hard link: the same file and the same
    /// shared memory under both names, so nothing written through either is lost); `from`'s
    /// pin, if any, moves to `to`. `from` stays for the caller to retire. `to` goes again at
    /// commit unless a loaded object binds it by then (a failed or killed load leaves no
    /// second name behind).
    pub fn take_over_map(&mut self, from: &str, to: &str) -> Result<Arc<Map>, RegistryError> {
        let src = self.reg.map_path(from)?;
        let dst = self.reg.map_path(to)?;
        if !dst.exists() {
            self.retire_map(to)?;
        }
        match std::fs::hard_link(&src, &dst) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RegistryError::NoSuchMap { name: from.into() })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(RegistryError::Map {
                    name: to.into(),
                    source: crate::maps::MapError::AlreadyExists { path: dst },
                })
            }
            Err(e) => return Err(io_err(&dst, "link")(e)),
        }
        self.changed = true;
        if self.reg.is_pinned(from) {
            self.pin_map(to)?;
            self.drop_pin(from)?;
        }
        self.reg.open_map(to)
    }

    /// Creates map `name` anew, empty, in place of the existing file of that name (built
    /// under a temporary name, then renamed over it). Processes that have the old one
    /// mapped keep it; its pin stays.
    pub fn recreate_map(
        &mut self,
        name: &str,
        spec: &MapSpec,
        meta: &MapMeta,
    ) -> Result<Arc<Map>, RegistryError> {
        let path = self.reg.map_path(name)?;
        let tmp = self
            .reg
            .maps_dir()
            .join(format!(".tmp-{}-recreate-{name}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let meta = MapMeta {
            name: name.into(),
            ..meta.clone()
        };
        let created = Map::create(&tmp, spec, &meta).map_err(|source| RegistryError::Map {
            name: name.into(),
            source,
        })?;
        drop(created);
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(&path, "replace")(e));
        }
        self.changed = true;
        self.reg.open_map(name)
    }

    /// Reserves `count` consecutive ids and returns the first. Ids start at 1, increase and
    /// are never reused: the counter (`ids`) only grows, and never stays below what a loaded
    /// object already uses.
    pub fn allocate_ids(&mut self, count: u64) -> Result<u64, RegistryError> {
        let path = self.reg.home.join(IDS_FILE);
        let stored = match super::home::read_nofollow(&path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
        {
            Ok(s) => Some(
                s.trim()
                    .parse::<u64>()
                    .map_err(|_| RegistryError::CorruptIds {
                        path: path.clone(),
                        reason: format!(
                    "`{}` is not a number; remove it to count on from the highest loaded id",
                    s.trim()
                ),
                    })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&path, "read")(e)),
        };
        let floor = self
            .reg
            .snapshot()?
            .objects
            .iter()
            .map(|o| o.id + ObjectRecord::ids_needed(o.programs.len()))
            .max()
            .unwrap_or(1);
        let first = stored.unwrap_or(1).max(floor).max(1);
        let next = first
            .checked_add(count)
            .ok_or_else(|| RegistryError::CorruptIds {
                path: path.clone(),
                reason: "the counter overflowed".into(),
            })?;
        let tmp = self
            .reg
            .home
            .join(format!(".tmp-ids-{}", std::process::id()));
        std::fs::write(&tmp, format!("{next}\n")).map_err(io_err(&tmp, "write"))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path, "write"))?;
        Ok(first)
    }

    /// Retires the maps `record` binds: each goes at commit if no loaded object binds it and
    /// it is not pinned.
    pub(super) fn retire_maps_of(&mut self, record: &ObjectRecord) -> Result<(), RegistryError> {
        let names: Vec<String> = record
            .maps
            .iter()
            .map(|b| b.registry_name.clone())
            .filter(|n| !self.retired.maps.contains(n))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        self.retire(|r| r.maps.extend(names))
    }

    /// Retires map `name`: removed when the change is committed (see [`Writer::commit`]).
    pub(super) fn retire_map(&mut self, name: &str) -> Result<(), RegistryError> {
        if self.retired.maps.iter().any(|m| m == name) {
            return Ok(());
        }
        let name = name.to_string();
        self.retire(|r| r.maps.push(name))
    }

    fn retire(&mut self, add: impl FnOnce(&mut Retired)) -> Result<(), RegistryError> {
        add(&mut self.retired);
        self.changed = true;
        self.write_journal()
    }

    /// Writes the journal of what this writer retired (atomically: temporary + rename).
    fn write_journal(&self) -> Result<(), RegistryError> {
        let path = self.reg.journal_path();
        let tmp = self
            .reg
            .home
            .join(format!(".tmp-journal-{}", std::process::id()));
        let json = serde_json::to_vec(&self.retired).map_err(|e| RegistryError::Io {
            path: tmp.clone(),
            op: "encode",
            source: std::io::Error::other(e),
        })?;
        std::fs::write(&tmp, json).map_err(io_err(&tmp, "write"))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path, "write"))
    }

    /// Removes what was retired (after the bump); called once, by [`Writer::commit`] or on
    /// drop. Failures are logged: the entries stay, harmless, for `maps rm`/the next writer.
    pub(super) fn remove_retired(&mut self) {
        let retired = std::mem::take(&mut self.retired);
        if retired.is_empty() {
            return;
        }
        for o in &retired.objects {
            self.remove_retired_object(o);
        }
        let objects = match self.reg.snapshot() {
            Ok(s) => s.objects,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the registry; retired maps are kept");
                return;
            }
        };
        for name in &retired.maps {
            // Bound again or pinned since it was retired: keep it.
            let used = objects
                .iter()
                .any(|o| o.maps.iter().any(|b| &b.registry_name == name));
            if used || self.reg.is_pinned(name) {
                continue;
            }
            let Ok(path) = self.reg.map_path(name) else {
                continue;
            };
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::debug!(map = %name, "removed"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(map = %name, error = %e, "cannot remove a retired map"),
            }
        }
        let _ = std::fs::remove_file(self.reg.journal_path());
    }

    /// Removes `progs/NAME` while it still holds the retired object and a loaded record
    /// supersedes it (its replacement was published).
    fn remove_retired_object(&mut self, o: &RetiredObject) {
        let Some(rec) = self.reg.record_on_disk(&o.name).filter(|r| r.id == o.id) else {
            return;
        };
        let superseded = super::list_names(&self.reg.progs_dir())
            .unwrap_or_default()
            .iter()
            .filter_map(|n| self.reg.record_on_disk(n))
            .any(|r| r.supersedes(&rec));
        if !superseded {
            return;
        }
        let dir = self.reg.progs_dir().join(&o.name);
        let tmp = self
            .reg
            .progs_dir()
            .join(format!(".tmp-del-{}-{}", std::process::id(), o.name));
        match std::fs::rename(&dir, &tmp) {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            Err(e) => {
                tracing::warn!(program = %o.name, error = %e, "cannot remove a replaced object")
            }
        }
    }

    /// Finishes the journals of writers that were killed before removing what they retired:
    /// replaced objects go now (readers already hide them), maps when this change commits;
    /// either way the generation moves, which the killed writer may not have done.
    pub(super) fn finish_dead_journals(&mut self) {
        let Ok(rd) = std::fs::read_dir(&self.reg.home) else {
            return;
        };
        let journals: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(JOURNAL_PREFIX))
            .map(|e| e.path())
            .collect();
        for path in journals {
            let parsed = super::home::read_nofollow(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Retired>(&b).ok());
            match parsed {
                Some(r) => {
                    tracing::info!(path = %path.display(), "finishing a dead writer's change");
                    for o in &r.objects {
                        self.remove_retired_object(o);
                    }
                    for m in r.maps {
                        if !self.retired.maps.contains(&m) {
                            self.retired.maps.push(m);
                        }
                    }
                    self.changed = true;
                }
                None => tracing::warn!(path = %path.display(), "unreadable retire journal"),
            }
            let _ = std::fs::remove_file(&path);
        }
        if !self.retired.is_empty() {
            if let Err(e) = self.write_journal() {
                tracing::warn!(error = %e, "cannot journal the maps a dead writer retired");
            }
        }
    }
}
