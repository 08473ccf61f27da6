//! The control block: a small shared file at the registry root.
//!
//! ```text
//! 0     magic "GPUBPFCB", version u32, slots u32
//! 64    generation: u64, bumped by every change (under the writer lock)
//! 128   wake: u32, futex word bumped with the generation (waiters sleep on it)
//! 136   stats until: u64, CLOCK_MONOTONIC nanoseconds until which processes collect
//!       per-program run counts and times (0: off; `gpubpf ps --stats` sets it)
//! 192   writer lock: a robust process-shared mutex
//! 512   process table: PROC_SLOTS × ProcSlot (pid, uid, start time, acknowledged generation)
//! ```
//! A system registry (`super::system`) keeps the process table in a file of its own,
//! `procs/table` (every user's processes register there), and the control file is writable
//! by the registry's owner only: other users map it read-only (they read the generation,
//! sleep on the futex word and read the statistics deadline, nothing else).
//! Readers never take the writer lock: they read the generation before and after looking
//! at the registry and retry when it moved (a seqlock without blocking).

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::maps::lock::{futex_wait, SharedMutex, SharedMutexGuard};
use crate::maps::mapping::{self, Mapping};

use super::RegistryError;

const MAGIC: [u8; 8] = *b"GPUBPFCB";
const VERSION: u32 = 1;
const GENERATION: usize = 64;
const WAKE: usize = 128;
const STATS_UNTIL: usize = 136;
const WRITER_LOCK: usize = 192;
const TABLE: usize = 512;
/// Slots of the process table.
pub const PROC_SLOTS: usize = 256;
const SLOT_SIZE: usize = 32;
/// Size of the control file.
pub const CONTROL_SIZE: usize = TABLE + PROC_SLOTS * SLOT_SIZE;

/// Size of a system registry's separate process table (`procs/table`).
pub const TABLE_SIZE: usize = PROC_SLOTS * SLOT_SIZE;

/// A live (or recently live) process registered in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProcessInfo {
    /// Index in the process table (names the process's stats file).
    pub slot: usize,
    /// Process id.
    pub pid: u32,
    /// Effective user id the process registered with.
    pub uid: u32,
    /// Start time (clock ticks since boot, `/proc/PID/stat` field 22), guards pid reuse.
    pub start_time: u64,
    /// Last registry generation the process reported running.
    pub acked_generation: u64,
}

