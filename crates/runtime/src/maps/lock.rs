//! Locks in shared memory that survive the death of their owner.
//!
//! - [`MapLock`], the locks of map files (hash buckets, ring producers and consumers, array
//!   writers): one word holding the owner's lease token ([`super::lease`]). Taking it free is
//!   one compare-and-swap and giving it back one store, where a robust pthread mutex also
//!   maintains the thread's robust list (about 9 ns more per lock and unlock here, and twice
//!   that on a policed `cuMemAlloc`, which takes one). A waiter spins briefly, then sleeps on
//!   the word (a shared futex, at most 1 ms at a time) and, when the same owner still holds
//!   it after a sleep, asks the owner's lease whether it is alive; a dead owner's lock is
//!   taken over and reported as recovered.
//! - [`SharedMutex`], the registry's writer lock: a robust, process-shared pthread mutex. The
//!   kernel walks the robust list of a thread that dies (SIGKILL included) and marks every
//!   mutex it held `FUTEX_OWNER_DIED`; the next locker gets `EOWNERDEAD`, calls
//!   `pthread_mutex_consistent` and carries on.
//!
//! Data structures protected by these locks are written so that every intermediate state a
//! dead owner can leave behind is consistent (single-store publication of links).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::lease::{Lease, TOKEN_MASK};

static RECOVERIES: AtomicU64 = AtomicU64::new(0);

/// How many times this process recovered a lock whose owner died (diagnostics, tests).
pub fn recoveries() -> u64 {
    RECOVERIES.load(Ordering::Relaxed)
}

/// Bytes reserved for one lock in shared layouts (`pthread_mutex_t` is 40 bytes on x86-64
/// glibc and 48 on aarch64).
pub const LOCK_SLOT: usize = 48;

const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= LOCK_SLOT);

/// A robust process-shared mutex living in a mapped file.
#[repr(C)]
pub struct SharedMutex {
    raw: UnsafeCell<libc::pthread_mutex_t>,
}

impl std::fmt::Debug for SharedMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedMutex")
    }
}

/// Why a lock could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("shared lock is unusable (errno {errno})")]
    Unusable { errno: i32 },
}

/// Holds the lock; unlocks on drop.
#[derive(Debug)]
pub struct SharedMutexGuard<'a> {
    lock: &'a SharedMutex,
    recovered: bool,
}

impl SharedMutexGuard<'_> {
    /// Whether the previous owner died while holding the lock.
    pub fn recovered(&self) -> bool {
        self.recovered
    }
}

impl Drop for SharedMutexGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard proves the calling thread holds the mutex.
        unsafe {
            libc::pthread_mutex_unlock(self.lock.raw.get());
        }
    }
}

impl SharedMutex {
    /// Initialises a robust, process-shared mutex at `p`.
    ///
    /// # Safety
    /// `p` must be valid for writes of `LOCK_SLOT` bytes, suitably aligned, and no other
    /// process may use it yet.
    pub unsafe fn init(p: *mut SharedMutex) -> Result<(), LockError> {
        // SAFETY: attr lives on our stack for the duration of these calls; `p` is valid
        // per the caller's contract.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            let mut rc = libc::pthread_mutexattr_init(&mut attr);
            if rc == 0 {
                rc = libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
            }
            if rc == 0 {
                rc = libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
            }
            if rc == 0 {
                rc = libc::pthread_mutex_init(UnsafeCell::raw_get(&raw const (*p).raw), &attr);
            }
            libc::pthread_mutexattr_destroy(&mut attr);
            if rc != 0 {
                return Err(LockError::Unusable { errno: rc });
            }
        }
        Ok(())
    }

    /// Takes the lock, recovering it when its owner died.
    pub fn lock(&self) -> Result<SharedMutexGuard<'_>, LockError> {
        // SAFETY: the mutex was initialised by `init` when its file was created.
        let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
        match rc {
            0 => Ok(SharedMutexGuard {
                lock: self,
                recovered: false,
            }),
            libc::EOWNERDEAD => {
                // SAFETY: we hold the lock (EOWNERDEAD acquires it); mark it usable again.
                let rc = unsafe { libc::pthread_mutex_consistent(self.raw.get()) };
                if rc != 0 {
                    return Err(LockError::Unusable { errno: rc });
                }
                RECOVERIES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("recovered a shared lock whose owner died");
                Ok(SharedMutexGuard {
                    lock: self,
                    recovered: true,
                })
            }
            errno => Err(LockError::Unusable { errno }),
        }
    }
}

