//! Map lifetimes, as libbpf and bpftool have them: a map lives while a loaded object binds
//! it or while it is pinned. `pins/NAME` (an empty file) pins map `NAME`: maps declared
//! `__uint(pinning, LIBBPF_PIN_BY_NAME)` are pinned when bound, others with
//! `gpubpf maps pin`. Unloading or replacing an object removes the maps it bound that no
//! loaded object binds any more and that are not pinned.

use std::path::PathBuf;

use super::{check_name, io_err, Registry, RegistryError, Writer};

impl Registry {
    /// The pin directory.
    pub fn pins_dir(&self) -> PathBuf {
        self.home.join("pins")
    }

    /// Whether map `name` is pinned.
    pub fn is_pinned(&self, name: &str) -> bool {
        check_name(name).is_ok() && self.pins_dir().join(name).is_file()
    }

    /// The registry name a user means by `name`: `name` itself when such a map exists,
    /// else the one map named `OBJECT.name` (an object's private map, `stats` for
    /// `trace.stats`); several candidates are an error listing them.
    pub fn resolve_map_name(&self, name: &str) -> Result<String, RegistryError> {
        check_name(name)?;
        if self.maps_dir().join(name).exists() {
            return Ok(name.to_string());
        }
        let suffix = format!(".{name}");
        let found: Vec<String> = self
            .map_names()?
            .into_iter()
            .filter(|n| n.ends_with(&suffix))
            .collect();
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(RegistryError::NoSuchMap { name: name.into() }),
            several => Err(RegistryError::AmbiguousMap {
                name: name.into(),
                candidates: several.join(", "),
            }),
        }
    }
}

impl Writer<'_> {
    /// Pins map `name` (it must exist); `Ok(false)` when it already was.
    pub fn pin_map(&mut self, name: &str) -> Result<bool, RegistryError> {
        let map = self.reg.map_path(name)?;
        if !map.exists() {
            return Err(RegistryError::NoSuchMap { name: name.into() });
        }
        if self.reg.is_pinned(name) {
            return Ok(false);
        }
        let dir = self.reg.pins_dir();
        super::home::ensure_private_dir(&dir)?;
        let pin = dir.join(name);
        std::fs::write(&pin, b"").map_err(io_err(&pin, "pin"))?;
        Ok(true)
    }

    /// Unpins map `name`, then removes it when no loaded object binds it (as the last
    /// reference of a bpftool-pinned map goes with its pin). Returns whether it was removed.
    pub fn unpin_map(&mut self, name: &str) -> Result<bool, RegistryError> {
        check_name(name)?;
        if !self.reg.is_pinned(name) {
            return Err(RegistryError::NotPinned { name: name.into() });
        }
        let pin = self.reg.pins_dir().join(name);
        std::fs::remove_file(&pin).map_err(io_err(&pin, "unpin"))?;
        Ok(!self.remove_unused_maps(&[name.to_string()])?.is_empty())
    }

    /// Removes the maps of `candidates` that no loaded object binds and that are not
    /// pinned; returns their names. They are *retired*: their files go when the change is
    /// committed, after the generation moved, so that a process still reading the previous
    /// generation finds every map it names. Processes that have them mapped keep their
    /// mappings.
    pub fn remove_unused_maps(
        &mut self,
        candidates: &[String],
    ) -> Result<Vec<String>, RegistryError> {
        let objects = self.reg.snapshot()?.objects;
        let mut removed = Vec::new();
        for name in candidates {
            if removed.contains(name) || self.reg.is_pinned(name) {
                continue;
            }
            let used = objects
                .iter()
                .any(|o| o.maps.iter().any(|b| &b.registry_name == name));
            if used || !self.reg.map_path(name)?.exists() {
                continue;
            }
            removed.push(name.clone());
        }
        for name in &removed {
            self.retire_map(name)?;
        }
        Ok(removed)
    }

    /// Drops the pin of map `name` if there is one (its map is being removed).
    pub(super) fn drop_pin(&mut self, name: &str) -> Result<(), RegistryError> {
        let pin = self.reg.pins_dir().join(name);
        match std::fs::remove_file(&pin) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&pin, "unpin")(e)),
        }
    }
}
