//! The registry: `$GPUBPF_HOME`, shared by the CLI and every process running policies.
//!
//! ```text
//! $GPUBPF_HOME/            mode 0700, owned by the user (checked on every open)
//!   control                control block: generation word + futex, writer lock, processes
//!   maps/NAME              one shared-memory map file per map (see `crate::maps`)
//!   pins/NAME              map NAME is pinned: kept when no loaded object binds it
//!   progs/NAME/object.o    the original object of a loaded policy
//!   progs/NAME/meta.json   its ObjectRecord: id, programs, links, map bindings, globals, hash
//!   ids                    the next object/program id (decimal; ids are never reused)
//!   procs/SLOT             status and counters of the process in process-table slot SLOT
//!                          (`procstats`), written by that process's shim
//! ```
//!
//! Writers serialise on the control block's robust lock ([`Registry::writer`]); every
//! change is atomic: map files are built under a temporary name and renamed into place
//! without replacing; a program directory is built under a temporary name and renamed (or
//! exchanged, `RENAME_EXCHANGE`, with the one it replaces). A CLI killed at any point leaves
//! at most temporary `.tmp-*` entries, which readers ignore and the next writer removes.
//! Readers never block: they read the generation before and after and retry on a change.
//!
//! Since the generation moves only when the writer is done ([`Writer::commit`]), a reader
//! may read while a writer works: every intermediate state is therefore a consistent one.
//! Changes only add or atomically exchange entries until the generation moves; entries that
//! go away (a replaced object under another name, maps nothing binds any more) are
//! *retired*: removed after the generation moved, listed meanwhile in a journal
//! (`.tmp-retire-PID`) that the next writer finishes if this one is killed
//! ([`replace`](self::replace)).

pub mod audit;
mod control;
mod home;
mod pins;
pub mod procstats;
mod record;
mod replace;
pub mod system;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use control::{
    monotonic_ns, process_start_time, Control, ProcessInfo, CONTROL_SIZE, PROC_SLOTS, TABLE_SIZE,
};
pub use home::{
    check_private_dir, default_home, ensure_private_dir, filesystem, read_nofollow,
    shared_memory_dir, Filesystem, HOME_ENV,
};
pub use record::{
    sha256_hex, LinkRecord, MapBinding, ObjectRecord, Phase, ProgramRecord, Replaced, RECORD_FORMAT,
};
pub use system::{Access, Mode};

use crate::maps::lock::SharedMutexGuard;
use crate::maps::{Map, MapError, MapMeta, MapSpec};

/// A system registry's process table, under `procs/`.
pub const TABLE_FILE: &str = "table";

/// Name of the trace ring map.
pub const TRACE_RING: &str = "trace";
/// Size of the trace ring in bytes.
pub const TRACE_RING_SIZE: u32 = 256 * 1024;

/// Errors of the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{op} `{path}`")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing to use registry directory `{path}`: {reason}")]
    Insecure { path: PathBuf, reason: String },
    #[error("control block `{path}` is corrupted: {reason}")]
    CorruptControl { path: PathBuf, reason: String },
    #[error("the registry at `{path}` is a system registry of uid {owner}: only its owner may load, replace or unload programs, set globals, change maps or ask processes for statistics")]
    NotOwner { path: PathBuf, owner: u32 },
    #[error("this process may only read the registry's control block")]
    ReadOnlyControl,
    #[error("registry writer lock")]
    Lock {
        #[source]
        source: crate::maps::lock::LockError,
    },
    #[error("process table is full ({slots} slots)")]
    ProcessTableFull { slots: usize },
    #[error("invalid name `{name}`: use 1 to 128 of A-Z a-z 0-9 _ . - (not starting with `.`)")]
    InvalidName { name: String },
    #[error("no map named `{name}`")]
    NoSuchMap { name: String },
    #[error("no loaded program named `{name}`")]
    NoSuchProgram { name: String },
    #[error("map `{name}`")]
    Map {
        name: String,
        #[source]
        source: MapError,
    },
    #[error("metadata of program `{name}` is unreadable: {reason}")]
    BadRecord { name: String, reason: String },
    #[error("object of program `{name}` does not match its recorded hash")]
    HashMismatch { name: String },
    #[error("map `{name}` is used by {users}; unload them first")]
    MapInUse { name: String, users: String },
    #[error("no map named `{name}`, and several objects have one: {candidates}")]
    AmbiguousMap { name: String, candidates: String },
    #[error("map `{name}` is not pinned")]
    NotPinned { name: String },
    #[error("cannot replace `{old}` with `{new}`: {reason}")]
    Replace {
        old: String,
        new: String,
        reason: String,
    },
    #[error("id counter `{path}` is corrupted: {reason}")]
    CorruptIds { path: PathBuf, reason: String },
}

