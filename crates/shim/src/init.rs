//! Lazy initialisation (on the first driver call, never in an ELF constructor) and the
//! watcher thread that keeps the published chains in step with the registry.
//!
//! 1. Logging: a `tracing` subscriber on stderr when `GPUBPF_LOG` is set (an env-filter
//!    directive such as `info` or `gpubpf=debug`); nothing otherwise.
//! 2. The registry at `GPUBPF_HOME` (default: `registry::default_home()`: the node's system
//!    registry `/run/gpubpf` when there is one, else the user's own). A registry that
//!    cannot be opened leaves the process unpoliced (logged once); the shim never creates
//!    one in an application's name. One that does not exist yet leaves the process
//!    unpoliced until it does: a thread (`gpubpf-wait`) looks for it every
//!    [`REGISTRY_POLL`] and then starts the process as below, so that the first
//!    `gpubpf load` also reaches processes started before it (it cannot `--wait` for
//!    them: they are not in its process table yet).
//! 3. The process registers in the registry's process table, builds a `PolicySet` with
//!    every object re-verified (an object that fails is left out on its own, logged; in a
//!    user registry, an input this verifier accepted before in a process of the user is
//!    taken from the registry's verification cache unless `GPUBPF_VERIFY_CACHE=off`),
//!    publishes the chains and acknowledges the generation. This first build leaves the
//!    programs to the interpreter: the first driver call waits for verification only.
//! 4. A watcher thread sleeps on the generation word (`Control::wait_change`); on a change
//!    it rebuilds and republishes off the hot path (on the interpreter too), then
//!    acknowledges. It swaps the chain of each point the process has called for its native
//!    twin (same programs, same decisions, faster; `native::Compiler`) once a call of an
//!    interpreted chain nudges it (where the kernel has `futex_waitv`; it polls every few
//!    milliseconds, up to 250, otherwise).
//! 5. `GPUBPF_FAIL` (read once): `open` (default) — an object that cannot be built is
//!    skipped, a registry that cannot be read leaves the process unpoliced, a program that
//!    faults counts as verdict 0; `closed` — the attach points a failed object names refuse
//!    every call with `CUDA_ERROR_NOT_PERMITTED` (800), an entry program that faults refuses
//!    its call, and a registry that exists but cannot be read refuses every call (a missing
//!    registry still means nothing to enforce). Any other value is treated as `closed`.
//! 6. The process's stats file (`procs/SLOT`, `registry::procstats`) records its attach
//!    points, programs and failed objects at every (re)load, and the wrappers count calls,
//!    denials and (while `gpubpf ps --stats` asks) program runs and run time into it.
//! 7. After `fork` the child (whose only thread is the one that forked) refreshes the cached
//!    pid in the `pthread_atfork` handler and sends every wrapper to the slow path; its
//!    first driver call then registers the child in the process table, rebuilds the chains
//!    and starts the child's own watcher. (A `fork` while another thread is in the middle
//!    of the shim's first initialisation leaves the child unable to initialise: its copy of
//!    the initialisation lock stays taken.)
//! 8. A process in secure-execution mode (`getauxval(AT_SECURE) != 0`: setuid, setgid or
//!    file capabilities) is left untouched: the shim publishes nothing and never opens the
//!    registry, whatever its environment says (it was set by a less privileged user).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use gpubpf_runtime::dispatch::{PolicySet, Tier};
use gpubpf_runtime::helpers::standard_helpers;
use gpubpf_runtime::program::verify_cache::{self, VerifyCache};
use gpubpf_runtime::registry::procstats::{self, ProcStats};
use gpubpf_runtime::registry::{self, Registry};

use crate::hot;
use crate::native::Compiler;

/// Environment variable holding the shim's log filter.
pub const LOG_ENV: &str = "GPUBPF_LOG";
/// Environment variable choosing what happens when a policy cannot be enforced.
pub const FAIL_ENV: &str = "GPUBPF_FAIL";

/// How often a process started before its registry existed looks for it.
pub const REGISTRY_POLL: Duration = Duration::from_millis(500);

/// `GPUBPF_FAIL=closed` (or any value but `open`): read once at initialisation.
static FAIL_CLOSED: AtomicBool = AtomicBool::new(false);
/// Failures already logged (object and reason), so that each is logged once per process
/// however often the watcher rebuilds.
static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn read_fail_mode() {
    let closed = match std::env::var(FAIL_ENV) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v.eq_ignore_ascii_case("open") || v.is_empty() => false,
        Ok(v) if v.eq_ignore_ascii_case("closed") => true,
        Ok(v) => {
            tracing::warn!(value = %v, "{FAIL_ENV} is neither `open` nor `closed`; failing closed");
            true
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            tracing::warn!("{FAIL_ENV} is not valid UTF-8; failing closed");
            true
        }
    };
    FAIL_CLOSED.store(closed, Ordering::Relaxed);
}

