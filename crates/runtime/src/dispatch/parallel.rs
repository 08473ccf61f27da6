//! Building a process's programs on several threads: re-verifying and JIT-compiling every
//! program is what a process pays at start-up (and after each change), and the programs are
//! independent of one another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most threads one build uses (besides the caller's).
const MAX_THREADS: usize = 8;

/// `f` applied to every item, in order, on up to [`MAX_THREADS`] scoped threads (as many as
/// the machine has cores and there are items; one item, one core or a thread that cannot be
/// started means the caller's thread does the work).
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    par_map_by_cost(items, |_| 0, f)
}

/// [`par_map`] that starts the items of highest `cost` first (results still in item order):
/// with a handful of threads and items of very different sizes, taking the largest first
/// keeps one thread from finishing a long item alone at the end.
pub fn par_map_by_cost<T: Sync, R: Send>(
    items: &[T],
    cost: impl Fn(&T) -> usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = items.len().min(cores).min(MAX_THREADS);
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let order = cost_order(items, cost);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let work = || {
        while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            let Some(item) = items.get(i) else {
                break;
            };
            let r = f(item);
            if let Ok(mut res) = results.lock() {
                if let Some(slot) = res.get_mut(i) {
                    *slot = Some(r);
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            // A thread that cannot be started leaves its share to the others.
            let _ = std::thread::Builder::new()
                .name("gpubpf-build".into())
                .spawn_scoped(s, work);
        }
        work();
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    // Every index below `items.len()` was taken by exactly one worker, which stored its
    // result; a worker that panicked propagates the panic out of `scope` above.
    results.into_iter().flatten().collect()
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

    #[test]
    fn results_keep_the_order_of_the_items() {
        let items: Vec<u64> = (0..1000).collect();
        let out = par_map(&items, |x| {
            if x % 97 == 0 {
                std::thread::yield_now();
            }
            x * 3
        });
        assert_eq!(out, items.iter().map(|x| x * 3).collect::<Vec<_>>());
        assert!(par_map(&[] as &[u8], |x| *x).is_empty());
    }

    #[test]
    fn costly_items_are_handed_out_first_and_results_keep_the_item_order() {
        let costs = [3usize, 9, 1, 9, 0, 4];
        assert_eq!(cost_order(&costs, |c| *c), [1, 3, 5, 0, 2, 4]);
        let items: Vec<usize> = (0..200).collect();
        let out = par_map_by_cost(&items, |x| x % 7, |x| x * 2);
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
    }
}