impl From<MapError> for RegistryError {
    fn from(e: MapError) -> Self {
        match e {
            MapError::Io { path, op, source } => RegistryError::Io { path, op, source },
            other => RegistryError::Map {
                name: String::new(),
                source: other,
            },
        }
    }
}

/// Checks a registry name (maps and programs).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn check_name(name: &str) -> Result<(), RegistryError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(RegistryError::InvalidName { name: name.into() })
    }
}

/// An opened registry.
#[derive(Debug)]
pub struct Registry {
    home: PathBuf,
    control: Control,
    mode: Mode,
}

/// A consistent view of the loaded programs: a record that another one replaced
/// ([`ObjectRecord::supersedes`]) is left out, so that a replacement under another name
/// shows either the old object or the new one, never both nor neither.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Generation the view corresponds to.
    pub generation: u64,
    /// Loaded objects, by name.
    pub objects: Vec<ObjectRecord>,
    /// Entries that could not be read (name, reason); they are skipped, not fatal.
    pub problems: Vec<(String, String)>,
}

fn io_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> RegistryError + 'a {
    move |source| RegistryError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

impl Registry {
    /// Opens the registry at [`default_home`].
    pub fn open_default() -> Result<Self, RegistryError> {
        Self::open(&default_home())
    }

    /// Opens (creating when missing) the registry at `home`, refusing a directory owned by
    /// another user or writable by group/others.
    pub fn open(home: &Path) -> Result<Self, RegistryError> {
        if system::is_system_home(home) {
            return Self::open_system(home);
        }
        ensure_private_dir(home)?;
        for sub in ["maps", "progs", "procs"] {
            ensure_private_dir(&home.join(sub))?;
        }
        let control = Control::open_or_create(&home.join("control"))?;
        Ok(Self {
            home: home.to_path_buf(),
            control,
            mode: Mode::User,
        })
    }

    /// Opens the system registry at `home` ([`system`]): checked, never created; the
    /// control block is writable only when we are its owner.
    fn open_system(home: &Path) -> Result<Self, RegistryError> {
        let owner = system::check_system_home(home)?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        let control = Control::open_system(
            &home.join("control"),
            &home.join("procs").join(TABLE_FILE),
            me == owner,
        )?;
        Ok(Self {
            home: home.to_path_buf(),
            control,
            mode: Mode::System { owner },
        })
    }

    /// User or system registry.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether this process may change the registry (always in user mode; in system mode
    /// when it runs as the owner).
    pub fn is_owner(&self) -> bool {
        self.control.is_writable()
    }

    /// Refuses, with [`RegistryError::NotOwner`], a change by another user than a system
    /// registry's owner.
    pub fn check_owner(&self) -> Result<(), RegistryError> {
        match self.mode {
            Mode::System { owner } if !self.is_owner() => Err(RegistryError::NotOwner {
                path: self.home.clone(),
                owner,
            }),
            _ => Ok(()),
        }
    }

    /// The stats file of registered process `p` (`procs/SLOT`; in a system registry
    /// `procs/SLOT.UID`, since the sticky directory lets nobody replace another user's).
    pub fn stats_path(&self, p: &ProcessInfo) -> PathBuf {
        self.stats_path_of(p.slot, p.uid)
    }

    /// The stats file of the process of uid `uid` in process-table slot `slot`.
    pub fn stats_path_of(&self, slot: usize, uid: u32) -> PathBuf {
        match self.mode {
            Mode::User => procstats::stats_path(&self.home, slot),
            Mode::System { .. } => self.home.join("procs").join(format!("{slot}.{uid}")),
        }
    }

