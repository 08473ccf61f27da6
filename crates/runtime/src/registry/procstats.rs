//! Per-process status and statistics: written by the shim inside each policed process,
//! read by `gpubpf ps`.
//!
//! One file per process-table slot, `procs/SLOT`, created by the process that claimed the
//! slot (built under a temporary name and renamed over the previous owner's file, so a
//! reader never sees a half-written header). Every word is accessed atomically, so a reader
//! may look at a file while its process writes it.
//!
//! ```text
//! word 0      magic "GPUBPFPS"
//! word 1      version (low 32) | flags (high 32: bit 0 = GPUBPF_FAIL=closed)
//! word 2      pid (low 32)
//! word 3      start time (clock ticks since boot, as in the process table)
//! word 4      table sequence: odd while the owner rewrites the tables (a seqlock)
//! word 5      points used (low 32) | programs used (high 32)
//! word 6      failures (low 32) | failures not recorded for want of room (high 32)
//! POINTS      MAX_POINTS words: api id (low 32, 0 = unused) | flags (high 32)
//! PROGRAMS    MAX_PROGRAMS × 16 words: object (7 words), name (7 words),
//!             api id | phase << 32 | active << 40 | shadow << 41, reserved
//! FAILURES    MAX_FAILURES × 64 words: object (8 words), reason (56 words)
//! OWNERS      N_SHARDS words: thread id owning counter shard i (0 = free; shard 0 is shared)
//! SHARDS      N_SHARDS × SHARD_WORDS counters: per point calls, denied;
//!             per program runs, run time (ns), faults, shadow decisions
//! ```
//!
//! Counters are sharded by thread: a thread claims a shard of its own on its first policed
//! call and adds to it with plain (non read-modify-write) atomic stores, so counting costs
//! no locked instruction and no cache line moves between threads; threads beyond the shard
//! count share shard 0 with atomic additions. Readers sum the shards. A shard released by an
//! exiting thread keeps its counts and is reused by the next thread.
//!
//! Slots of points and programs are assigned on first sight and kept for the life of the
//! process, keyed by attach point, phase, object and program name: a program reloaded under
//! the same names (`load --replace`, a new `--set`) keeps its slot and counts; one that is
//! gone stays listed as inactive.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::maps::mapping::{self, Mapping};
use crate::maps::MapError;

const MAGIC: u64 = u64::from_le_bytes(*b"GPUBPFPS");
const VERSION: u32 = 2;

/// Attach points with programs a process can count.
pub const MAX_POINTS: usize = 128;
/// Programs a process can count.
pub const MAX_PROGRAMS: usize = 256;
/// Failed objects a process can report.
pub const MAX_FAILURES: usize = 32;
/// Counter shards (shard 0 is shared by threads that found no free one).
pub const N_SHARDS: usize = 64;

const PROGRAM_WORDS: usize = 16;
const FAILURE_WORDS: usize = 64;
const NAME_WORDS: usize = 7;
const FAILURE_OBJECT_WORDS: usize = 8;
const REASON_WORDS: usize = FAILURE_WORDS - FAILURE_OBJECT_WORDS;

const W_FLAGS: usize = 1;
const W_PID: usize = 2;
const W_START: usize = 3;
const W_SEQ: usize = 4;
const W_USED: usize = 5;
const W_FAILURES: usize = 6;
const POINTS: usize = 8;
const PROGRAMS: usize = POINTS + MAX_POINTS;
const FAILURES: usize = PROGRAMS + MAX_PROGRAMS * PROGRAM_WORDS;
const OWNERS: usize = FAILURES + MAX_FAILURES * FAILURE_WORDS;
/// Counter words per shard.
const SHARD_WORDS: usize = MAX_POINTS * 2 + MAX_PROGRAMS * 4;
/// First shard, page aligned (512 words = 4 KiB).
const SHARDS: usize = (OWNERS + N_SHARDS).div_ceil(512) * 512;
const TOTAL_WORDS: usize = SHARDS + N_SHARDS * SHARD_WORDS;
/// Tries of [`ProcStats::read`] before it settles for an unchecked copy.
const READ_ATTEMPTS: u32 = 10_000;
/// Size of a stats file.
pub const FILE_SIZE: usize = TOTAL_WORDS * 8;

