//! The verification cache of a user registry: what the verifier decided about an exact
//! input, so that the processes of the registry's user need not decide it again.
//!
//! Every process under the shim re-verifies every program it runs (a process never takes
//! the registry's word that a program is safe). In a **user** registry the programs, the
//! registry and the processes all belong to one user, and verifying the same input with the
//! same verifier always gives the same answer, so the first verification's result may
//! stand for the others: `gpubpf load` and each process that had to verify record an
//! accepted input in `$GPUBPF_HOME/verified/`, and the next process finds it there.
//!
//! - **The key is the whole input** ([`key`]): SHA-256 over the verifier's own source hash
//!   ([`gpubpf_verifier::SOURCE_HASH`], the verifier's and the ISA crate's sources: a shim
//!   whose verifier changed in any way never reuses an entry), the verifier's
//!   configuration, every instruction slot, every map as the verifier sees it (kind, sizes,
//!   read-only, name) and the attach point's program context (ctx layout with each field's
//!   permissions, return rule). Only the C line info is left out: the verifier reads it to
//!   word rejections and logs, and an entry exists only for an accepted input verified
//!   without a log. A corrupt object, a changed map or a map this process may only read
//!   gives another key, hence a miss and a full verification.
//! - **An entry is what the verifier returned** (`VerifyStats` less time and log): the
//!   unreached instructions that become traps, the ctx fields read (the shim fills only
//!   those) and the counters. An entry that cannot be read or parsed is a miss.
//! - **Only a writer the process already trusts with its memory is believed.** A user
//!   registry's home is private (mode 0700, owned by the user:
//!   `registry::check_private_dir`), and `verified/` is checked the same way before it is
//!   read: whoever can write there can already run any code as that user. A **system**
//!   registry owned by **root** keeps its cache readable by all and writable by root alone
//!   (`verified/` 0755, entries 0644, checked with `system::check_owner_dir`): root's
//!   `gpubpf load` records what it verified, every user's processes take it, and only root's
//!   own processes add to it; root can already run code in any process. A system registry
//!   of **any other owner has no cache**: trusting it would let that account run unverified
//!   code in other users' processes, so each of their processes verifies everything itself
//!   ([`VerifyCache::of`] returns `None`).
//! - `GPUBPF_VERIFY_CACHE=off` turns it off (the shim reads it once at initialisation).
//!
//! docs/design-decisions.md (Dispatch) records why.

use std::hash::Hasher;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use gpubpf_verifier::{
    LineInfo, Verifier, VerifierConfig, VerifierError, VerifyInput, VerifyStats,
};
use sha2::{Digest, Sha256};

use crate::registry::{self, Mode, Registry};

/// Environment variable that turns the cache off (`off`, `0`, `no` or `false`).
pub const VERIFY_CACHE_ENV: &str = "GPUBPF_VERIFY_CACHE";

/// The cache's directory in a registry's home.
pub const CACHE_DIR: &str = "verified";

/// First line of every entry (the format's version).
const MAGIC: &str = "gpubpf-verified 1";

/// Entries kept when `gpubpf load` prunes the cache ([`VerifyCache::prune`]).
pub const KEEP_ENTRIES: usize = 4096;

/// Whether the environment leaves the cache on (it is unless [`VERIFY_CACHE_ENV`] says
/// `off`, `0`, `no` or `false`).
pub fn enabled_by_env() -> bool {
    match std::env::var(VERIFY_CACHE_ENV) {
        Ok(v) => !["off", "0", "no", "false"]
            .iter()
            .any(|o| v.eq_ignore_ascii_case(o)),
        Err(_) => true,
    }
}

/// The key of one verification input: SHA-256 of everything the verifier's decision
/// depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// Lower-case hex, the entry's file name.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Collects what `Hash` implementations write, to digest it at once (SHA-256 is fed one
/// buffer instead of thousands of small writes).
struct Bytes(Vec<u8>);

impl Hasher for Bytes {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        // Never asked for: the bytes are digested by `key`.
        0
    }
}

/// The key of `input` verified with `config` (line info left out: see the module docs).
pub fn key(config: &VerifierConfig, input: &VerifyInput<'_>) -> CacheKey {
    use std::hash::Hash;
    let mut b = Bytes(Vec::with_capacity(
        256usize.saturating_add(input.insns.len().saturating_mul(8)),
    ));
    b.write(MAGIC.as_bytes());
    b.write(gpubpf_verifier::SOURCE_HASH.as_bytes());
    config.hash(&mut b);
    b.write_usize(input.insns.len());
    for i in input.insns {
        b.write(&i.to_bytes());
    }
    input.maps.hash(&mut b);
    input.ctx.hash(&mut b);
    CacheKey(Sha256::digest(&b.0).into())
}