/// The mapped control block.
#[derive(Debug)]
pub struct Control {
    mapping: Mapping,
    /// A system registry's separate process table (`procs/table`); `None`: the table is
    /// inside the control block.
    table: Option<Mapping>,
    /// The control block is mapped read-write (false: a system registry opened by
    /// another user than its owner).
    writable: bool,
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> RegistryError + 'a {
    move |source| RegistryError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process of the machine).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Start time of process `pid`, or `None` when it does not exist.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields follow the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Control {
    /// Opens the control file at `path`, creating it atomically when missing.
    pub fn open_or_create(path: &Path) -> Result<Self, RegistryError> {
        match mapping::open_rw(path) {
            Ok(f) => return Self::from_file(&f, path),
            Err(crate::maps::MapError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let tmp = path.with_file_name(format!(".tmp-control-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let f = mapping::create_new(&tmp)?;
        f.set_len(CONTROL_SIZE as u64).map_err(io(&tmp, "resize"))?;
        let m = Mapping::map(&f, &tmp, CONTROL_SIZE, None)?;
        // SAFETY: the file is private (temporary name); offsets are inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), m.base(), 8);
            m.base().add(8).cast::<u32>().write(VERSION);
            m.base().add(12).cast::<u32>().write(PROC_SLOTS as u32);
            SharedMutex::init(m.base().add(WRITER_LOCK).cast())
                .map_err(|e| RegistryError::Lock { source: e })?;
        }
        drop(m);
        match mapping::rename_noreplace(&tmp, path) {
            Ok(()) => {}
            // Someone else created it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&tmp);
            }
            Err(e) => return Err(io(path, "publish")(e)),
        }
        let f = mapping::open_rw(path)?;
        Self::from_file(&f, path)
    }

    fn from_file(f: &std::fs::File, path: &Path) -> Result<Self, RegistryError> {
        Self::check_header(f, path, false)
    }

    /// Maps `f` (read-only when `read_only`) and checks its header.
    fn check_header(
        f: &std::fs::File,
        path: &Path,
        read_only: bool,
    ) -> Result<Self, RegistryError> {
        let len = f.metadata().map_err(io(path, "stat"))?.len();
        let corrupt = |reason: String| RegistryError::CorruptControl {
            path: path.to_path_buf(),
            reason,
        };
        if len != CONTROL_SIZE as u64 {
            return Err(corrupt(format!("{len} bytes, expected {CONTROL_SIZE}")));
        }
        let m = if read_only {
            Mapping::map_read_only(f, path, CONTROL_SIZE, None)?
        } else {
            Mapping::map(f, path, CONTROL_SIZE, None)?
        };
        // SAFETY: the mapping is CONTROL_SIZE bytes.
        let (magic, version, slots) = unsafe {
            let mut magic = [0u8; 8];
            std::ptr::copy_nonoverlapping(m.base(), magic.as_mut_ptr(), 8);
            (
                magic,
                m.base().add(8).cast::<u32>().read(),
                m.base().add(12).cast::<u32>().read(),
            )
        };
        if magic != MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        if version != VERSION || slots as usize != PROC_SLOTS {
            return Err(corrupt(format!(
                "version {version} with {slots} slots, expected {VERSION} with {PROC_SLOTS}"
            )));
        }
        Ok(Self {
            mapping: m,
            table: None,
            writable: !read_only,
        })
    }

    /// Opens a system registry's control file (read-write when `writable`, else
    /// read-only) and its process table file `table` (always read-write).
    pub fn open_system(path: &Path, table: &Path, writable: bool) -> Result<Self, RegistryError> {
        let mut c = if writable {
            let f = mapping::open_rw(path)?;
            Self::from_file(&f, path)?
        } else {
            let f = mapping::open_ro(path)?;
            Self::check_header(&f, path, true)?
        };
        let tf = mapping::open_rw(table)?;
        let len = tf.metadata().map_err(io(table, "stat"))?.len();
        if len != TABLE_SIZE as u64 {
            return Err(RegistryError::CorruptControl {
                path: table.to_path_buf(),
                reason: format!("{len} bytes, expected {TABLE_SIZE}"),
            });
        }
        c.table = Some(Mapping::map(&tf, table, TABLE_SIZE, None)?);
        c.writable = writable;
        Ok(c)
    }

    /// Creates a system registry's process table file `table` (mode 0666: every user's
    /// processes register in it), unless it exists.
    pub fn create_table(table: &Path) -> Result<(), RegistryError> {
        if table.exists() {
            return Ok(());
        }
        let tmp = table.with_file_name(format!(".tmp-table-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let f = mapping::create_new(&tmp)?;
        f.set_len(TABLE_SIZE as u64).map_err(io(&tmp, "resize"))?;
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .map_err(io(&tmp, "chmod"))?;
        match mapping::rename_noreplace(&tmp, table) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&tmp);
                Ok(())
            }
            Err(e) => Err(io(table, "publish")(e)),
        }
    }

    /// Whether this process may change the control block (take the writer lock, set the
    /// statistics deadline).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    fn word64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: fixed 8-aligned offsets inside the mapping.
        unsafe { &*self.mapping.base().add(off).cast::<AtomicU64>() }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: fixed 4-aligned offsets inside the mapping.
        unsafe { &*self.mapping.base().add(off).cast::<AtomicU32>() }
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.word64(GENERATION).load(Ordering::Acquire)
    }

    /// The word holding the time until which run statistics are collected (see the
    /// layout); processes read it on every policed call. Read-only where the control block
    /// is ([`Control::is_writable`]): a store there faults.
    pub fn stats_until(&self) -> &AtomicU64 {
        self.word64(STATS_UNTIL)
    }

    /// Asks every process to collect run statistics until `deadline` (CLOCK_MONOTONIC
    /// nanoseconds, [`monotonic_ns`]); a later deadline already set is kept.
    pub fn enable_stats_until(&self, deadline: u64) -> Result<(), RegistryError> {
        if !self.writable {
            return Err(RegistryError::ReadOnlyControl);
        }
        self.stats_until().fetch_max(deadline, Ordering::AcqRel);
        Ok(())
    }

    /// Address of the futex word (for waiters that poll it directly).
    pub fn wake_word(&self) -> &AtomicU32 {
        self.word32(WAKE)
    }

    /// Takes the writer lock (robust: a writer killed while holding it does not wedge the
    /// registry; the next writer is told, through [`SharedMutexGuard::recovered`]).
    pub fn lock_writer(&self) -> Result<SharedMutexGuard<'_>, RegistryError> {
        if !self.writable {
            return Err(RegistryError::ReadOnlyControl);
        }
        // SAFETY: initialised at creation.
        let l = unsafe { &*self.mapping.base().add(WRITER_LOCK).cast::<SharedMutex>() };
        l.lock().map_err(|source| RegistryError::Lock { source })
    }

    /// Bumps the generation and wakes every waiter. Call with the writer lock held.
    pub fn bump(&self) -> u64 {
        let g = self.word64(GENERATION).fetch_add(1, Ordering::AcqRel) + 1;
        self.word32(WAKE).fetch_add(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on a valid, mapped, 4-aligned shared word.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word32(WAKE).as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
        g
    }

    /// Waits until the generation differs from `seen` or `timeout` passes; returns the
    /// current generation.
    pub fn wait_change(&self, seen: u64, timeout: std::time::Duration) -> u64 {
        // Without a nudge word the wait is a plain FUTEX_WAIT, which every kernel has.
        self.wait(seen, None, timeout)
            .unwrap_or_else(|| self.generation())
    }

    /// [`Control::wait_change`] that also returns once `nudge` (a word of this process)
    /// no longer holds `nudged`: one `futex_waitv` (Linux 5.16+) on the registry's wake
    /// word and on `nudge`, so that a thread of the process can wake its watcher with a
    /// private `FUTEX_WAKE` on `nudge` without waking every process that watches the
    /// registry. Returns the current generation, or `None` when the kernel has no
    /// `futex_waitv` (or refuses it): the caller then polls with [`Control::wait_change`].
    pub fn wait_change_or_nudge(
        &self,
        seen: u64,
        nudge: &AtomicU32,
        nudged: u32,
        timeout: std::time::Duration,
    ) -> Option<u64> {
        self.wait(seen, Some((nudge, nudged)), timeout)
    }

    /// The two waits: until the generation differs from `seen`, `nudge` (when given) no
    /// longer holds its value, or `timeout` passes. `None` when `futex_waitv` failed.
    fn wait(
        &self,
        seen: u64,
        nudge: Option<(&AtomicU32, u32)>,
        timeout: std::time::Duration,
    ) -> Option<u64> {
        let deadline = std::time::Instant::now() + timeout;
        let wake = self.word32(WAKE);
        loop {
            let w = wake.load(Ordering::Acquire);
            let g = self.generation();
            if g != seen || nudge.is_some_and(|(n, v)| n.load(Ordering::Acquire) != v) {
                return Some(g);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Some(g);
            }
            match nudge {
                None => futex_wait(wake, w, deadline - now),
                Some((n, v)) => {
                    if !futex_waitv(wake, w, n, v, deadline - now) {
                        return None;
                    }
                }
            }
        }
    }

    fn slot(&self, i: usize) -> (&AtomicU32, &AtomicU64, &AtomicU64) {
        let (base, off) = self.slot_base(i);
        // SAFETY: `off` is a slot offset inside the table mapping (i < PROC_SLOTS); the
        // fields are 4- and 8-aligned.
        unsafe {
            (
                &*base.add(off).cast::<AtomicU32>(),
                &*base.add(off + 8).cast::<AtomicU64>(),
                &*base.add(off + 16).cast::<AtomicU64>(),
            )
        }
    }

    /// The word holding the uid of slot `i`'s process.
    fn slot_uid(&self, i: usize) -> &AtomicU32 {
        let (base, off) = self.slot_base(i);
        // SAFETY: as in `slot`.
        unsafe { &*base.add(off + 4).cast::<AtomicU32>() }
    }

    /// The mapping holding slot `i` and the slot's offset in it.
    fn slot_base(&self, i: usize) -> (*mut u8, usize) {
        let i = i.min(PROC_SLOTS - 1);
        match &self.table {
            Some(t) => (t.base(), i * SLOT_SIZE),
            None => (self.mapping.base(), TABLE + i * SLOT_SIZE),
        }
    }

    /// Claims a process-table slot for `pid` (reusing slots of dead processes).
    pub fn register(&self, pid: u32) -> Result<usize, RegistryError> {
        let start = process_start_time(pid).unwrap_or(0);
        for i in 0..PROC_SLOTS {
            let (p, st, ack) = self.slot(i);
            let cur = p.load(Ordering::Acquire);
            let free = cur == 0 || !self.slot_alive(i);
            if free
                && p.compare_exchange(cur, pid, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                // SAFETY: geteuid cannot fail.
                self.slot_uid(i)
                    .store(unsafe { libc::geteuid() }, Ordering::Release);
                st.store(start, Ordering::Release);
                ack.store(0, Ordering::Release);
                return Ok(i);
            }
        }
        Err(RegistryError::ProcessTableFull { slots: PROC_SLOTS })
    }

    /// Releases slot `i` if it still belongs to `pid`.
    pub fn unregister(&self, i: usize, pid: u32) {
        if i < PROC_SLOTS {
            let _ = self
                .slot(i)
                .0
                .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Records that the process in slot `i` runs generation `g`.
    pub fn ack(&self, i: usize, g: u64) {
        if i < PROC_SLOTS {
            self.slot(i).2.store(g, Ordering::Release);
        }
    }

    fn slot_alive(&self, i: usize) -> bool {
        let (p, st, _) = self.slot(i);
        let pid = p.load(Ordering::Acquire);
        if pid == 0 {
            return false;
        }
        match process_start_time(pid) {
            Some(t) => {
                let recorded = st.load(Ordering::Acquire);
                recorded == 0 || recorded == t
            }
            None => false,
        }
    }

    /// Live registered processes.
    pub fn processes(&self) -> Vec<ProcessInfo> {
        (0..PROC_SLOTS)
            .filter(|&i| self.slot_alive(i))
            .map(|i| {
                let (p, st, ack) = self.slot(i);
                ProcessInfo {
                    slot: i,
                    pid: p.load(Ordering::Acquire),
                    uid: self.slot_uid(i).load(Ordering::Acquire),
                    start_time: st.load(Ordering::Acquire),
                    acked_generation: ack.load(Ordering::Acquire),
                }
            })
            .collect()
    }
}

/// One `futex_waitv` on the shared `word` (while it holds `w`) and this process's `nudge`
/// (while it holds `nudged`), for at most `left`. False when the kernel has no
/// `futex_waitv` or refuses it; a wake-up, a changed word, a signal or the timeout are true.
fn futex_waitv(
    word: &AtomicU32,
    w: u32,
    nudge: &AtomicU32,
    nudged: u32,
    left: std::time::Duration,
) -> bool {
    let at = monotonic_after(left);
    let size = libc::FUTEX2_SIZE_U32 as u32;
    let waiters = [
        FutexWaitv {
            val: u64::from(w),
            uaddr: word.as_ptr() as u64,
            flags: size,
            reserved: 0,
        },
        FutexWaitv {
            val: u64::from(nudged),
            uaddr: nudge.as_ptr() as u64,
            flags: size | libc::FUTEX2_PRIVATE as u32,
            reserved: 0,
        },
    ];
    // SAFETY: `futex_waitv` reads the two descriptors (on our stack, laid out as the
    // kernel's `struct futex_waitv`) and the absolute timeout; both words are valid,
    // 4-aligned and mapped (the wake word in the control block, shared; the nudge word in
    // this process).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waiters.as_ptr(),
            waiters.len() as libc::c_uint,
            0 as libc::c_uint,
            &raw const at,
            libc::CLOCK_MONOTONIC,
        )
    };
    rc >= 0
        || matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR)
        )
}

/// The kernel's `struct futex_waitv` (`include/uapi/linux/futex.h`).
#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `CLOCK_MONOTONIC` now plus `d`, as an absolute timeout.
fn monotonic_after(d: std::time::Duration) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one timespec to a valid pointer; CLOCK_MONOTONIC
    // always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = now.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: now
            .tv_sec
            .saturating_add(d.as_secs().min(i64::MAX as u64 / 2) as libc::time_t)
            .saturating_add((nanos / 1_000_000_000) as libc::time_t),
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}