/// Flag bit of a point: it has programs in the current set.
const POINT_ACTIVE: u64 = 1 << 32;
/// Flag bit of a point: a failed object targets it and the process fails closed.
const POINT_BROKEN: u64 = 1 << 33;

/// Errors of the stats files.
#[derive(Debug, thiserror::Error)]
pub enum ProcStatsError {
    #[error("{op} `{path}`")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("stats file")]
    Map(#[from] MapError),
    #[error("stats file `{path}` is not one: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// Index of a counter in a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter(u32);

impl Counter {
    /// Calls seen at point slot `p`.
    pub fn calls(p: u32) -> Self {
        Self(p * 2)
    }
    /// Calls denied at point slot `p`.
    pub fn denied(p: u32) -> Self {
        Self(p * 2 + 1)
    }
    /// Runs of program slot `q` (counted while statistics are enabled).
    pub fn runs(q: u32) -> Self {
        Self(MAX_POINTS as u32 * 2 + q * 4)
    }
    /// Run time of program slot `q` in nanoseconds (while statistics are enabled).
    pub fn run_ns(q: u32) -> Self {
        Self(MAX_POINTS as u32 * 2 + q * 4 + 1)
    }
    /// Run-time faults of program slot `q` (always counted).
    pub fn faults(q: u32) -> Self {
        Self(MAX_POINTS as u32 * 2 + q * 4 + 2)
    }
    /// Decisions shadow program slot `q` made but did not apply ("would have denied").
    pub fn shadow_denied(q: u32) -> Self {
        Self(MAX_POINTS as u32 * 2 + q * 4 + 3)
    }
}

/// The counter shards of a stats file ([`ProcStats::counters`]).
#[derive(Clone, Copy, Debug)]
pub struct Counters<'a> {
    shards: &'a [AtomicU64],
}

impl<'a> Counters<'a> {
    /// Adds `v` to counter `c` of shard `shard`. Shard 0 is shared (atomic addition); any
    /// other is written only by the thread that claimed it (plain load and store).
    #[inline]
    pub fn add(self, shard: u32, c: Counter, v: u64) {
        match self.own_shard(shard.min(N_SHARDS as u32 - 1)) {
            Some(own) => own.add(c, v),
            None => {
                if let Some(w) = self.shards.get(c.0 as usize) {
                    w.fetch_add(v, Ordering::Relaxed);
                }
            }
        }
    }

    /// Shard `shard`'s counters for the thread that claimed it, which alone adds to them
    /// (plain load and store); `None` for the shared shard 0 (or a shard out of range).
    pub fn own_shard(self, shard: u32) -> Option<OwnShard<'a>> {
        if shard == 0 {
            return None;
        }
        let start = (shard as usize).checked_mul(SHARD_WORDS)?;
        let words = self.shards.get(start..start.checked_add(SHARD_WORDS)?)?;
        Some(OwnShard {
            words: words.try_into().ok()?,
        })
    }

    /// The address of the first counter, for [`Counters::from_ptr`].
    pub fn as_ptr(self) -> *const AtomicU64 {
        self.shards.as_ptr()
    }

    /// The counters [`Counters::as_ptr`] returned `p` for.
    ///
    /// # Safety
    /// `p` is what `as_ptr` returned for the counters of a [`ProcStats`] that is still
    /// mapped for `'a`.
    pub unsafe fn from_ptr(p: *const AtomicU64) -> Self {
        // SAFETY: per contract, `p` starts the shard area of a live mapping, which spans
        // exactly the words after `SHARDS`.
        let shards = unsafe { std::slice::from_raw_parts(p, TOTAL_WORDS - SHARDS) };
        Self { shards }
    }
}

