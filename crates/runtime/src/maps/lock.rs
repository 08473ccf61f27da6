//! A lock in shared memory that survives the death of its owner.
//!
//! A robust, process-shared pthread mutex: the kernel walks the robust list of a thread
//! that dies (SIGKILL included) and marks every mutex it held `FUTEX_OWNER_DIED`; the next
//! locker gets `EOWNERDEAD`, calls `pthread_mutex_consistent` and carries on. Data
//! structures protected by these locks are written so that every intermediate state a dead
//! owner can leave behind is consistent (single-store publication of links).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

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
