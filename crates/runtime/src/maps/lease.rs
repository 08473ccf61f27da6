//! Leases: who holds a map lock, in a form every process that shares the map can check.
//!
//! A map lock ([`super::lock::MapLock`]) holds its owner's *token*. A token names a lease
//! slot of the map file and that slot's generation. A process claims a slot for each map it
//! opens for writing by taking an open-file-description (OFD) write lock on the slot's byte
//! of the map file (far beyond its end), through a descriptor of its own, and by bumping the
//! slot's generation word in the file's header page. The kernel drops an OFD lock when the
//! last descriptor of its open file description is closed, which a process's death does
//! (SIGKILL included). So a waiter tells a dead owner from a live one without any process or
//! thread id, in whatever pid namespace either lives:
//! - the slot's generation moved on: the owner's lease ended (its slot was claimed again);
//! - nobody holds the slot's byte (`F_OFD_GETLK` says unlocked): the owner is gone.
//!
//! A forked child inherits the lease descriptors, which would keep its parent's leases alive
//! after the parent's death: a `pthread_atfork` child handler closes every lease descriptor
//! (a table of them, async-signal-safe) and bumps a fork epoch; the child's leases are claimed
//! again at their next use. Descriptors carry `O_CLOEXEC`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Lease slots per map file: processes that may write one map at the same time with a lease
/// each (a process beyond them locks under [`ANONYMOUS`], whose death cannot be detected).
pub const LEASE_SLOTS: u32 = 512;
/// Bits of a token holding its slot's generation.
const GEN_BITS: u32 = 20;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
/// Bits of a token (the lock word's other two bits are its flags).
pub const TOKEN_MASK: u32 = (1 << 30) - 1;
/// The token of a process without a lease (no descriptor, or every slot taken): never
/// taken for dead (slot field 0).
pub const ANONYMOUS: u32 = 1;
/// File offset of slot 0's lock byte (no map file is that large).
const LOCK_BASE: i64 = 1 << 40;

/// Bumped in every forked child: leases claimed under an older epoch are claimed again.
static FORK_EPOCH: AtomicU32 = AtomicU32::new(0);
/// Flag of a lease state's epoch: a thread is claiming a slot for it.
const CLAIMING: u32 = 1 << 31;
/// Descriptors of live leases (descriptor + 1; 0: free), closed by a forked child.
static LEASE_FDS: [AtomicI32; 256] = [const { AtomicI32::new(0) }; 256];
static ATFORK: std::sync::Once = std::sync::Once::new();
static WARNED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    // Only atomics and close(2): async-signal-safe, as a child of a multithreaded parent
    // requires.
    for e in &LEASE_FDS {
        let v = e.swap(0, Ordering::Relaxed);
        if v > 0 {
            // SAFETY: `v - 1` is a lease descriptor this process inherited and owns alone.
            unsafe { libc::close(v - 1) };
        }
    }
    FORK_EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// A lease state: the epoch (with its `CLAIMING` flag) and the token.
fn state_of(epoch: u32, token: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(token)
}

/// The epoch of a lease state (with its `CLAIMING` flag).
#[inline(always)]
fn epoch_of(state: u64) -> u32 {
    (state >> 32) as u32
}

/// This process's lease on one map file (one per [`super::Map`] opened for writing).
#[derive(Debug)]
pub struct Lease {
    /// The map file, opened again for each claim; `None`: no lease (read-only map).
    path: Option<CString>,
    /// The file's generation words (`LEASE_SLOTS` of them), inside the caller's mapping.
    gens: *const AtomicU32,
    /// Fork epoch (high half) and token (low half) of the current claim.
    state: AtomicU64,
    /// The lease's descriptor, -1 when none.
    fd: AtomicI32,
    /// Its entry in `LEASE_FDS`, `usize::MAX` when none.
    entry: std::sync::atomic::AtomicUsize,
    /// `FORK_EPOCH`, read through [`Lease::epoch_now`] (every lock, in [`Lease::token`]):
    /// the lease's own line holds its address, where code reaching the static by name would
    /// load it from a GOT slot (the static is exported from the rlib), a line of its own on a
    /// cold call.
    fork_epoch: &'static AtomicU32,
}