    /// What applications may do with map `name` (in a user registry: everything, the
    /// registry being private).
    pub fn map_access(&self, name: &str) -> Result<Access, RegistryError> {
        let path = self.map_path(name)?;
        let md = std::fs::symlink_metadata(&path).map_err(io_err(&path, "stat"))?;
        Ok(match self.mode {
            Mode::User => Access::Rw,
            Mode::System { .. } => {
                use std::os::unix::fs::MetadataExt;
                Access::of_mode(md.mode())
            }
        })
    }

    /// The registry directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The control block.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.control.generation()
    }

    /// Directory of map files.
    pub fn maps_dir(&self) -> PathBuf {
        self.home.join("maps")
    }

    /// Directory of loaded programs.
    pub fn progs_dir(&self) -> PathBuf {
        self.home.join("progs")
    }

    /// Path of map `name`.
    pub fn map_path(&self, name: &str) -> Result<PathBuf, RegistryError> {
        check_name(name)?;
        Ok(self.maps_dir().join(name))
    }

    /// Names of all map files, sorted (temporary files excluded).
    pub fn map_names(&self) -> Result<Vec<String>, RegistryError> {
        list_names(&self.maps_dir())
    }

    /// Opens map `name`.
    pub fn open_map(&self, name: &str) -> Result<Arc<Map>, RegistryError> {
        let path = self.map_path(name)?;
        match Map::open(&path) {
            Ok(m) => Ok(Arc::new(m)),
            Err(MapError::NotFound { .. }) => Err(RegistryError::NoSuchMap { name: name.into() }),
            Err(source) => Err(RegistryError::Map {
                name: name.into(),
                source,
            }),
        }
    }

    /// Takes the writer lock. Changes made through the returned [`Writer`] bump the
    /// generation (once) when it is dropped.
    pub fn writer(&self) -> Result<Writer<'_>, RegistryError> {
        self.check_owner()?;
        let guard = self.control.lock_writer()?;
        let mut w = Writer {
            reg: self,
            _guard: guard,
            changed: false,
            retired: replace::Retired::default(),
            finished: false,
        };
        // Finish and remove what a dead writer may have left behind; nobody else writes now.
        w.clean_temporaries();
        Ok(w)
    }

    /// The loaded objects, read without blocking (retried while writers change them).
    pub fn snapshot(&self) -> Result<Snapshot, RegistryError> {
        let mut last = None;
        for _ in 0..16 {
            let g1 = self.generation();
            let snap = self.read_objects(g1)?;
            if self.generation() == g1 {
                return Ok(snap);
            }
            last = Some(snap);
        }
        // Writers keep changing things: return the latest complete read.
        match last {
            Some(s) => Ok(s),
            None => self.read_objects(self.generation()),
        }
    }

    fn read_objects(&self, generation: u64) -> Result<Snapshot, RegistryError> {
        let mut objects = Vec::new();
        let mut problems = Vec::new();
        for name in list_names(&self.progs_dir())? {
            match self.read_record(&name) {
                Ok(r) => objects.push(r),
                Err(e) => problems.push((name, e.to_string())),
            }
        }
        let hidden: Vec<bool> = objects
            .iter()
            .map(|o| objects.iter().any(|s| s.supersedes(o)))
            .collect();
        let mut hidden = hidden.into_iter();
        objects.retain(|_| !hidden.next().unwrap_or(false));
        Ok(Snapshot {
            generation,
            objects,
            problems,
        })
    }

    fn read_record(&self, name: &str) -> Result<ObjectRecord, RegistryError> {
        let p = self.progs_dir().join(name).join("meta.json");
        let bytes = home::read_nofollow(&p).map_err(|e| RegistryError::BadRecord {
            name: name.into(),
            reason: format!("meta.json: {e}"),
        })?;
        let r: ObjectRecord =
            serde_json::from_slice(&bytes).map_err(|e| RegistryError::BadRecord {
                name: name.into(),
                reason: e.to_string(),
            })?;
        if !valid_name(&r.object_file) {
            return Err(RegistryError::BadRecord {
                name: name.into(),
                reason: format!("object file `{}` is not a plain name", r.object_file),
            });
        }
        if r.format != RECORD_FORMAT || r.name != name {
            return Err(RegistryError::BadRecord {
                name: name.into(),
                reason: format!("format {} / name `{}`", r.format, r.name),
            });
        }
        Ok(r)
    }

    /// The record of loaded object `name`.
    pub fn object(&self, name: &str) -> Result<ObjectRecord, RegistryError> {
        check_name(name)?;
        if !home::is_real_dir(&self.progs_dir().join(name)) {
            return Err(RegistryError::NoSuchProgram { name: name.into() });
        }
        self.read_record(name)
    }

    /// The original object bytes of `name`, checked against the recorded hash.
    pub fn object_bytes(&self, name: &str) -> Result<Vec<u8>, RegistryError> {
        let r = self.object(name)?;
        let p = self.progs_dir().join(name).join(&r.object_file);
        let bytes = home::read_nofollow(&p).map_err(io_err(&p, "read"))?;
        if bytes.len() as u64 != r.object_size || sha256_hex(&bytes) != r.object_sha256 {
            return Err(RegistryError::HashMismatch { name: name.into() });
        }
        Ok(bytes)
    }

    /// The registry's trace ring (map `trace`, a ring buffer of [`TRACE_RING_SIZE`] bytes
    /// that `bpf_trace_printk` lines of every policed process go to, see
    /// `helpers::trace::send_to_registry`); created on first use. Creating it does not
    /// change the generation: it is no policy state, and a bump would make every policed
    /// process rebuild its chains. `Map::create` publishes it atomically (built under a
    /// temporary name and renamed without replacing), so it needs no writer lock.
    pub fn trace_ring(&self) -> Result<Arc<Map>, RegistryError> {
        self.system_ring(TRACE_RING, TRACE_RING_SIZE)
    }

    /// The registry's audit ring (map `audit`, a ring buffer of [`audit::AUDIT_RING_SIZE`]
    /// bytes: one [`audit::AuditRecord`] per enforced or shadowed decision of every policed
    /// process, read by `gpubpf audit`); created on first use, like [`Registry::trace_ring`]
    /// and for the same reasons without a generation bump.
    pub fn audit_ring(&self) -> Result<Arc<Map>, RegistryError> {
        self.system_ring(audit::AUDIT_RING, audit::AUDIT_RING_SIZE)
    }

    /// Opens ring-buffer map `name`, creating it with `size` bytes when missing.
    fn system_ring(&self, name: &str, size: u32) -> Result<Arc<Map>, RegistryError> {
        match self.open_map(name) {
            Err(RegistryError::NoSuchMap { .. }) => {}
            other => return other,
        }
        let spec = MapSpec {
            map_type: crate::maps::MapType::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: size,
            flags: 0,
        };
        let meta = MapMeta {
            name: name.into(),
            ..MapMeta::default()
        };
        match Map::create(&self.map_path(name)?, &spec, &meta) {
            Ok(m) => {
                // Every process of every user writes the rings of a system registry.
                if let Mode::System { .. } = self.mode {
                    system::set_mode(m.path(), Access::Rw.file_mode())?;
                }
                Ok(Arc::new(m))
            }
            // Another process created it first.
            Err(MapError::AlreadyExists { .. }) => self.open_map(name),
            Err(source) => Err(RegistryError::Map {
                name: name.into(),
                source,
            }),
        }
    }

    /// Registers the calling process in the process table; unregistered on drop.
    pub fn register_process(&self) -> Result<ProcessSlot<'_>, RegistryError> {
        let pid = std::process::id();
        let slot = self.control.register(pid)?;
        Ok(ProcessSlot {
            reg: self,
            slot,
            pid,
        })
    }
}