/// Verifies `input` (given without line info) with the default configuration, unless
/// `cache` holds its result; an accepted input is recorded in `cache`. `lines` gives the C
/// line info when the verifier runs (it words rejections with them).
pub fn verify(
    cache: Option<&VerifyCache>,
    input: &VerifyInput<'_>,
    lines: impl FnOnce() -> Vec<LineInfo>,
) -> Result<VerifyStats, Box<VerifierError>> {
    let config = VerifierConfig::default();
    let key = cache.map(|c| (c, key(&config, input)));
    if let Some((c, k)) = &key {
        if let Some(stats) = c.get(k) {
            return Ok(stats);
        }
    }
    let lines = lines();
    let stats = Verifier::new(&config).verify(&VerifyInput {
        line_info: Some(&lines),
        ..*input
    })?;
    if let Some((c, k)) = &key {
        c.put(k, &stats);
    }
    Ok(stats)
}

/// Who may write a cache directory, and how its files are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A user registry's: the user's alone (0700, entries 0600).
    Private,
    /// A root-owned system registry's: root writes, everyone reads (0755, entries 0644);
    /// `writable` when this process is root.
    System { owner: u32, writable: bool },
}

/// A registry's verification cache (`HOME/verified/KEY`).
#[derive(Debug)]
pub struct VerifyCache {
    dir: PathBuf,
    kind: Kind,
    /// `dir` was created (or found) and checked by this value.
    ready: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Logs that a cache directory is not used, once per process (a watcher rebuilding after
/// each registry change would say it again every time).
fn warn_ignored(dir: &Path, e: &registry::RegistryError) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(dir = %dir.display(), error = %e, "verification cache ignored; every program is verified");
    }
}

impl VerifyCache {
    /// The cache of `reg` (see the module docs): a user registry's, or a system registry's
    /// when root owns it; `None` for a system registry of another owner, when `enabled` is
    /// false, or when `verified/` exists but fails its checks (logged once).
    pub fn of(reg: &Registry, enabled: bool) -> Option<Self> {
        if !enabled {
            return None;
        }
        let dir = reg.home().join(CACHE_DIR);
        match reg.mode() {
            Mode::User => Self::at(&dir),
            Mode::System { owner: 0 } => Self::system_at(&dir, 0, reg.is_owner()),
            Mode::System { .. } => None,
        }
    }

    /// The private cache in directory `dir` (created on the first entry recorded): `None`
    /// when `dir` exists but is a symbolic link, another user's, or writable by
    /// group/others.
    pub fn at(dir: &Path) -> Option<Self> {
        Self::open(dir, Kind::Private)
    }

    /// The cache of a system registry owned by `owner` in directory `dir`, readable by
    /// everyone; this process records entries only when `writable` (it is the owner).
    /// `None` when `dir` exists but is a link, not `owner`'s, or writable by anyone else.
    pub fn system_at(dir: &Path, owner: u32, writable: bool) -> Option<Self> {
        Self::open(dir, Kind::System { owner, writable })
    }

