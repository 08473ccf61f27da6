//! Building a process's programs on several threads: re-verifying and JIT-compiling every
//! program is what a process pays at start-up (and after each change), and the programs are
//! independent of one another once their object is open (parsed, maps mapped).

use std::sync::{Condvar, Mutex, OnceLock};

/// Most threads one build uses (besides the caller's).
const MAX_THREADS: usize = 8;

/// Where a group stands in [`par_groups`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Unopened,
    Opening,
    /// Opened; whether it opened successfully.
    Open(bool),
}

/// What a thread of [`par_groups`] does next.
enum Job {
    Open(usize),
    Build(usize),
    Wait,
    Done,
}

struct Sched {
    groups: Vec<Group>,
    /// Groups by descending total cost of their items: the order they are opened in.
    open_order: Vec<usize>,
    /// Items not started yet, costliest first.
    pending: Vec<usize>,
}

impl Sched {
    /// The costliest pending item whose group is open; else a group to open; else wait
    /// (items remain, their groups are being opened); else done. Items of a group that
    /// failed to open are dropped.
    fn next<I>(&mut self, items: &[(usize, I)]) -> Job {
        let groups = &self.groups;
        self.pending.retain(|&i| {
            items
                .get(i)
                .is_some_and(|(g, _)| groups.get(*g) != Some(&Group::Open(false)))
        });
        let ready = self.pending.iter().position(|&i| {
            items
                .get(i)
                .is_some_and(|(g, _)| groups.get(*g) == Some(&Group::Open(true)))
        });
        if let Some(p) = ready {
            return Job::Build(self.pending.remove(p));
        }
        let groups = &self.groups;
        let unopened = self
            .open_order
            .iter()
            .copied()
            .find(|&g| groups.get(g) == Some(&Group::Unopened));
        if let Some(g) = unopened {
            if let Some(s) = self.groups.get_mut(g) {
                *s = Group::Opening;
            }
            return Job::Open(g);
        }
        if self.pending.is_empty() {
            Job::Done
        } else {
            Job::Wait
        }
    }
}

/// Publishes the end of opening a group (on drop, panics included) and wakes the waiters.
struct Opening<'a> {
    sched: &'a Mutex<Sched>,
    changed: &'a Condvar,
    group: usize,
    ok: bool,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut s = self.sched.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state) = s.groups.get_mut(self.group) {
            *state = Group::Open(self.ok);
        }
        drop(s);
        self.changed.notify_all();
    }
}

/// Opens every group of `groups` (`open(&group)`) and builds every item `(g, item)` of
/// `items` with its opened group, `groups[g]` (`build(&opened, &item)`), on up to [`MAX_THREADS`] scoped threads (as many as
/// the machine has cores and there is work). A thread takes the costliest item whose group
/// is open, else opens a group nobody has opened yet (the costliest first), else waits for
/// one being opened — so building one group's items overlaps opening the others.
/// Returns every group's `open` result and every item's build result, in item order (`None`
/// for the items of a group that failed to open). One core, or a thread that cannot be
/// started, means the caller's thread does the work.
pub fn par_groups<T: Sync, G: Send + Sync, E: Send + Sync, I: Sync, R: Send>(
    groups: &[T],
    items: &[(usize, I)],
    cost: impl Fn(&I) -> usize,
    open: impl Fn(&T) -> Result<G, E> + Sync,
    build: impl Fn(&G, &I) -> R + Sync,
) -> (Vec<Result<G, E>>, Vec<Option<R>>) {
    let n_groups = groups.len();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (n_groups + items.len()).min(cores).min(MAX_THREADS);
    let opened: Vec<OnceLock<Result<G, E>>> = groups.iter().map(|_| OnceLock::new()).collect();
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let mut group_cost = vec![0usize; n_groups];
    for (g, item) in items {
        if let Some(c) = group_cost.get_mut(*g) {
            *c = c.saturating_add(cost(item));
        }
    }
    let sched = Mutex::new(Sched {
        groups: vec![Group::Unopened; n_groups],
        open_order: cost_order(&group_cost, |c| *c),
        pending: cost_order(items, |(_, i)| cost(i)),
    });
    let changed = Condvar::new();
    let work = || loop {
        let job = {
            let mut s = sched.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match s.next(items) {
                    Job::Wait => s = changed.wait(s).unwrap_or_else(|e| e.into_inner()),
                    job => break job,
                }
            }
        };
        match job {
            Job::Open(g) => {
                // Marks the group failed if `open` panics, so that no thread waits for it
                // forever (the panic then leaves `scope`).
                let mut opening = Opening {
                    sched: &sched,
                    changed: &changed,
                    group: g,
                    ok: false,
                };
                opening.ok = match (opened.get(g), groups.get(g)) {
                    (Some(cell), Some(group)) => cell.get_or_init(|| open(group)).is_ok(),
                    _ => false,
                };
            }
            Job::Build(i) => {
                let Some((g, item)) = items.get(i) else {
                    continue;
                };
                // Handed out only once the group opened successfully.
                let Some(Ok(group)) = opened.get(*g).and_then(OnceLock::get) else {
                    continue;
                };
                let r = build(group, item);
                if let Ok(mut res) = results.lock() {
                    if let Some(slot) = res.get_mut(i) {
                        *slot = Some(r);
                    }
                }
            }
            Job::Wait | Job::Done => return,
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 1..threads {
                // A thread that cannot be started leaves its share to the others.
                let _ = std::thread::Builder::new()
                    .name("gpubpf-build".into())
                    .spawn_scoped(s, work);
            }
            work();
        });
    }
    // Every group was opened by exactly one worker (a worker that panicked propagates the
    // panic out of `scope` above, or out of `work` on one thread).
    let opened = opened
        .into_iter()
        .filter_map(OnceLock::into_inner)
        .collect();
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    (opened, results)
}