/// Names in `dir`, sorted, without temporary entries.
fn list_names(dir: &Path) -> Result<Vec<String>, RegistryError> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir, "list"))? {
        let e = e.map_err(io_err(dir, "list"))?;
        if let Some(n) = e.file_name().to_str() {
            if valid_name(n) {
                names.push(n.to_owned());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// A slot in the process table, released on drop.
#[derive(Debug)]
pub struct ProcessSlot<'a> {
    reg: &'a Registry,
    slot: usize,
    pid: u32,
}

impl ProcessSlot<'_> {
    /// Reports that this process now runs generation `g`.
    pub fn ack(&self, g: u64) {
        self.reg.control.ack(self.slot, g);
    }
}

impl Drop for ProcessSlot<'_> {
    fn drop(&mut self) {
        self.reg.control.unregister(self.slot, self.pid);
    }
}

/// Holds the registry's writer lock; bumps the generation once when it is committed or
/// dropped after a change, then removes what the change retired.
#[derive(Debug)]
pub struct Writer<'a> {
    reg: &'a Registry,
    _guard: SharedMutexGuard<'a>,
    changed: bool,
    retired: replace::Retired,
    finished: bool,
}

impl Writer<'_> {
    /// Ends the change: bumps the generation once if anything changed, then removes what
    /// was retired. Returns the generation the registry now has (what `--wait` waits for).
    pub fn commit(mut self) -> u64 {
        self.finish()
    }

    /// The registry this writer changes.
    pub fn registry(&self) -> &Registry {
        self.reg
    }

    fn finish(&mut self) -> u64 {
        if self.finished {
            return self.reg.generation();
        }
        self.finished = true;
        let g = if self.changed {
            let g = self.reg.control.bump();
            tracing::debug!(generation = g, "registry changed");
            g
        } else {
            self.reg.generation()
        };
        self.remove_retired();
        g
    }

    fn clean_temporaries(&mut self) {
        self.finish_dead_journals();
        procstats::remove_dead_stale(&self.reg.home.join("procs"));
        for dir in [
            self.reg.maps_dir(),
            self.reg.progs_dir(),
            self.reg.home.clone(),
        ] {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let n = e.file_name();
                let Some(n) = n.to_str() else { continue };
                if !n.starts_with(".tmp-") {
                    continue;
                }
                // Temporaries of live writers cannot exist (we hold the lock), except a
                // concurrent map/control creation by a process that does not write the
                // registry (they carry the creator's pid): leave those of live pids.
                let pid = n
                    .trim_start_matches(".tmp-")
                    .trim_start_matches("del-")
                    .trim_start_matches("control-")
                    .trim_start_matches("retire-")
                    .trim_start_matches("journal-")
                    .trim_start_matches("ids-")
                    .split('-')
                    .next()
                    .and_then(|p| p.parse::<i32>().ok());
                if pid.is_some_and(crate::maps::pid_alive) {
                    continue;
                }
                let p = e.path();
                tracing::info!(path = %p.display(), "removing a dead writer's temporary");
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }

    /// Opens map `name` if it exists, else creates it.
    pub fn open_or_create_map(
        &mut self,
        name: &str,
        spec: &MapSpec,
        meta: &MapMeta,
    ) -> Result<(Arc<Map>, bool), RegistryError> {
        match self.reg.open_map(name) {
            Ok(m) => Ok((m, false)),
            Err(RegistryError::NoSuchMap { .. }) => Ok((self.create_map(name, spec, meta)?, true)),
            Err(e) => Err(e),
        }
    }

    /// Creates map `name` (fails when it exists).
    pub fn create_map(
        &mut self,
        name: &str,
        spec: &MapSpec,
        meta: &MapMeta,
    ) -> Result<Arc<Map>, RegistryError> {
        let path = self.reg.map_path(name)?;
        let meta = MapMeta {
            name: name.into(),
            ..meta.clone()
        };
        let m = Map::create(&path, spec, &meta).map_err(|source| RegistryError::Map {
            name: name.into(),
            source,
        })?;
        // A system registry's maps start read-write for applications (what a policy that
        // counts needs), `.rodata`-like ones read-only; the owner declares otherwise with
        // `set_map_access`.
        if let Mode::System { .. } = self.reg.mode {
            let access = if spec.flags & crate::maps::BPF_F_RDONLY_PROG != 0 {
                Access::Ro
            } else {
                Access::Rw
            };
            system::set_mode(&path, access.file_mode())?;
        }
        self.changed = true;
        Ok(Arc::new(m))
    }

    /// Declares what applications may do with map `name` of a system registry (its file
    /// mode); a no-op in a user registry, which no other user can reach. Processes apply
    /// it when they next rebuild (this change bumps the generation).
    pub fn set_map_access(&mut self, name: &str, access: Access) -> Result<(), RegistryError> {
        let path = self.reg.map_path(name)?;
        if !path.exists() {
            return Err(RegistryError::NoSuchMap { name: name.into() });
        }
        if let Mode::System { .. } = self.reg.mode {
            system::set_mode(&path, access.file_mode())?;
            self.changed = true;
        }
        Ok(())
    }

    /// Removes map `name`, refusing while a loaded program binds it (unless `force`).
    /// Processes that have it mapped keep their mapping.
    pub fn remove_map(&mut self, name: &str, force: bool) -> Result<(), RegistryError> {
        let path = self.reg.map_path(name)?;
        if !force {
            let users: Vec<String> = self
                .reg
                .snapshot()?
                .objects
                .iter()
                .filter(|o| o.maps.iter().any(|b| b.registry_name == name))
                .map(|o| format!("`{}`", o.name))
                .collect();
            if !users.is_empty() {
                return Err(RegistryError::MapInUse {
                    name: name.into(),
                    users: users.join(", "),
                });
            }
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.changed = true;
                self.drop_pin(name)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(RegistryError::NoSuchMap { name: name.into() })
            }
            Err(e) => Err(io_err(&path, "remove")(e)),
        }
    }

    /// Records (or replaces) loaded object `record.name` with its object bytes.
    pub fn publish_object(
        &mut self,
        record: &ObjectRecord,
        object: &[u8],
    ) -> Result<(), RegistryError> {
        check_name(&record.name)?;
        check_name(&record.object_file)?;
        let progs = self.reg.progs_dir();
        let tmp = progs.join(format!(".tmp-{}-{}", std::process::id(), record.name));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::DirBuilder::new()
            .mode_0700()
            .create(&tmp)
            .map_err(io_err(&tmp, "create directory"))?;
        let obj = tmp.join(&record.object_file);
        std::fs::write(&obj, object).map_err(io_err(&obj, "write"))?;
        let meta = tmp.join("meta.json");
        let json = serde_json::to_vec_pretty(record).map_err(|e| RegistryError::BadRecord {
            name: record.name.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&meta, json).map_err(io_err(&meta, "write"))?;
        // Every user's processes read (and re-verify) a system registry's programs.
        if let Mode::System { .. } = self.reg.mode {
            system::set_mode(&obj, 0o644)?;
            system::set_mode(&meta, 0o644)?;
            system::set_mode(&tmp, 0o755)?;
        }
        let dst = progs.join(&record.name);
        let res = if dst.exists() {
            exchange(&tmp, &dst).and_then(|()| std::fs::remove_dir_all(&tmp))
        } else {
            crate::maps::mapping::rename_noreplace(&tmp, &dst)
        };
        if let Err(e) = res {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(io_err(&dst, "publish")(e));
        }
        self.changed = true;
        Ok(())
    }

    /// Unloads object `name`. Its maps go at commit when no loaded object binds them and
    /// they are not pinned ([`Writer::remove_unused_maps`] says which, before).
    pub fn remove_object(&mut self, name: &str) -> Result<ObjectRecord, RegistryError> {
        let record = self.reg.object(name)?;
        self.retire_maps_of(&record)?;
        let dir = self.reg.progs_dir().join(name);
        let tmp = self
            .reg
            .progs_dir()
            .join(format!(".tmp-del-{}-{name}", std::process::id()));
        std::fs::rename(&dir, &tmp).map_err(io_err(&dir, "unload"))?;
        self.changed = true;
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(record)
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

trait DirBuilder0700 {
    fn mode_0700(&mut self) -> &mut Self;
}

impl DirBuilder0700 for std::fs::DirBuilder {
    fn mode_0700(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt;
        self.mode(0o700)
    }
}

/// Atomically exchanges two paths (`RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let cb = CString::new(b.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