// SAFETY: `gens` points into a shared mapping that outlives the lease (both belong to one
// `Map`); it is only accessed through atomics.
unsafe impl Send for Lease {}
// SAFETY: as above; every other field is atomic or immutable.
unsafe impl Sync for Lease {}

impl Lease {
    /// No lease: the map is only read, and never locked.
    pub fn none() -> Self {
        Self {
            path: None,
            gens: std::ptr::null(),
            state: AtomicU64::new(u64::from(ANONYMOUS)),
            fd: AtomicI32::new(-1),
            entry: std::sync::atomic::AtomicUsize::new(usize::MAX),
            fork_epoch: &FORK_EPOCH,
        }
    }

    /// Claims a lease on the map file at `path`, whose generation words start at `gens`.
    ///
    /// # Safety
    /// `gens` must point to `LEASE_SLOTS` 4-aligned words of the file's shared mapping, valid
    /// for as long as the lease lives.
    pub unsafe fn claim(path: &Path, gens: *const AtomicU32) -> Self {
        ATFORK.call_once(|| {
            // SAFETY: registers a handler that only closes descriptors and bumps an atomic.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pthread_atfork failed: a forked child keeps its parent's map leases alive"
                );
            }
        });
        let mut lease = Self::none();
        lease.path = CString::new(path.as_os_str().as_bytes()).ok();
        lease.gens = gens;
        let epoch = lease.epoch_now();
        let token = lease.take_any_slot();
        lease.state.store(state_of(epoch, token), Ordering::Release);
        lease
    }

    /// Names the file by `path` for later claims (a map file built under a temporary name).
    pub fn renamed(&mut self, path: &Path) {
        if self.path.is_some() {
            self.path = CString::new(path.as_os_str().as_bytes()).ok();
        }
    }

    /// The fork epoch leases are claimed in now.
    #[inline(always)]
    fn epoch_now(&self) -> u32 {
        self.fork_epoch.load(Ordering::Relaxed) & !CLAIMING
    }

    /// The token this process locks with.
    #[inline(always)]
    pub fn token(&self) -> u32 {
        let s = self.state.load(Ordering::Relaxed);
        if epoch_of(s) == self.epoch_now() {
            s as u32
        } else {
            self.reclaim()
        }
    }

    /// Claims a slot (again, after a fork): the new token. One thread claims; others that
    /// find the claim stale meanwhile wait for it (a claim marked in an older epoch was
    /// interrupted by a fork: its thread does not exist in this process, so it is taken
    /// over).
    #[cold]
    fn reclaim(&self) -> u32 {
        let epoch = self.epoch_now();
        let prev = loop {
            let s = self.state.load(Ordering::Acquire);
            let e = epoch_of(s);
            if e == epoch {
                return s as u32; // another thread claimed meanwhile
            }
            if e == epoch | CLAIMING {
                std::hint::spin_loop();
                continue;
            }
            let mine = state_of(epoch | CLAIMING, s as u32);
            if self
                .state
                .compare_exchange(s, mine, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                break e & !CLAIMING;
            }
        };
        self.release(prev != epoch);
        let token = self.take_any_slot();
        self.state.store(state_of(epoch, token), Ordering::Release);
        token
    }

    /// A slot's token, or [`ANONYMOUS`] (said once per process) when none can be had.
    fn take_any_slot(&self) -> u32 {
        match self.path.as_ref().and_then(|p| self.take_slot(p)) {
            Some(t) => t,
            None => {
                if self.path.is_some() && !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!("no map lease could be claimed: a lock this process holds when it dies will not be recovered");
                }
                ANONYMOUS
            }
        }
    }

    /// Opens the file and takes the first free slot from one that depends on the pid.
    fn take_slot(&self, path: &CString) -> Option<u32> {
        // SAFETY: `path` is a NUL-terminated string; open takes no other pointer.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let start = std::process::id() % LEASE_SLOTS;
        for k in 0..LEASE_SLOTS {
            let i = (start + k) % LEASE_SLOTS;
            if ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK as i16, i).is_some() {
                self.fd.store(fd, Ordering::Relaxed);
                self.register(fd);
                let gen = self.gen(i).fetch_add(1, Ordering::AcqRel).wrapping_add(1) & GEN_MASK;
                return Some(((i + 1) << GEN_BITS) | gen);
            }
        }
        // SAFETY: our own descriptor, used by nobody else.
        unsafe { libc::close(fd) };
        None
    }

    fn register(&self, fd: i32) {
        for (n, e) in LEASE_FDS.iter().enumerate() {
            if e.compare_exchange(0, fd + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.entry.store(n, Ordering::Relaxed);
                return;
            }
        }
        tracing::debug!("lease table full: a forked child would keep this lease alive");
    }

    /// Closes the lease's descriptor, unless a forked child's handler already did (`forked`:
    /// the claim is of an older fork epoch; the handler closed every registered descriptor,
    /// whose numbers may name other files by now).
    fn release(&self, forked: bool) {
        let fd = self.fd.swap(-1, Ordering::Relaxed);
        let n = self.entry.swap(usize::MAX, Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        match LEASE_FDS.get(n) {
            Some(_) if forked => {}
            Some(e) => {
                if e.compare_exchange(fd + 1, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    // SAFETY: the descriptor is ours and still open (its entry was ours).
                    unsafe { libc::close(fd) };
                }
            }
            None => {
                // SAFETY: an unregistered descriptor of ours, closed by nobody else.
                unsafe { libc::close(fd) };
            }
        }
    }

    fn gen(&self, i: u32) -> &AtomicU32 {
        // SAFETY: i < LEASE_SLOTS; `gens` spans that many words per `claim`'s contract.
        unsafe { &*self.gens.add(i as usize) }
    }

    /// Whether the owner of `token` may still be alive (true when that cannot be told).
    pub fn alive(&self, token: u32) -> bool {
        let token = token & TOKEN_MASK;
        let slot = token >> GEN_BITS;
        if slot == 0 || token == self.token() || self.gens.is_null() {
            return true;
        }
        let i = slot - 1;
        if i >= LEASE_SLOTS {
            return false; // no process ever locks with such a token: a corrupt word
        }
        if self.gen(i).load(Ordering::Acquire) & GEN_MASK != token & GEN_MASK {
            return false; // the slot was claimed again since
        }
        let fd = self.fd.load(Ordering::Relaxed);
        if fd < 0 {
            return true;
        }
        // F_OFD_GETLK answers for other open file descriptions only; ours holds another slot.
        ofd_lock(fd, libc::F_OFD_GETLK, libc::F_WRLCK as i16, i)
            .is_none_or(|l| l.l_type != libc::F_UNLCK as i16)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let claimed_in = epoch_of(self.state.load(Ordering::Relaxed)) & !CLAIMING;
        self.release(claimed_in != self.epoch_now());
    }
}

/// `fcntl(fd, cmd)` on slot `i`'s byte: the lock description back, `None` on failure.
fn ofd_lock(fd: i32, cmd: i32, kind: i16, i: u32) -> Option<libc::flock> {
    let mut l = libc::flock {
        l_type: kind,
        l_whence: libc::SEEK_SET as i16,
        l_start: LOCK_BASE + i64::from(i),
        l_len: 1,
        l_pid: 0,
    };
    // SAFETY: `l` is a valid flock on our stack for the call.
    let rc = unsafe { libc::fcntl(fd, cmd, &mut l as *mut libc::flock) };
    (rc == 0).then_some(l)
}

#[cfg(test)]
mod tests;