/// `GPUBPF_VERIFY_CACHE` (read once at initialisation): whether builds use the user
/// registry's verification cache (`program::verify_cache`).
static VERIFY_CACHE: AtomicBool = AtomicBool::new(true);

fn fail_closed() -> bool {
    FAIL_CLOSED.load(Ordering::Relaxed)
}

/// Logs `message` once per process.
pub(crate) fn warn_once(key: String, f: impl FnOnce()) {
    let fresh = LOGGED.lock().map(|mut l| l.insert(key)).unwrap_or(true);
    if fresh {
        f();
    }
}

/// Publishes nothing, or (failing closed) refuses every call.
fn publish_unreadable() {
    if fail_closed() {
        hot::publish_all_broken();
    } else {
        hot::publish_nothing();
    }
}

static INIT: Once = Once::new();
static REGISTRY: OnceLock<Registry> = OnceLock::new();
/// Where the registry is looked for (set by the first initialisation).
static HOME: OnceLock<std::path::PathBuf> = OnceLock::new();
/// Set while the process waits for its registry to appear ([`wait_for_registry`]).
static WAITING: AtomicBool = AtomicBool::new(false);
static ATFORK: AtomicBool = AtomicBool::new(false);
/// Set in a forked child until its first driver call has re-initialised it.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Initialises the shim once per process (and once more in a forked child); later calls
/// return at once. Out of line and cold: the hot path calls it only until the process is
/// ready, and inlined its fork and `Once` checks took code lines between the hot path's
/// own.
#[cold]
#[inline(never)]
pub fn ensure() {
    if FORKED.load(Ordering::Relaxed)
        && FORKED.swap(false, Ordering::AcqRel)
        && hot::as_busy(reinit_after_fork).is_none()
    {
        hot::publish_nothing();
    }
    INIT.call_once(|| {
        if hot::as_busy(init).is_none() {
            // A panic during initialisation: run unpoliced rather than break the process.
            hot::publish_nothing();
        }
    });
    // Later calls skip this function (`hot::set_ready(false)` in a forked child brings
    // them back here).
    hot::set_ready(true);
}