/// The lock word's flag: someone sleeps on it (the unlocker wakes one).
const WAITERS: u32 = 1 << 31;
/// Spins before a waiter sleeps (a critical section takes well under a microsecond).
const SPINS: u32 = 100;

/// A map lock: one 4-byte word in a map file (a hash bucket's first word, a ring's or an
/// array's lock slot), 0 when free (a fresh file's zeroes), else the owner's lease token and
/// [`WAITERS`].
#[repr(C)]
#[derive(Debug, Default)]
pub struct MapLock {
    word: AtomicU32,
}

/// Holds a [`MapLock`]; unlocks on drop.
#[derive(Debug)]
pub struct MapLockGuard<'a> {
    lock: &'a MapLock,
    recovered: bool,
}

impl MapLockGuard<'_> {
    /// Whether the previous owner died while holding the lock.
    pub fn recovered(&self) -> bool {
        self.recovered
    }
}

impl Drop for MapLockGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let w = &self.lock.word;
        // Only the owner clears the word; others only add WAITERS. A waiter that adds it
        // between this load and the store below finds the word changed when it goes to sleep,
        // or sleeps until its timeout (1 ms): never for good.
        if w.load(Ordering::Relaxed) & WAITERS == 0 {
            w.store(0, Ordering::Release);
        } else {
            w.swap(0, Ordering::Release);
            futex_wake_one(w);
        }
    }
}

impl MapLock {
    /// Takes the lock for the holder of `lease`, taking it over from a dead owner.
    #[inline(always)]
    pub fn lock(&self, lease: &Lease) -> MapLockGuard<'_> {
        let me = lease.token();
        if self
            .word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return MapLockGuard {
                lock: self,
                recovered: false,
            };
        }
        self.lock_contended(lease, me)
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, lease: &Lease, me: u32) -> MapLockGuard<'_> {
        let w = &self.word;
        let mut spins = 0;
        // A waiter that slept takes the lock with WAITERS set: others may still sleep.
        let mut mine = me;
        let mut last = 0;
        loop {
            let v = w.load(Ordering::Relaxed);
            if v == 0 {
                if w.compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return MapLockGuard {
                        lock: self,
                        recovered: false,
                    };
                }
                continue;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if v == last && !lease.alive(v & TOKEN_MASK) {
                // Still the owner seen before the last sleep, and it is gone.
                if w.compare_exchange(v, me | (v & WAITERS), Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    RECOVERIES.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("recovered a map lock whose owner died");
                    return MapLockGuard {
                        lock: self,
                        recovered: true,
                    };
                }
                continue;
            }
            if v & WAITERS == 0
                && w.compare_exchange(v, v | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            last = v | WAITERS;
            mine = me | WAITERS;
            futex_wait(w, v | WAITERS, std::time::Duration::from_millis(1));
        }
    }
}

/// `FUTEX_WAIT` on the shared `word` while it holds `w`, for at most `left` (also the
/// registry's waits on its generation word).
pub(crate) fn futex_wait(word: &AtomicU32, w: u32, left: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, mapped, 4-aligned shared word; `ts` lives on our
    // stack for the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            w,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes one sleeper of the shared `word`.
#[cold]
fn futex_wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a mapped, 4-aligned word; no other pointer.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}