    fn open(dir: &Path, kind: Kind) -> Option<Self> {
        let exists = std::fs::symlink_metadata(dir).is_ok();
        if exists {
            let checked = match kind {
                Kind::Private => registry::check_private_dir(dir),
                Kind::System { owner, .. } => registry::system::check_owner_dir(dir, owner),
            };
            if let Err(e) = checked {
                warn_ignored(dir, &e);
                return None;
            }
        }
        Some(Self {
            dir: dir.to_path_buf(),
            kind,
            ready: AtomicBool::new(exists),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Verifications answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Verifications the cache could not answer so far.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// The recorded result for `key`, if there is a readable one.
    pub fn get(&self, key: &CacheKey) -> Option<VerifyStats> {
        let found = if self.ready.load(Ordering::Acquire) {
            registry::read_nofollow(&self.dir.join(key.hex()))
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| parse(&s))
        } else {
            None
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Records that the input of `key` was accepted with `stats` (best effort: a failure is
    /// logged at debug level and only costs the next process a verification).
    pub fn put(&self, key: &CacheKey, stats: &VerifyStats) {
        if let Err(e) = self.try_put(key, stats) {
            tracing::debug!(dir = %self.dir.display(), error = %e, "verification not cached");
        }
    }

    fn try_put(&self, key: &CacheKey, stats: &VerifyStats) -> std::io::Result<()> {
        let file_mode = match self.kind {
            Kind::Private => 0o600,
            // Only the owner records; everyone else only reads.
            Kind::System {
                writable: false, ..
            } => return Ok(()),
            Kind::System { .. } => 0o644,
        };
        if !self.ready.load(Ordering::Acquire) {
            match self.kind {
                Kind::Private => registry::ensure_private_dir(&self.dir),
                Kind::System { owner, .. } => registry::system::ensure_owner_dir(&self.dir, owner),
            }
            .map_err(std::io::Error::other)?;
            self.ready.store(true, Ordering::Release);
        }
        let name = key.hex();
        // Written under a name of its own and renamed into place: a reader sees a whole
        // entry or none.
        // SAFETY: gettid cannot fail.
        let tid = unsafe { libc::gettid() };
        let tmp = self
            .dir
            .join(format!(".{name}.{}.{tid}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file_mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        // The umask may have removed read bits that everyone needs in a system registry.
        let written = f
            .set_permissions(std::fs::Permissions::from_mode(file_mode))
            .and_then(|()| f.write_all(render(stats).as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(&name)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Removes the oldest entries (by modification time) beyond `keep`, and leftovers of
    /// interrupted writes: `gpubpf load` calls it so that the cache does not grow without
    /// bound as objects change. Returns how many entries it removed.
    pub fn prune(&self, keep: usize) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        let mut removed = 0usize;
        for e in rd.flatten() {
            let path = e.path();
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(md) = e.metadata() else { continue };
            let modified = md.modified().unwrap_or(std::time::UNIX_EPOCH);
            if name.starts_with('.') {
                // A write that never got renamed (its process died): stale after a minute.
                let stale = modified
                    .elapsed()
                    .is_ok_and(|age| age > Duration::from_secs(60));
                if stale && std::fs::remove_file(&path).is_ok() {
                    removed = removed.saturating_add(1);
                }
                continue;
            }
            entries.push((modified, path));
        }
        if entries.len() > keep {
            entries.sort();
            let excess = entries.len().saturating_sub(keep);
            for (_, path) in entries.into_iter().take(excess) {
                if std::fs::remove_file(&path).is_ok() {
                    removed = removed.saturating_add(1);
                }
            }
        }
        removed
    }
}

fn list<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// An entry's text: the format's line, then one `name=value` line per field.
fn render(s: &VerifyStats) -> String {
    format!(
        "{MAGIC}\ninsns_processed={}\nstates_stored={}\npeak_states={}\nstates_pruned={}\nstack_depth={}\nunreached={}\nctx_fields_read={}\n",
        s.insns_processed,
        s.states_stored,
        s.peak_states,
        s.states_pruned,
        list(&s.stack_depth),
        list(&s.unreached),
        list(&s.ctx_fields_read),
    )
}

/// The statistics an entry records; `None` unless it is exactly what [`render`] writes.
fn parse(text: &str) -> Option<VerifyStats> {
    let mut lines = text.strip_suffix('\n')?.split('\n');
    if lines.next()? != MAGIC {
        return None;
    }
    let mut field =
        |name: &str| -> Option<&str> { lines.next()?.strip_prefix(name)?.strip_prefix('=') };
    fn nums<T: std::str::FromStr>(v: &str) -> Option<Vec<T>> {
        if v.is_empty() {
            return Some(Vec::new());
        }
        v.split(',').map(|x| x.parse().ok()).collect()
    }
    // Every field named, none defaulted: a field added to `VerifyStats` must be recorded
    // here too (and the format's version raised).
    let stats = VerifyStats {
        insns_processed: field("insns_processed")?.parse().ok()?,
        states_stored: field("states_stored")?.parse().ok()?,
        peak_states: field("peak_states")?.parse().ok()?,
        states_pruned: field("states_pruned")?.parse().ok()?,
        stack_depth: nums(field("stack_depth")?)?,
        unreached: nums(field("unreached")?)?,
        ctx_fields_read: nums(field("ctx_fields_read")?)?,
        duration: Duration::ZERO,
        log: String::new(),
    };
    if lines.next().is_some() {
        return None;
    }
    Some(stats)
}

#[cfg(test)]
mod tests;
