//! Native code for published chains, point by point as the process calls them.
//!
//! A build (the first, on the process's first driver call, and each later one, on the
//! watcher after a registry change) waits only for re-verification: its chains are
//! published on the interpreter (`Tier::Interpreted`), and the watcher thread compiles
//! them to native code while the application goes on. It compiles a point's chain once the
//! point has been called in this process (the point's `calls` counter in the process's
//! stats file, which every policed call bumps), not every chain of every object: a process
//! calls a handful of the points that quota and trace attach to, and compiling all 33 of
//! their programs took 62–68 ms of CPU per process on the development VM, which 200
//! processes starting at once on 16 cores pay together (docs/shim.md, "Native code as
//! points are called").
//!
//! A call that runs an interpreted chain nudges the watcher, once per published chain
//! ([`nudge_once`]): it bumps [`NUDGE`], a word of this process, and wakes it with a private
//! `FUTEX_WAKE`. The watcher waits on that word and on the registry's wake word at once
//! (`futex_waitv`, `Control::wait_change_or_nudge`), so a point first called late is
//! compiled right after its first call, and a process whose other points are never called
//! sleeps: it used to look again every 250 ms for good, four wake-ups a second in every
//! policed process. [`IDLE_LOOK`] bounds that sleep all the same. On a kernel without
//! `futex_waitv` (before Linux 5.16) the watcher polls instead, after a sleep that doubles
//! from [`FIRST_LOOK`] to [`LAST_LOOK`] (and restarts at the first after a pass that
//! compiled something): a point first called later runs on the interpreter for at most
//! that long. A process without a stats file has no counters to go by and compiles
//! everything at once. After a later build the points already called (their counters
//! survive the rebuild) are compiled by the pass right after it, and the change took
//! effect without waiting for Cranelift; decisions are the same on either engine
//! (`tests/dispatch_tiers.rs`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpubpf_runtime::helpers::standard_helpers;

use crate::hot::{self, Published};
use crate::init::{error_chain, warn_once};

/// The watcher's first sleep before it looks for newly called points.
pub(crate) const FIRST_LOOK: Duration = Duration::from_millis(1);
/// Its longest: the most a point first called late runs on the interpreter, where the
/// watcher polls.
pub(crate) const LAST_LOOK: Duration = Duration::from_millis(250);
/// The longest the watcher sleeps, where it is nudged, while some chain is interpreted.
pub(crate) const IDLE_LOOK: Duration = Duration::from_secs(10);

/// Bumped by each nudge; the watcher sleeps while it holds the value read before its last
/// pass ([`Compiler::nudged`]).
pub(crate) static NUDGE: AtomicU32 = AtomicU32::new(0);

/// Wakes the watcher to compile `chain`, whose point was just called on the interpreter,
/// unless a call has already done so for this chain. Out of line: only calls of
/// interpreted chains come here, at most one nudge each.
#[cold]
#[inline(never)]
pub(crate) fn nudge_once(chain: &Published) {
    if chain.nudged() {
        return;
    }
    NUDGE.fetch_add(1, Ordering::Release);
    // SAFETY: FUTEX_WAKE_PRIVATE on a valid, 4-aligned word of this process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            NUDGE.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1i32,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// What the watcher keeps between its compilation passes.
#[derive(Debug)]
pub(crate) struct Compiler {
    /// The next sleep while some chain is interpreted.
    look: Duration,
    /// Interpreted chains left after the last pass (their points not called yet).
    left: usize,
    /// Chains that failed to compile (by address, while published): not tried again.
    failed: HashSet<usize>,
    /// [`NUDGE`] when the last pass began: a nudge since then means a point may have been
    /// called that the pass did not see called.
    nudged: u32,
}

impl Default for Compiler {
    fn default() -> Self {
        Compiler {
            look: FIRST_LOOK,
            left: 0,
            failed: HashSet::new(),
            nudged: 0,
        }
    }
}

impl Compiler {
    /// A new build was published: compiles the points already called at once (their
    /// counters survive the rebuild) and starts looking for the others from [`FIRST_LOOK`].
    pub(crate) fn rebuilt(&mut self) {
        self.look = FIRST_LOOK;
        self.pass();
    }

    /// How long the watcher may sleep before the next [`Compiler::pass`] when it polls:
    /// `None` when no chain waits for native code.
    pub(crate) fn next_look(&self) -> Option<Duration> {
        (self.left > 0).then_some(self.look)
    }

    /// [`NUDGE`] when the last pass began: the watcher sleeps while it still holds that.
    pub(crate) fn nudged(&self) -> u32 {
        self.nudged
    }

    /// Replaces every published interpreted chain whose point has been called (every one
    /// when the process has no stats file) with its native twin, one point at a time. A
    /// chain that fails to compile stays interpreted (logged once, not tried again).
    pub(crate) fn pass(&mut self) {
        // Before the counters are read: a call counted after this read nudges again.
        self.nudged = NUDGE.load(Ordering::Acquire);
        let started = Instant::now();
        let helpers = standard_helpers();
        let stats = hot::current_stats();
        let (mut programs, mut left) = (0usize, 0usize);
        let published = hot::published();
        // Forget failures of chains that are no longer published (their addresses may be
        // reused by new ones).
        let live: HashSet<usize> = published.iter().map(|(_, c)| address(c)).collect();
        self.failed.retain(|a| live.contains(a));
        for (id, chain) in published {
            if !chain.interpreted() || self.failed.contains(&address(&chain)) {
                continue;
            }
            let called = match (stats, chain.stats_slot) {
                (Some(s), Some(slot)) => s.calls(slot) > 0,
                _ => true,
            };
            if !called {
                left += 1;
                continue;
            }
            match chain.to_native(&helpers) {
                Ok(native) => {
                    programs += native.entry.len() + native.exit.len();
                    hot::replace(id, &chain, native);
                }
                Err(e) => {
                    self.failed.insert(address(&chain));
                    let reason = error_chain(&e);
                    warn_once(
                        format!("native\0{id}\0{reason}"),
                        || tracing::warn!(api_id = id, error = %reason, "programs stay on the interpreter: JIT compilation failed"),
                    );
                }
            }
        }
        self.left = left;
        self.look = if programs > 0 {
            FIRST_LOOK
        } else {
            (self.look * 2).min(LAST_LOOK)
        };
        if programs > 0 {
            tracing::info!(
                programs,
                waiting = left,
                micros = started.elapsed().as_micros() as u64,
                "policies compiled to native code"
            );
        }
    }
}

fn address(chain: &Arc<Published>) -> usize {
    Arc::as_ptr(chain) as usize
}