/// A shard of the counters that one thread claimed ([`Counters::own_shard`]): one word
/// (what a thread keeps at hand so that counting a call is one load and one store, no
/// index arithmetic and no test for the shared shard).
#[derive(Clone, Copy, Debug)]
pub struct OwnShard<'a> {
    words: &'a [AtomicU64; SHARD_WORDS],
}

impl OwnShard<'_> {
    /// Adds `v` to counter `c` (plain load and store: only the claiming thread writes here).
    #[inline(always)]
    pub fn add(self, c: Counter, v: u64) {
        if let Some(w) = self.words.get(c.0 as usize) {
            w.store(w.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        }
    }
}

/// A mapped stats file.
#[derive(Debug)]
pub struct ProcStats {
    mapping: Mapping,
    path: PathBuf,
}

/// The stats file of process-table slot `slot` under registry `home`.
pub fn stats_path(home: &Path, slot: usize) -> PathBuf {
    home.join("procs").join(slot.to_string())
}

fn pack_str(words: &[AtomicU64], s: &str) {
    let bytes = s.as_bytes();
    for (i, w) in words.iter().enumerate() {
        let mut chunk = [0u8; 8];
        for (j, c) in chunk.iter_mut().enumerate() {
            // Truncated on a character boundary by `truncate_str` before we get here.
            *c = bytes.get(i * 8 + j).copied().unwrap_or(0);
        }
        w.store(u64::from_le_bytes(chunk), Ordering::Relaxed);
    }
}