/// Indices of `items` by descending `cost`; items of equal cost keep their order.
fn cost_order<T>(items: &[T], cost: impl Fn(&T) -> usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(items.get(i).map_or(0, &cost)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn costly_items_are_handed_out_first() {
        let costs = [3usize, 9, 1, 9, 0, 4];
        assert_eq!(cost_order(&costs, |c| *c), [1, 3, 5, 0, 2, 4]);
    }

    #[test]
    fn every_group_opens_once_and_every_item_builds_with_its_group_in_item_order() {
        let opens = AtomicUsize::new(0);
        // Group 3 fails to open: its items are not built.
        let items: Vec<(usize, u64)> = (0..300).map(|i| (i % 5, i as u64)).collect();
        let names: Vec<usize> = (0..5).collect();
        let (groups, built) = par_groups(
            &names,
            &items,
            |x| (*x % 11) as usize,
            |&g| {
                opens.fetch_add(1, Ordering::Relaxed);
                if g % 2 == 0 {
                    std::thread::yield_now();
                }
                if g == 3 {
                    Err(format!("group {g} is broken"))
                } else {
                    Ok(g as u64 * 1000)
                }
            },
            |g, x| g + x,
        );
        assert_eq!(opens.load(Ordering::Relaxed), 5);
        assert_eq!(groups.len(), 5);
        assert_eq!(groups[3].as_ref().unwrap_err(), "group 3 is broken");
        for (i, (g, x)) in items.iter().enumerate() {
            let want = (*g != 3).then(|| *g as u64 * 1000 + x);
            assert_eq!(built[i], want, "item {i}");
        }
    }

    #[test]
    fn a_group_whose_opening_panics_leaves_no_thread_waiting() {
        let items: Vec<(usize, u8)> = (0..50).map(|i| (i % 2, i as u8)).collect();
        let r = std::panic::catch_unwind(|| {
            par_groups(
                &[0usize, 1],
                &items,
                |_| 0,
                |&g| {
                    if g == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        panic!("open failed");
                    }
                    Ok::<_, ()>(g)
                },
                |g, x| *g + usize::from(*x),
            )
        });
        assert!(
            r.is_err(),
            "the panic reaches the caller (and nothing hangs)"
        );
    }

    #[test]
    fn groups_without_items_are_opened_and_no_work_finishes_at_once() {
        let no_items: &[(usize, u8)] = &[];
        let (groups, built) =
            par_groups(&[0, 1, 2], no_items, |_| 0, |&g| Ok::<_, ()>(g), |_, _| 0);
        assert_eq!(groups, [Ok(0), Ok(1), Ok(2)]);
        assert!(built.is_empty());
        let (groups, built) =
            par_groups(&[] as &[u8], no_items, |_| 0, |&g| Ok::<_, ()>(g), |_, _| 0);
        assert!(groups.is_empty() && built.is_empty());
    }
}
