//! A small scoped worker pool for the per-key-group work of snapshots and restores: encoding
//! key groups at a checkpoint and decoding them at a restore are independent per key group, so
//! they run on up to [`max_workers`] threads (`std::thread::scope`, no pool kept between calls:
//! a checkpoint at most every few hundred ms pays a thread start of a few µs per worker).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Upper bound on the worker threads of one call: the machine's cores (`available_parallelism`),
/// at most 8 (a snapshot or restore should not take every core of a large node from the task
/// threads of other subtasks).
pub fn max_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8)
}

/// `items.map(f)` on up to `workers` threads, results in the order of `items`. Each item is
/// moved into `f` and dropped by it as soon as it is done (a heap snapshot's key-group tables
/// are released group by group). Work is handed out one item at a time, so a few large key
/// groups do not leave the other workers idle. With one worker (or one item) it runs on the
/// calling thread. A panic in `f` propagates to the caller, as on one thread.
pub fn map_in_order<T: Send, R: Send>(items: Vec<T>, workers: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let workers = workers.clamp(1, items.len().max(1));
    if workers == 1 {
        return items.into_iter().map(f).collect();
    }
    let n = items.len();
    let inputs: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let outputs: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let item = inputs[i].lock().expect("not poisoned").take().expect("each item once");
                    let out = f(item);
                    *outputs[i].lock().expect("not poisoned") = Some(out);
                }
            });
        }
    });
    outputs
        .into_iter()
        .map(|o| o.into_inner().expect("not poisoned").expect("every item mapped"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_items_whatever_the_worker_count() {
        let items: Vec<u64> = (0..1000).collect();
        let want: Vec<u64> = items.iter().map(|i| i * i).collect();
        for workers in [0, 1, 2, 3, 8, 2000] {
            assert_eq!(
                map_in_order(items.clone(), workers, |i| i * i),
                want,
                "{workers} workers"
            );
        }
        assert!(map_in_order(Vec::<u64>::new(), 4, |i| i).is_empty());
    }

    #[test]
    fn work_runs_on_several_threads() {
        let threads = map_in_order((0..64).collect::<Vec<u32>>(), 4, |_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            std::thread::current().id()
        });
        let mut distinct = threads.clone();
        distinct.sort_by_key(|t| format!("{t:?}"));
        distinct.dedup();
        assert!(distinct.len() > 1, "one thread did all the work");
    }
}
