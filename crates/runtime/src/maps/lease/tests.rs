use std::sync::atomic::{AtomicU32, Ordering};

use super::super::lock::MapLock;
use super::*;

/// A scratch file standing for a map file, and its generation words.
struct Scratch {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    gens: Box<[AtomicU32]>,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m");
    std::fs::write(&path, [0u8; 64]).unwrap();
    let gens = (0..LEASE_SLOTS).map(|_| AtomicU32::new(0)).collect();
    Scratch {
        _dir: dir,
        path,
        gens,
    }
}

impl Scratch {
    fn lease(&self) -> Lease {
        // SAFETY: `gens` holds LEASE_SLOTS words and outlives every lease of the test.
        unsafe { Lease::claim(&self.path, self.gens.as_ptr()) }
    }
}

/// Whether `watcher` finds `token` dead within 2 s. A child that another test forks copies
/// every descriptor of this process and closes the lease descriptors in its fork handler,
/// which may run a while later on a loaded machine: until then the copy keeps a lease alive.
fn dies_soon(watcher: &Lease, token: u32) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while watcher.alive(token) {
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// Forks; the child runs `f` and exits with its result; the parent gets that status.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes system calls and touches atomics before `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let rc = f();
        // SAFETY: leave without running the parent's destructors.
        unsafe { libc::_exit(rc) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    libc::WEXITSTATUS(status)
}

#[test]
fn leases_are_distinct_and_die_with_their_descriptor() {
    let s = scratch();
    let a = s.lease();
    let b = s.lease();
    let (ta, tb) = (a.token(), b.token());
    assert_ne!(ta, ANONYMOUS);
    assert_ne!(tb, ANONYMOUS);
    assert_ne!(ta >> GEN_BITS, tb >> GEN_BITS, "one slot each");
    assert_eq!(ta, a.token(), "stable");
    assert!(a.alive(ta) && a.alive(tb) && b.alive(ta));
    drop(b);
    assert!(dies_soon(&a, tb), "a closed lease is dead");
    // Its slot claimed again: the old token stays dead (the generation moved on).
    let c = s.lease();
    assert!(!a.alive(tb));
    assert!(a.alive(c.token()));
    // Tokens no lease ever had: the anonymous one lives, a slot out of range is dead.
    assert!(a.alive(ANONYMOUS));
    assert!(!a.alive(((LEASE_SLOTS + 5) << GEN_BITS) | 1));
}

#[test]
fn a_forked_child_leases_anew_and_does_not_keep_its_parents_lease() {
    let s = scratch();
    let parent = s.lease();
    let watcher = s.lease();
    let tp = parent.token();
    // The child's first use claims a slot of its own.
    let rc = in_child(|| {
        let t = parent.token();
        i32::from(t != tp && t != ANONYMOUS && t >> GEN_BITS != tp >> GEN_BITS)
    });
    assert_eq!(rc, 1, "the child claimed a new slot");
    // The parent's token is untouched.
    assert_eq!(parent.token(), tp);
    assert!(watcher.alive(tp));
    // A child that outlives its parent's lease does not keep it alive (its inherited
    // descriptor was closed at fork). `up`: the child runs (its fork handler ran); `hold`:
    // it waits until the parent is done.
    let pipe = || {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        fds
    };
    let (up, hold) = (pipe(), pipe());
    // SAFETY: the child only writes, reads and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut b = [0u8; 1];
        // SAFETY: a write and a read of our stack buffer on the pipes.
        unsafe {
            libc::close(hold[1]);
            libc::write(up[1], b.as_ptr().cast(), 1);
            libc::read(hold[0], b.as_mut_ptr().cast(), 1);
            libc::_exit(0)
        };
    }
    let mut b = [0u8; 1];
    // SAFETY: a read into our stack buffer.
    assert_eq!(unsafe { libc::read(up[0], b.as_mut_ptr().cast(), 1) }, 1);
    drop(parent);
    let dead = dies_soon(&watcher, tp);
    // SAFETY: closing our ends releases the child; then we reap it.
    unsafe {
        for fd in up.into_iter().chain(hold) {
            libc::close(fd);
        }
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
    assert!(
        dead,
        "the parent's lease died with the parent's descriptor, child alive"
    );
}

#[test]
fn map_locks_exclude_across_threads_and_recover_from_dead_owners() {
    let s = std::sync::Arc::new(scratch());
    let word = std::sync::Arc::new(MapLock::default());
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (s, word, counter) = (s.clone(), word.clone(), counter.clone());
            std::thread::spawn(move || {
                let lease = s.lease();
                for _ in 0..20_000 {
                    let _g = word.lock(&lease);
                    // A non-atomic increment: lost updates if two threads were inside.
                    let v = counter.load(Ordering::Relaxed);
                    std::hint::spin_loop();
                    counter.store(v + 1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::Relaxed), 80_000);
    // A child that dies holding the lock (a MAP_SHARED word, as in a map file).
    // SAFETY: an anonymous shared mapping of one page, unmapped below.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    // SAFETY: the page is mapped, zeroed and 4-aligned: a free lock.
    let lock = unsafe { &*page.cast::<MapLock>() };
    let lease = s.lease();
    let before = super::super::lock::recoveries();
    assert_eq!(
        in_child(|| {
            std::mem::forget(lock.lock(&lease));
            0
        }),
        0
    );
    let g = lock.lock(&lease);
    assert!(g.recovered(), "the dead child's lock was taken over");
    assert_eq!(super::super::lock::recoveries(), before + 1);
    drop(g);
    assert!(!lock.lock(&lease).recovered());
    // A word no lease can have written (a corrupt file) is taken over as well.
    // SAFETY: the lock's word is its first 4 bytes.
    unsafe { &*page.cast::<AtomicU32>() }
        .store(((LEASE_SLOTS + 1) << GEN_BITS) | 3, Ordering::Relaxed);
    assert!(lock.lock(&lease).recovered());
    // SAFETY: unmapping the page mapped above; `lock` is not used after.
    unsafe { libc::munmap(page, 4096) };
}

#[test]
fn threads_of_a_forked_child_share_one_new_claim() {
    let s = scratch();
    let lease = s.lease();
    let tp = lease.token();
    let rc = in_child(|| {
        let before: Vec<u32> = s.gens.iter().map(|g| g.load(Ordering::Relaxed)).collect();
        let start = std::sync::Barrier::new(8);
        let tokens: Vec<u32> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    sc.spawn(|| {
                        start.wait();
                        lease.token()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        let claimed = s
            .gens
            .iter()
            .zip(&before)
            .filter(|(g, b)| g.load(Ordering::Relaxed) != **b)
            .count();
        let one_token = tokens.iter().all(|&t| t == tokens[0]);
        i32::from(one_token && tokens[0] != tp && tokens[0] != ANONYMOUS && claimed == 1)
    });
    assert_eq!(
        rc, 1,
        "every thread of the child locks with the one slot it claimed"
    );
}
