//! What `gpubpf trace` and `gpubpf audit` share: reading one of the registry's rings like
//! `bpftool prog tracelog` — everything there now and exit, or follow (`-f`) until
//! interrupted, saying on stderr when records were dropped because the ring was full.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use gpubpf_runtime::maps::Map;
use gpubpf_runtime::registry::{Registry, RegistryError};

use crate::output::{print_line, Output};

/// How often `-f` looks for new records.
const POLL: Duration = Duration::from_millis(100);

/// One ring: its map name, what its records are called and how a decoded record is
/// printed.
pub struct Ring<'a, T> {
    /// Map name in the registry (`trace`, `audit`, a policy's ring for `gpubpf events`).
    pub name: &'a str,
    /// What one record is, for messages (`trace line`, `audit record`).
    pub record: &'static str,
    /// Its text line.
    pub text: fn(&T) -> String,
    /// Its JSON form.
    pub json: fn(&T) -> serde_json::Value,
}

impl<T> Ring<'_, T> {
    fn take(&self, ring: &Map, decode: &dyn Fn(&[u8]) -> T) -> anyhow::Result<Vec<T>> {
        let mut v = Vec::new();
        ring.ringbuf_consume(|r| v.push(decode(r)))
            .with_context(|| format!("cannot read the {} ring", self.name))?;
        Ok(v)
    }

    /// Prints (and consumes) the records of one of the registry's own rings, decoded with
    /// `decode`: all of them at once, or following with `follow` (the ring is then created
    /// with `open_or_create` when missing, to wait for records).
    pub fn run(
        &self,
        open_or_create: fn(&Registry) -> Result<Arc<Map>, RegistryError>,
        decode: fn(&[u8]) -> T,
        follow: bool,
        out: &Output,
    ) -> anyhow::Result<()> {
        let Some(reg) = super::existing_registry()? else {
            if follow {
                return Err(super::no_registry());
            }
            // Nothing has run under the shim yet: nothing to print.
            return self.finish(out, Vec::new());
        };
        // Reading a ring consumes its records: the owner's, in a system registry.
        reg.check_owner()?;
        let what = || format!("cannot open the {} ring", self.name);
        let ring: Arc<Map> = if follow {
            open_or_create(&reg).with_context(what)?
        } else {
            match reg.open_map(self.name) {
                Ok(m) => m,
                Err(RegistryError::NoSuchMap { .. }) => return self.finish(out, Vec::new()),
                Err(e) => return Err(e).with_context(what),
            }
        };
        anyhow::ensure!(
            ring.ringbuf_stats().is_some(),
            "map `{}` is a {} map, not the {} ring",
            self.name,
            ring.spec().map_type,
            self.name
        );
        self.read(&ring, &decode, follow, out)
    }

    /// Prints (and consumes) the records of `ring`, decoded with `decode`: all of them at
    /// once, or following with `follow`.
    pub fn read(
        &self,
        ring: &Map,
        decode: &dyn Fn(&[u8]) -> T,
        follow: bool,
        out: &Output,
    ) -> anyhow::Result<()> {
        if !follow {
            let records = self.take(ring, decode)?;
            return self.finish(out, records);
        }
        let mut dropped = ring.ringbuf_stats().map_or(0, |s| s.dropped);
        loop {
            for r in self.take(ring, decode)? {
                if out.json() {
                    out.print_json(&(self.json)(&r))?;
                } else {
                    print_line(&(self.text)(&r))?;
                }
            }
            let now = ring.ringbuf_stats().map_or(dropped, |s| s.dropped);
            if now > dropped {
                eprintln!(
                    "gpubpf: {} {}(s) dropped: the ring was full",
                    now - dropped,
                    self.record
                );
                dropped = now;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Prints the records read without `-f`: a JSON array, or one line each.
    fn finish(&self, out: &Output, records: Vec<T>) -> anyhow::Result<()> {
        if out.json() {
            let v: Vec<serde_json::Value> = records.iter().map(self.json).collect();
            return out.print_json(&v);
        }
        for r in &records {
            print_line(&(self.text)(r))?;
        }
        Ok(())
    }
}