fn unpack_str(words: &[AtomicU64]) -> String {
    let mut bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    if let Some(end) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(end);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `s` cut to at most `max` bytes on a character boundary.
fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> ProcStatsError + 'a {
    move |source| ProcStatsError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Removes the previous stats file [`ProcStats::create_at`] kept (frees its pages).
pub fn remove_stale(stale: Option<PathBuf>) {
    if let Some(p) = stale {
        let _ = std::fs::remove_file(p);
    }
}

/// Removes from `procs` the previous stats files that processes kept to free after their
/// start-up ([`ProcStats::create_at`]) but exited before they could: `.tmp-stale-PID-SLOT`
/// of a dead PID. Registry writers and every shim's watcher thread (off the calls' path)
/// sweep, so that short-lived processes leave no files behind for long. Returns how many
/// were removed.
pub fn remove_dead_stale(procs: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(procs) else {
        return 0;
    };
    let mut removed = 0;
    for e in rd.flatten() {
        let n = e.file_name();
        let Some(pid) = n
            .to_str()
            .and_then(|n| n.strip_prefix(".tmp-stale-"))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if !crate::maps::pid_alive(pid) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl ProcStats {
    /// Creates the stats file of `slot` for process `pid` (replacing a previous owner's).
    pub fn create(
        home: &Path,
        slot: usize,
        pid: u32,
        start_time: u64,
        fail_closed: bool,
    ) -> Result<Self, ProcStatsError> {
        let (s, stale) =
            Self::create_at(&stats_path(home, slot), slot, pid, start_time, fail_closed)?;
        remove_stale(stale);
        Ok(s)
    }

    /// [`ProcStats::create`] at `path` (a system registry names stats files by slot and
    /// uid, `Registry::stats_path_of`). Mode 0644: the registry's owner reads it.
    ///
    /// The file of a previous owner of the slot is kept alive under a second name
    /// (`.tmp-stale-PID-SLOT`), returned with the new file: replacing it outright would free
    /// its pages inside the `rename`, a few hundred microseconds of the process's start-up.
    /// The caller removes it off its critical path ([`remove_stale`]); a registry writer
    /// removes those of dead processes.
    pub fn create_at(
        path: &Path,
        slot: usize,
        pid: u32,
        start_time: u64,
        fail_closed: bool,
    ) -> Result<(Self, Option<PathBuf>), ProcStatsError> {
        let path = path.to_path_buf();
        let tmp = path.with_file_name(format!(".tmp-{slot}-{pid}"));
        let _ = std::fs::remove_file(&tmp);
        let f = mapping::create_new(&tmp)?;
        f.set_len(FILE_SIZE as u64).map_err(io(&tmp, "resize"))?;
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(io(&tmp, "chmod"))?;
        let mapping = Mapping::map(&f, &tmp, FILE_SIZE, None)?;
        let s = Self {
            mapping,
            path: path.clone(),
        };
        let w = s.words();
        w[W_FLAGS].store(
            u64::from(VERSION) | (u64::from(fail_closed) << 32),
            Ordering::Relaxed,
        );
        w[W_PID].store(u64::from(pid), Ordering::Relaxed);
        w[W_START].store(start_time, Ordering::Relaxed);
        w[0].store(MAGIC, Ordering::Release);
        let stale = path.with_file_name(format!(".tmp-stale-{pid}-{slot}"));
        let _ = std::fs::remove_file(&stale);
        let stale = std::fs::hard_link(&path, &stale).is_ok().then_some(stale);
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            if let Some(st) = &stale {
                let _ = std::fs::remove_file(st);
            }
            return Err(io(&path, "publish")(e));
        }
        Ok((s, stale))
    }

    /// Opens an existing stats file (for reading).
    /// Readers only read: another user's file (a system registry's non-root owner reading
    /// its users' processes) is mapped read-only.
    pub fn open(path: &Path) -> Result<Self, ProcStatsError> {
        let (f, writable) = match mapping::open_rw(path) {
            Ok(f) => (f, true),
            Err(crate::maps::MapError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                (mapping::open_ro(path)?, false)
            }
            Err(e) => return Err(e.into()),
        };
        let len = f.metadata().map_err(io(path, "stat"))?.len();
        let corrupt = |reason: String| ProcStatsError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        if len != FILE_SIZE as u64 {
            return Err(corrupt(format!("{len} bytes, expected {FILE_SIZE}")));
        }
        let mapping = if writable {
            Mapping::map(&f, path, FILE_SIZE, None)?
        } else {
            Mapping::map_read_only(&f, path, FILE_SIZE, None)?
        };
        let s = Self {
            mapping,
            path: path.to_path_buf(),
        };
        let w = s.words();
        if w[0].load(Ordering::Acquire) != MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        let version = w[W_FLAGS].load(Ordering::Relaxed) as u32;
        if version != VERSION {
            return Err(corrupt(format!("version {version}, expected {VERSION}")));
        }
        Ok(s)
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is FILE_SIZE bytes, page aligned, and lives as long as `self`;
        // every access to the shared words goes through atomics.
        unsafe { std::slice::from_raw_parts(self.mapping.base().cast::<AtomicU64>(), TOTAL_WORDS) }
    }

    /// Process id the file belongs to.
    pub fn pid(&self) -> u32 {
        self.words()[W_PID].load(Ordering::Relaxed) as u32
    }

    /// Start time of that process.
    pub fn start_time(&self) -> u64 {
        self.words()[W_START].load(Ordering::Relaxed)
    }

    // ---- counting (the shim's hot path) ----

    /// Claims a counter shard for thread `tid`: its index, or 0 (the shared shard) when
    /// none is free.
    pub fn claim_shard(&self, tid: u32) -> u32 {
        let owners = &self.words()[OWNERS..OWNERS + N_SHARDS];
        for (i, o) in owners.iter().enumerate().skip(1) {
            if o.compare_exchange(
                0,
                u64::from(tid.max(1)),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
            {
                return i as u32;
            }
        }
        0
    }

    /// Gives shard `shard` back (its counts stay).
    pub fn release_shard(&self, shard: u32) {
        if shard != 0 {
            if let Some(o) = self.words()[OWNERS..OWNERS + N_SHARDS].get(shard as usize) {
                o.store(0, Ordering::Release);
            }
        }
    }

    /// Adds `v` to counter `c` of shard `shard`. Shard 0 is shared (atomic addition); any
    /// other is written only by the thread that claimed it (plain load and store).
    #[inline]
    pub fn add(&self, shard: u32, c: Counter, v: u64) {
        self.counters().add(shard, c, v);
    }

    /// The counter shards of this file as one word (what a hot path keeps at hand instead
    /// of this struct).
    pub fn counters(&self) -> Counters<'_> {
        Counters {
            shards: self.words().get(SHARDS..).unwrap_or(&[]),
        }
    }

    /// Calls seen at point slot `p` in this process, over every shard.
    pub fn calls(&self, p: u32) -> u64 {
        self.sum(Counter::calls(p))
    }

    fn sum(&self, c: Counter) -> u64 {
        let w = self.words();
        (0..N_SHARDS)
            .map(|s| w[SHARDS + s * SHARD_WORDS + c.0 as usize].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    // ---- tables (written by the shim's initialisation and watcher only) ----

    /// Rewrites the tables: `f` gets a writer; readers retry while it runs.
    pub fn update<R>(&self, f: impl FnOnce(&TableWriter<'_>) -> R) -> R {
        let seq = &self.words()[W_SEQ];
        seq.fetch_add(1, Ordering::AcqRel);
        std::sync::atomic::fence(Ordering::Release);
        let r = f(&TableWriter { stats: self });
        seq.fetch_add(1, Ordering::Release);
        r
    }

    // ---- reading (`gpubpf ps`) ----

    /// A consistent copy of the tables with the counters summed over shards. A writer that
    /// died in the middle of [`ProcStats::update`] leaves the sequence odd for ever: after
    /// [`READ_ATTEMPTS`] tries the tables are read as they are (the reader never hangs).
    pub fn read(&self) -> ProcStatsView {
        let w = self.words();
        for _ in 0..READ_ATTEMPTS {
            let s1 = w[W_SEQ].load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let view = self.read_unchecked();
            std::sync::atomic::fence(Ordering::Acquire);
            if w[W_SEQ].load(Ordering::Relaxed) == s1 {
                return view;
            }
        }
        self.read_unchecked()
    }

    fn read_unchecked(&self) -> ProcStatsView {
        let w = self.words();
        let used = w[W_USED].load(Ordering::Relaxed);
        let n_points = (used as u32 as usize).min(MAX_POINTS);
        let n_programs = ((used >> 32) as usize).min(MAX_PROGRAMS);
        let fails = w[W_FAILURES].load(Ordering::Relaxed);
        let n_failures = (fails as u32 as usize).min(MAX_FAILURES);
        let points = (0..n_points)
            .map(|p| {
                let e = w[POINTS + p].load(Ordering::Relaxed);
                PointStats {
                    api_id: e as u32,
                    active: e & POINT_ACTIVE != 0,
                    fail_closed: e & POINT_BROKEN != 0,
                    calls: self.sum(Counter::calls(p as u32)),
                    denied: self.sum(Counter::denied(p as u32)),
                }
            })
            .collect();
        let programs = (0..n_programs)
            .map(|q| {
                let base = PROGRAMS + q * PROGRAM_WORDS;
                let e = w[base + 2 * NAME_WORDS].load(Ordering::Relaxed);
                ProgramStats {
                    object: unpack_str(&w[base..base + NAME_WORDS]),
                    name: unpack_str(&w[base + NAME_WORDS..base + 2 * NAME_WORDS]),
                    api_id: e as u32,
                    exit: (e >> 32) & 0xff == 1,
                    active: (e >> 40) & 1 == 1,
                    shadow: (e >> 41) & 1 == 1,
                    shadow_denied: self.sum(Counter::shadow_denied(q as u32)),
                    runs: self.sum(Counter::runs(q as u32)),
                    run_time_ns: self.sum(Counter::run_ns(q as u32)),
                    faults: self.sum(Counter::faults(q as u32)),
                }
            })
            .collect();
        let failures = (0..n_failures)
            .map(|i| {
                let base = FAILURES + i * FAILURE_WORDS;
                Failure {
                    object: unpack_str(&w[base..base + FAILURE_OBJECT_WORDS]),
                    reason: unpack_str(&w[base + FAILURE_OBJECT_WORDS..base + FAILURE_WORDS]),
                }
            })
            .collect();
        ProcStatsView {
            pid: self.pid(),
            start_time: self.start_time(),
            fail_closed: (w[W_FLAGS].load(Ordering::Relaxed) >> 32) & 1 == 1,
            points,
            programs,
            failures,
            failures_dropped: (fails >> 32) as u32,
        }
    }
}

/// Rewrites the tables of a stats file (see [`ProcStats::update`]).
#[derive(Debug)]
pub struct TableWriter<'a> {
    stats: &'a ProcStats,
}

impl TableWriter<'_> {
    fn words(&self) -> &[AtomicU64] {
        self.stats.words()
    }

    /// Marks every point and program inactive and forgets the failures (before the new set
    /// is described).
    pub fn clear(&self) {
        let w = self.words();
        let used = w[W_USED].load(Ordering::Relaxed);
        for p in 0..(used as u32 as usize).min(MAX_POINTS) {
            let e = &w[POINTS + p];
            e.store(
                e.load(Ordering::Relaxed) & !(POINT_ACTIVE | POINT_BROKEN),
                Ordering::Relaxed,
            );
        }
        for q in 0..((used >> 32) as usize).min(MAX_PROGRAMS) {
            let e = &w[PROGRAMS + q * PROGRAM_WORDS + 2 * NAME_WORDS];
            e.store(e.load(Ordering::Relaxed) & !(1 << 40), Ordering::Relaxed);
        }
        w[W_FAILURES].store(0, Ordering::Relaxed);
    }

    /// The slot of attach point `api_id`, marked active (and broken when `fail_closed`):
    /// `None` when the table is full.
    pub fn point(&self, api_id: u32, fail_closed: bool) -> Option<u32> {
        let w = self.words();
        let used = w[W_USED].load(Ordering::Relaxed);
        let n = (used as u32 as usize).min(MAX_POINTS);
        let flags = POINT_ACTIVE | if fail_closed { POINT_BROKEN } else { 0 };
        if let Some(p) = (0..n).find(|&p| w[POINTS + p].load(Ordering::Relaxed) as u32 == api_id) {
            let e = &w[POINTS + p];
            e.store(e.load(Ordering::Relaxed) | flags, Ordering::Relaxed);
            return Some(p as u32);
        }
        if n >= MAX_POINTS {
            return None;
        }
        w[POINTS + n].store(u64::from(api_id) | flags, Ordering::Relaxed);
        w[W_USED].store((used & !0xffff_ffff) | (n as u64 + 1), Ordering::Relaxed);
        Some(n as u32)
    }

    /// The slot of program `name` of `object` at `api_id` in the given phase, marked
    /// active: `None` when the table is full.
    pub fn program(
        &self,
        object: &str,
        name: &str,
        api_id: u32,
        exit: bool,
        shadow: bool,
    ) -> Option<u32> {
        let flags = (1u64 << 40) | (u64::from(shadow) << 41);
        let w = self.words();
        let used = w[W_USED].load(Ordering::Relaxed);
        let n = ((used >> 32) as usize).min(MAX_PROGRAMS);
        let object = truncate_str(object, NAME_WORDS * 8);
        let name = truncate_str(name, NAME_WORDS * 8);
        let key = u64::from(api_id) | (u64::from(exit) << 32);
        for q in 0..n {
            let base = PROGRAMS + q * PROGRAM_WORDS;
            let e = &w[base + 2 * NAME_WORDS];
            let v = e.load(Ordering::Relaxed);
            if v & 0xff_ffff_ffff == key
                && unpack_str(&w[base..base + NAME_WORDS]) == object
                && unpack_str(&w[base + NAME_WORDS..base + 2 * NAME_WORDS]) == name
                && v & (1 << 40) == 0
            {
                e.store((v & !(1 << 41)) | flags, Ordering::Relaxed);
                return Some(q as u32);
            }
        }
        if n >= MAX_PROGRAMS {
            return None;
        }
        let base = PROGRAMS + n * PROGRAM_WORDS;
        pack_str(&w[base..base + NAME_WORDS], object);
        pack_str(&w[base + NAME_WORDS..base + 2 * NAME_WORDS], name);
        w[base + 2 * NAME_WORDS].store(key | flags, Ordering::Relaxed);
        w[W_USED].store(
            (used & 0xffff_ffff) | ((n as u64 + 1) << 32),
            Ordering::Relaxed,
        );
        Some(n as u32)
    }

    /// Records that `object` could not be run here, and why.
    pub fn failure(&self, object: &str, reason: &str) {
        let w = self.words();
        let cur = w[W_FAILURES].load(Ordering::Relaxed);
        let n = cur as u32 as usize;
        if n >= MAX_FAILURES {
            w[W_FAILURES].store(cur + (1 << 32), Ordering::Relaxed);
            return;
        }
        let base = FAILURES + n * FAILURE_WORDS;
        pack_str(
            &w[base..base + FAILURE_OBJECT_WORDS],
            truncate_str(object, FAILURE_OBJECT_WORDS * 8),
        );
        pack_str(
            &w[base + FAILURE_OBJECT_WORDS..base + FAILURE_WORDS],
            truncate_str(reason, REASON_WORDS * 8 - 1),
        );
        w[W_FAILURES].store(cur + 1, Ordering::Relaxed);
    }
}

/// A stats file as `gpubpf ps` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProcStatsView {
    /// Process id.
    pub pid: u32,
    /// Start time (clock ticks since boot).
    pub start_time: u64,
    /// The process runs with `GPUBPF_FAIL=closed`.
    pub fail_closed: bool,
    /// Attach points that have (or had) programs in this process.
    pub points: Vec<PointStats>,
    /// Programs that run (or ran) in this process.
    pub programs: Vec<ProgramStats>,
    /// Objects this process could not run, and why.
    pub failures: Vec<Failure>,
    /// Failures beyond the room of the table.
    pub failures_dropped: u32,
}

/// Calls at one attach point.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointStats {
    /// Attach point id.
    pub api_id: u32,
    /// Programs are attached now.
    pub active: bool,
    /// Denies every call because an object for it failed and the process fails closed.
    pub fail_closed: bool,
    /// Calls that ran through the point's chain.
    pub calls: u64,
    /// Calls an entry program (or failing closed) refused.
    pub denied: u64,
}

/// One program in one process.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProgramStats {
    /// Registry name of its object.
    pub object: String,
    /// Program name.
    pub name: String,
    /// Attach point id.
    pub api_id: u32,
    /// Exit (true) or entry program.
    pub exit: bool,
    /// In the set the process runs now.
    pub active: bool,
    /// Loaded with `--shadow`: its decisions are not applied.
    pub shadow: bool,
    /// Decisions it made but did not apply, being a shadow program ("would have denied").
    pub shadow_denied: u64,
    /// Runs counted while statistics were enabled.
    pub runs: u64,
    /// Total run time of those runs, in nanoseconds.
    pub run_time_ns: u64,
    /// Runs that ended in a fault (always counted).
    pub faults: u64,
}

/// An object a process could not run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// Registry name.
    pub object: String,
    /// Why (the first line of the error chain).
    pub reason: String,
}

#[cfg(test)]
mod tests;