fn install_logging() {
    let Some(filter) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::new(filter.to_string_lossy());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// `pthread_atfork` child handler: only async-signal-safe work (atomic stores, `getpid`).
extern "C" fn after_fork_in_child() {
    hot::set_pid(std::process::id());
    crate::record::forget_after_fork();
    if INIT.is_completed() {
        FORKED.store(true, Ordering::Release);
        hot::set_ready(false);
        hot::force_slow_path();
    }
}

/// The forked child's first driver call: its own process-table slot, chains and watcher.
fn reinit_after_fork() {
    crate::record::start(true);
    let Some(reg) = REGISTRY.get() else {
        // The parent ran unpoliced: so does the child. A parent waiting for its registry
        // to appear gives the child a waiter of its own (the parent's did not survive the
        // fork); one that could not open its registry gave up, and so does the child.
        hot::publish_nothing();
        if let Some(home) = HOME.get().filter(|_| WAITING.load(Ordering::Acquire)) {
            wait_for_registry(home.clone());
        }
        return;
    };
    start(reg);
}

/// No registry at `home` yet: looks for it every [`REGISTRY_POLL`] on a thread of its own
/// and starts the process (registration, chains, watcher) once it can be opened.
fn wait_for_registry(home: std::path::PathBuf) {
    WAITING.store(true, Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("gpubpf-wait".into())
        .spawn(move || loop {
            std::thread::sleep(REGISTRY_POLL);
            if !home.join("control").is_file() {
                continue;
            }
            match Registry::open(&home) {
                Ok(r) => {
                    tracing::info!(home = %home.display(), "the gpubpf registry appeared; policing the process");
                    let reg = REGISTRY.get_or_init(|| r);
                    WAITING.store(false, Ordering::Release);
                    if hot::as_busy(|| start(reg)).is_none() {
                        hot::publish_nothing();
                    }
                    return;
                }
                // Being created, or broken: looked at again, said once.
                Err(e) => warn_once(format!("wait\0{}", home.display()), || {
                    tracing::warn!(home = %home.display(), error = %error_chain(&e), "cannot open the gpubpf registry yet; still unpoliced, looking again");
                }),
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a thread to wait for the registry; the process stays unpoliced");
    }
}

/// Registers the process, publishes the chains and starts the watcher.
fn start(reg: &'static Registry) {
    let slot = match reg.control().register(std::process::id()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "not registered in the process table");
            None
        }
    };
    let mut stale = None;
    let stats = slot.and_then(|i| {
        let pid = std::process::id();
        let start = registry::process_start_time(pid).unwrap_or(0);
        // SAFETY: geteuid cannot fail.
        let path = reg.stats_path_of(i, unsafe { libc::geteuid() });
        ProcStats::create_at(&path, i, pid, start, fail_closed())
            .map(|(s, old)| {
                // The slot's previous file: freed by the watcher, off this call's path.
                stale = old;
                s
            })
            .map_err(|e| {
                tracing::warn!(error = %error_chain(&e), "no stats file; `gpubpf ps` will show no counts for this process")
            })
            .ok()
    });
    hot::set_stats(stats, reg.control().stats_until());
    // bpf_printk lines go to the registry's trace ring (`gpubpf trace`), and to stderr too
    // with GPUBPF_TRACE_STDERR=1.
    if let Err(e) = gpubpf_runtime::helpers::trace::send_to_registry(reg) {
        tracing::warn!(error = %error_chain(&e), "no trace ring; bpf_printk lines go to stderr");
    }
    // Enforced and shadowed decisions go to the registry's audit ring (`gpubpf audit`).
    match reg.audit_ring() {
        Ok(ring) => hot::set_audit(ring),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "no audit ring; decisions are not audited")
        }
    }
    // gpubpf_get_kernel_name asks the real driver's cuFuncGetName, and cuKernelGetName for
    // the library kernels cudart launches (not wrappers: the calls are not policed).
    {
        use gpubpf_runtime::helpers::kernel;
        let at = |name: &std::ffi::CStr| {
            // SAFETY: the driver's exports `cuFuncGetName` and `cuKernelGetName` are
            // `CUresult (const char **, CUfunction or CUkernel)`, loaded for good.
            crate::driver::lookup(name).and_then(|p| unsafe { kernel::resolver_at(p) })
        };
        kernel::set_kernel_name_resolver(at(c"cuFuncGetName"));
        kernel::set_library_kernel_name_resolver(at(c"cuKernelGetName"));
    }
    let seen = reg.generation();
    reload(reg, slot, true);
    let spawned = std::thread::Builder::new()
        .name("gpubpf-watch".into())
        .spawn(move || {
            let mut native = Compiler::default();
            let _ = hot::as_busy(|| native.pass());
            procstats::remove_stale(stale);
            // And those of processes that exited before their watcher could.
            procstats::remove_dead_stale(&reg.home().join("procs"));
            watch(reg, slot, seen, native)
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the watcher thread; policies stay as loaded");
    }
}

/// Whether the kernel started this process in secure-execution mode (setuid, setgid,
/// file capabilities): its environment comes from a less privileged user.
fn secure_execution() -> bool {
    // SAFETY: `getauxval` reads the auxiliary vector; it has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

fn init() {
    if secure_execution() {
        // No logging either: GPUBPF_LOG is as untrusted as GPUBPF_HOME here.
        hot::publish_nothing();
        return;
    }
    install_logging();
    read_fail_mode();
    VERIFY_CACHE.store(verify_cache::enabled_by_env(), Ordering::Relaxed);
    hot::set_pid(std::process::id());
    crate::record::start(false);
    if !ATFORK.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a plain function without captured state as the child handler.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    }
    // The CLI's choice, also for an empty GPUBPF_HOME (the default registry, not "").
    let home = registry::default_home();
    let _ = HOME.set(home.clone());
    if !home.join("control").is_file() {
        tracing::info!(home = %home.display(), "no gpubpf registry yet; the process runs unpoliced until one appears");
        hot::publish_nothing();
        wait_for_registry(home);
        return;
    }
    let reg = match Registry::open(&home) {
        Ok(r) => REGISTRY.get_or_init(|| r),
        Err(e) => {
            if fail_closed() {
                tracing::warn!(home = %home.display(), error = %error_chain(&e), "cannot open the gpubpf registry; {FAIL_ENV}=closed: every CUDA call is refused");
            } else {
                tracing::warn!(home = %home.display(), error = %error_chain(&e), "cannot open the gpubpf registry; the process runs unpoliced");
            }
            publish_unreadable();
            return;
        }
    };
    start(reg);
}

/// The watcher: sleeps on the registry's generation word and rebuilds on a change; while
/// some published chain is still interpreted it also wakes when a call nudges it (or, on a
/// kernel without `futex_waitv`, every few milliseconds) to compile the chains whose points
/// have been called since ([`native::Compiler`]).
fn watch(reg: &'static Registry, slot: Option<usize>, mut seen: u64, mut native: Compiler) {
    // The kernel has `futex_waitv`: the watcher sleeps until a call nudges it (or the
    // registry changes) instead of polling (`native`'s notes).
    let mut waitv = true;
    loop {
        let look = native.next_look();
        let sleep = look.unwrap_or(Duration::from_secs(3600));
        let nudged = (waitv && look.is_some()).then(|| {
            let (nudge, idle) = (&crate::native::NUDGE, crate::native::IDLE_LOOK);
            reg.control()
                .wait_change_or_nudge(seen, nudge, native.nudged(), idle)
        });
        let g = match nudged {
            Some(Some(g)) => g,
            Some(None) => {
                waitv = false;
                tracing::debug!("no futex_waitv: the watcher polls for called points");
                reg.control().wait_change(seen, sleep)
            }
            None => reg.control().wait_change(seen, sleep),
        };
        if g != seen {
            let _ = hot::as_busy(|| reload(reg, slot, false));
            let _ = hot::as_busy(|| native.rebuilt());
            seen = g;
        } else if native.next_look().is_some() {
            let _ = hot::as_busy(|| native.pass());
        }
    }
}

/// Rebuilds every chain from the registry and publishes them (when the registry cannot be
/// read, the chains already published stay; at `first` nothing is published then).
fn reload(reg: &Registry, slot: Option<usize>, first: bool) {
    let started = std::time::Instant::now();
    // Every build waits only for re-verification: its programs start on the interpreter,
    // and the watcher compiles a point's chain once the point is called
    // (`native::Compiler`), so that a change takes effect without waiting for Cranelift and
    // no process compiles what it never calls.
    let tier = Tier::Interpreted;
    let cache = VerifyCache::of(reg, VERIFY_CACHE.load(Ordering::Relaxed));
    match PolicySet::load_each_in(reg, &standard_helpers(), tier, cache.as_ref()) {
        Ok((set, failed)) => {
            let closed = fail_closed();
            for f in &failed {
                let reason = error_chain(&f.error);
                warn_once(format!("{}\0{reason}", f.name), || {
                    if closed {
                        tracing::warn!(object = %f.name, error = %reason, "policy object cannot run; {FAIL_ENV}=closed: its attach points refuse every call");
                    } else {
                        tracing::warn!(object = %f.name, error = %reason, "policy object skipped");
                    }
                });
            }
            let generation = set.generation;
            let programs = set.programs().count();
            let mut chains = set.into_chains();
            for (id, chain) in chains.iter_mut() {
                if let Some(point) = gpubpf_runtime::attach::by_id(*id) {
                    chain.compute_reads(point);
                }
            }
            if closed {
                for id in failed.iter().flat_map(|f| &f.points) {
                    chains.entry(*id).or_default().broken = true;
                }
                for chain in chains.values_mut() {
                    chain.fail_closed = true;
                }
            }
            if let Some(stats) = hot::current_stats() {
                stats.update(|t| {
                    t.clear();
                    for (id, chain) in chains.iter_mut() {
                        chain.stats_slot = t.point(*id, chain.broken);
                        for p in chain.entry.iter_mut() {
                            p.stats_slot = t.program(&p.object, &p.name, *id, false, p.shadow);
                        }
                        for p in chain.exit.iter_mut() {
                            p.stats_slot = t.program(&p.object, &p.name, *id, true, p.shadow);
                        }
                    }
                    for f in &failed {
                        t.failure(&f.name, &error_chain(&f.error));
                    }
                });
            }
            hot::publish(chains);
            if let Some(s) = slot {
                reg.control().ack(s, generation);
            }
            tracing::info!(
                generation,
                programs,
                skipped = failed.len(),
                verified = cache.as_ref().map(VerifyCache::misses),
                cached = cache.as_ref().map(VerifyCache::hits),
                micros = started.elapsed().as_micros() as u64,
                "policies published"
            );
        }
        Err(e) => {
            let reason = error_chain(&e);
            warn_once(
                reason.clone(),
                || tracing::warn!(error = %reason, "cannot read the registry; policies unchanged"),
            );
            if first {
                publish_unreadable();
            }
        }
    }
}

/// `error: cause: cause…`, for one-line logs.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
