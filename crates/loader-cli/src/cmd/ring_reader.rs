//! What `gpubpf trace` and `gpubpf audit` share: reading one of the registry's rings like
//! `bpftool prog tracelog` — everything there now and exit, or follow (`-f`) until
//! interrupted, saying on stderr when records were dropped because the ring was full.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use gpubpf_runtime::maps::Map;
use gpubpf_runtime::registry::{Registry, RegistryError};

use crate::output::{print_line, Output};

/// How often `-f` looks for new records: at once again while records keep coming, backing
/// off to [`Poll::IDLE`] when none do. A fixed 100 ms dropped most of what a launch loop
/// writes: trace.o's 256 KiB ring holds ~2 200 events, ~8 ms of empty-kernel launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll(Duration);

impl Poll {
    /// The wait after a read that found records.
    pub const BUSY: Duration = Duration::from_millis(1);
    /// The longest wait, reached after ~7 empty reads in a row.
    pub const IDLE: Duration = Duration::from_millis(100);

    /// A reader that has read nothing yet.
    pub fn new() -> Self {
        Self(Self::BUSY)
    }

    /// How long to sleep after a read that found `records` records.
    pub fn next(&mut self, records: usize) -> Duration {
        self.0 = if records > 0 {
            Self::BUSY
        } else {
            (self.0 * 2).min(Self::IDLE)
        };
        self.0
    }
}

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
        let mut poll = Poll::new();
        loop {
            let records = self.take(ring, decode)?;
            let n = records.len();
            for r in records {
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
            std::thread::sleep(poll.next(n));
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

#[cfg(test)]
mod tests {
    use super::Poll;

    #[test]
    fn polling_stays_quick_while_records_come_and_backs_off_when_they_stop() {
        let mut p = Poll::new();
        assert_eq!(p.next(5), Poll::BUSY);
        let waits: Vec<_> = (0..9).map(|_| p.next(0).as_millis()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 100, 100, 100]);
        assert_eq!(
            p.next(1),
            Poll::BUSY,
            "one record brings the quick polling back"
        );
    }
}
