//! A small scoped worker pool for the per-key-group work of snapshots and restores: encoding
//! key groups at a checkpoint and decoding them at a restore are independent per key group, so
//! they run on up to [`max_workers`] threads (`std::thread::scope`, no pool kept between calls:
//! a checkpoint at most every few hundred ms pays a thread start of a few µs per worker).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

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

/// What [`for_each_in_order`] shares between its workers and the calling thread.
struct Window<T, R> {
    /// Items not taken yet, in order (taken from the front).
    items: std::collections::VecDeque<T>,
    /// Index of the next item to take.
    next: usize,
    /// Results handed to `emit` so far (so the next to hand over is this index).
    emitted: usize,
    /// Results done and not handed over yet, by item index (a panic of `f` as its payload).
    done: BTreeMap<usize, std::thread::Result<R>>,
    /// Set when `emit` failed: workers take no more items.
    stopped: bool,
    /// Most results alive at once (computing, done, or being handed over), for tests.
    peak_alive: usize,
}

/// `items.map(f)` on up to `workers` threads, each result handed to `emit` on the calling
/// thread in the order of `items`, as soon as it and every result before it are done; at most
/// `window` results are alive at once (being computed, waiting for an earlier one, or being
/// handed to `emit`): a worker starts item `i` only once `emit` has returned for item
/// `i - window`. So memory holds `window` results whatever the number of items (a disk
/// snapshot's blocks, one per key group: [`map_in_order`] would hold all of them). The
/// workers live for the whole call (one thread start per worker, not per item). Stops at the
/// first error of `emit` (workers finish the item they hold and take no other) and returns it;
/// a panic in `f` or in `emit` stops the workers the same way and propagates to the caller. Returns the most results that were alive at once
/// (at most `window`).
pub fn for_each_in_order<T: Send, R: Send, E>(
    items: Vec<T>,
    workers: usize,
    window: usize,
    f: impl Fn(T) -> R + Sync,
    emit: &mut dyn FnMut(R) -> Result<(), E>,
) -> Result<usize, E> {
    let n = items.len();
    let window = window.max(1);
    let workers = workers.clamp(1, n.max(1)).min(window);
    let shared = Mutex::new(Window {
        items: items.into(),
        next: 0,
        emitted: 0,
        done: BTreeMap::new(),
        stopped: false,
        peak_alive: 0,
    });
    // Workers wait on `room` (the window is full); the caller waits on `ready` (the next
    // result is not done).
    let (room, ready) = (Condvar::new(), Condvar::new());
    let lock = || shared.lock().expect("not poisoned");
    let work = || {
        loop {
            let (i, item) = {
                let mut w = lock();
                while !w.stopped && w.next < n && w.next >= w.emitted + window {
                    w = room.wait(w).expect("not poisoned");
                }
                if w.stopped || w.next >= n {
                    return;
                }
                let i = w.next;
                w.next += 1;
                w.peak_alive = w.peak_alive.max(w.next - w.emitted);
                (i, w.items.pop_front().expect("an item per index"))
            };
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item)));
            lock().done.insert(i, out);
            ready.notify_one();
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(work);
        }
        let stop = |w: &mut Window<T, R>| {
            w.stopped = true;
            room.notify_all();
        };
        for i in 0..n {
            let out = {
                let mut w = lock();
                loop {
                    if let Some(out) = w.done.remove(&i) {
                        break out;
                    }
                    w = ready.wait(w).expect("not poisoned");
                }
            };
            let result = match out {
                Ok(result) => result,
                Err(panic) => {
                    stop(&mut lock());
                    std::panic::resume_unwind(panic);
                }
            };
            // A panic in `emit` stops the workers too (else those waiting for room would
            // wait for ever and the scope would never end), then goes on to the caller.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| emit(result))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    stop(&mut lock());
                    return Err(e);
                }
                Err(panic) => {
                    stop(&mut lock());
                    std::panic::resume_unwind(panic);
                }
            }
            lock().emitted += 1;
            room.notify_all();
        }
        Ok(lock().peak_alive)
    })
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

    /// Results come in order for any worker count and window, and never more than `window`
    /// of them are alive at once, however many items there are.
    #[test]
    fn results_stream_in_order_with_at_most_a_window_alive() {
        let items: Vec<u64> = (0..500).collect();
        for (workers, window) in [(1, 1), (2, 1), (2, 4), (4, 8), (8, 3), (3, 1000)] {
            let alive = AtomicUsize::new(0);
            let peak = AtomicUsize::new(0);
            let mut got = Vec::new();
            let reported = for_each_in_order(
                items.clone(),
                workers,
                window,
                |i| {
                    let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    if i % 7 == 0 {
                        std::thread::yield_now();
                    }
                    i * 3
                },
                &mut |r| {
                    got.push(r);
                    alive.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
            assert_eq!(
                got,
                items.iter().map(|i| i * 3).collect::<Vec<_>>(),
                "{workers} workers"
            );
            let peak = peak.load(Ordering::SeqCst);
            assert!(peak <= window, "{peak} results alive with a window of {window}");
            assert!(reported <= window && reported >= peak.min(1), "reported {reported}");
        }
    }

    #[test]
    fn an_emit_error_stops_the_workers_and_is_returned() {
        let taken = AtomicUsize::new(0);
        let e = for_each_in_order(
            (0..1000).collect::<Vec<u32>>(),
            4,
            8,
            |i| {
                taken.fetch_add(1, Ordering::SeqCst);
                i
            },
            &mut |i| if i == 10 { Err(format!("stop at {i}")) } else { Ok(()) },
        )
        .unwrap_err();
        assert_eq!(e, "stop at 10");
        assert!(taken.load(Ordering::SeqCst) <= 10 + 1 + 8, "workers went on");
    }

    #[test]
    #[should_panic(expected = "item 5")]
    fn a_panic_in_a_worker_reaches_the_caller() {
        let _ = for_each_in_order(
            (0..100).collect::<Vec<u32>>(),
            2,
            4,
            |i| {
                assert_ne!(i, 5, "item 5");
                i
            },
            &mut |_| Ok::<(), ()>(()),
        );
    }

    /// Workers that filled the window wait for room; a panic in `emit` must stop them (it
    /// hung before: the scope waited for workers that waited for room).
    #[test]
    #[should_panic(expected = "emit failed at 3")]
    fn a_panic_in_emit_reaches_the_caller_and_stops_the_workers() {
        let _ = for_each_in_order((0..1_000).collect::<Vec<u32>>(), 2, 2, |i| i, &mut |i| {
            assert_ne!(i, 3, "emit failed at 3");
            Ok::<(), ()>(())
        });
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
