//! A trial's decisions, drawn up front from its seed so that `--seed S --trials 1 --mode M`
//! replays them exactly: the input slice, the job's shape, the failure steps and their
//! timings, and the S3 faults.

use crate::proxy::{FaultKind, FaultPlan};
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// What a soak trial exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Mode {
    /// `weir run` with local checkpoints and sink: kill -9, restore latest, savepoints.
    Local,
    /// `weir run` with checkpoints, savepoints and sink on S3 (moto), no faults.
    S3,
    /// Coordinator and workers: kill -9 of a worker or of the coordinator.
    Cluster,
    /// `weir run`: stop-with-savepoint and restore at another parallelism, with kills between.
    Rescale,
    /// `weir run` on S3 behind a proxy that injects 5xx, SlowDown, lost responses, slow
    /// deletes and truncated reads, with kills.
    StorageFaults,
    /// `weir run` of a union word count (two file sources) with unaligned checkpoints (or an
    /// `alignedCheckpointTimeout`) and a throttled sink, so barriers overtake queued records:
    /// kill -9, savepoint-then-kill and stop-with-savepoint with restore at another parallelism.
    Unaligned,
    /// The `unaligned` mode's job with a checkpoint `timeout` of 150-1000 ms, so many
    /// checkpoints time out and are declined (`tolerableFailedCheckpoints: 1000`), aligned or
    /// unaligned, with the same steps.
    Timeouts,
    /// The `unaligned` mode's job on S3 behind the fault proxy (faults as `storage-faults`),
    /// half the trials with `tolerableFailedCheckpoints: 1000` so failed checkpoints are skipped
    /// instead of failing the job.
    UnalignedFaults,
    /// `weir run` of the word count with `mode: at-least-once`: kills, savepoint-then-kill,
    /// rescale; passes when nothing is lost (duplicates and over-counts are counted, allowed).
    AtLeastOnce,
    /// `weir run` of the word count with `mode: at-most-once`: kills, savepoint-then-kill,
    /// rescale; passes when nothing is written twice (losses are counted, allowed).
    AtMostOnce,
    /// `weir run` of an event-time window job (tumbling, sliding or session counts per
    /// repository over GitHub events): kill -9, savepoint-then-kill, rescale through a savepoint.
    Windows,
    /// The `cluster` mode's processes and steps with the `unaligned` mode's job (union of two
    /// file sources, unaligned checkpoints, throttled sink): barriers overtake records queued
    /// across the network, and channel state is replayed after worker and coordinator kills.
    ClusterUnaligned,
    /// The `cluster` mode's processes and steps with the word count in `mode: at-most-once`;
    /// passes when nothing is written twice (losses are counted, allowed).
    ClusterAtMostOnce,
}

impl Mode {
    /// Every mode, in the order `--mode all` runs them.
    pub const ALL: [Mode; 13] = [
        Mode::Local,
        Mode::S3,
        Mode::Cluster,
        Mode::Rescale,
        Mode::StorageFaults,
        Mode::Unaligned,
        Mode::Windows,
        Mode::Timeouts,
        Mode::UnalignedFaults,
        Mode::AtLeastOnce,
        Mode::AtMostOnce,
        Mode::ClusterUnaligned,
        Mode::ClusterAtMostOnce,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::S3 => "s3",
            Mode::Cluster => "cluster",
            Mode::Rescale => "rescale",
            Mode::StorageFaults => "storage-faults",
            Mode::Unaligned => "unaligned",
            Mode::Windows => "windows",
            Mode::Timeouts => "timeouts",
            Mode::UnalignedFaults => "unaligned-faults",
            Mode::AtLeastOnce => "at-least-once",
            Mode::AtMostOnce => "at-most-once",
            Mode::ClusterUnaligned => "cluster-unaligned",
            Mode::ClusterAtMostOnce => "cluster-at-most-once",
        }
    }

    /// Whether the trial runs a coordinator and workers (the cluster steps) instead of `weir run`.
    pub fn is_cluster(self) -> bool {
        matches!(self, Mode::Cluster | Mode::ClusterUnaligned | Mode::ClusterAtMostOnce)
    }

    /// Whether the trial passes with records lost as long as none is written twice.
    pub fn is_at_most_once(self) -> bool {
        matches!(self, Mode::AtMostOnce | Mode::ClusterAtMostOnce)
    }

    /// Whether the mode draws the restore-path steps (kill then rescale, kill at start, kill
    /// during a stop) besides kills, savepoints and rescale by savepoint.
    pub fn has_restore_steps(self) -> bool {
        matches!(
            self,
            Mode::Unaligned
                | Mode::Windows
                | Mode::Timeouts
                | Mode::UnalignedFaults
                | Mode::AtLeastOnce
                | Mode::AtMostOnce
        )
    }

    /// Whether the trial's storage is S3 (through the proxy).
    pub fn uses_s3(self) -> bool {
        matches!(self, Mode::S3 | Mode::StorageFaults | Mode::UnalignedFaults)
    }
}

/// One failure step. Times are milliseconds after the process (or the job) reported RUNNING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// kill -9 the `weir run` process; the next start restores `latest`.
    Kill { after_ms: u64 },
    /// A savepoint that does not stop the job, then kill -9 `kill_ms` after it returned.
    SavepointThenKill { after_ms: u64, kill_ms: u64 },
    /// kill -9 the `weir run` process; the next start restores `latest` (a checkpoint, unaligned
    /// in the `unaligned` mode, so its channel state is redistributed) at `parallelism`.
    KillThenRescale { after_ms: u64, parallelism: u32 },
    /// kill -9 the `weir run` process `after_ms` after it was started, without waiting for
    /// RUNNING: during its restore; the next start restores `latest` again.
    KillAtStart { after_ms: u64 },
    /// Stop-with-savepoint, and kill -9 `kill_ms` after it was triggered (while the final
    /// savepoint may still be in progress); the next start restores `latest`.
    KillDuringStop { after_ms: u64, kill_ms: u64 },
    /// Stop-with-savepoint; the next start restores it at `parallelism`.
    StopAndRescale { after_ms: u64, parallelism: u32 },
    /// kill -9 a worker (index modulo the live workers) and start a replacement.
    KillWorker { after_ms: u64, worker: usize },
    /// kill -9 the coordinator and restart it with the same arguments and run id.
    KillCoordinator { after_ms: u64 },
    /// A non-stopping savepoint on the cluster, then kill -9 a worker.
    SavepointThenKillWorker { after_ms: u64, kill_ms: u64, worker: usize },
}

/// The event-time window of the `windows` mode (sizes in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Tumbling windows of `size`.
    Tumbling { size: i64 },
    /// Sliding windows of `size`, one starting every `slide`.
    Sliding { size: i64, slide: i64 },
    /// Session windows closed by `gap` without events.
    Session { gap: i64 },
}

/// The job a trial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The word count of `examples/wordcount.yaml` (one file source over every input file).
    WordCount,
    /// The word count over a union of two file sources with unaligned checkpoints; with
    /// `timeout_ms` they start aligned and switch after `alignedCheckpointTimeout`; the sink
    /// takes at most `sink_rate` records per second per subtask (backpressure).
    /// `unaligned: false` (the `timeouts` mode) keeps checkpoints aligned; with
    /// `checkpoint_timeout_ms` checkpoints time out after that long (declined, tolerated).
    UnionUnaligned {
        timeout_ms: Option<u64>,
        sink_rate: u64,
        unaligned: bool,
        checkpoint_timeout_ms: Option<u64>,
        tolerable_failed: u32,
        /// The count step's state TTL is 1 h (longer than any trial: nothing expires, but
        /// the state is written, restored and rescaled with write times).
        ttl: bool,
    },
    /// The word count of `examples/wordcount.yaml` with another `mode`.
    Guarantee { mode: &'static str },
    /// Event-time window counts per repository over GitHub events; with `union`, the two input
    /// files are two sources (each with its own watermarks) merged by a `union` step.
    Windowed { window: WindowKind, union: bool },
}

/// Everything a trial decides before it starts.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Lines taken from each source text.
    pub lines_per_file: usize,
    /// Source throttle per source subtask (lines per second).
    pub rate: u64,
    /// Checkpoint interval in milliseconds.
    pub interval_ms: u64,
    /// Parallelism of the first start.
    pub parallelism: u32,
    /// The failure steps, in order.
    pub steps: Vec<Step>,
    /// S3 faults during the steps (none after them: the final run is fault-free).
    pub faults: Option<FaultPlan>,
    /// Seed of the slice choice and of the proxy's per-request fault draws.
    pub sub_seed: u64,
    /// The job.
    pub shape: Shape,
}

/// The plan of trial `seed` in `mode`. Pure: the same (mode, seed) gives the same plan.
pub fn plan(mode: Mode, seed: u64) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed ^ (mode as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let lines_per_file = rng.random_range(2500..=5000);
    // Input lasts ~2–8 s per pass at this rate, so kills land mid-input.
    let rate = rng.random_range(600..=1200);
    let interval_ms = rng.random_range(150..=500);
    let parallelism = match mode {
        m if m.is_cluster() => rng.random_range(2..=4),
        _ => rng.random_range(1..=3),
    };
    let mut steps = vec![];
    let n = match mode {
        m if m == Mode::Rescale || m.has_restore_steps() => rng.random_range(2..=4),
        m if m.is_cluster() => rng.random_range(1..=3),
        Mode::StorageFaults => rng.random_range(1..=4),
        _ => rng.random_range(1..=4),
    };
    for _ in 0..n {
        let after_ms = rng.random_range(100..=2500);
        let roll = rng.random_range(0..100);
        let step = match mode {
            // Restores from a checkpoint at another parallelism, sometimes killed again within
            // 100 ms of RUNNING (while the channel state is replayed).
            m if m.has_restore_steps() && roll < 25 => Step::KillThenRescale {
                after_ms: if rng.random_bool(0.3) { 0 } else { after_ms },
                parallelism: rng.random_range(1..=4),
            },
            m if m.is_cluster() && roll < 40 => Step::KillWorker {
                after_ms,
                worker: rng.random_range(0..8),
            },
            m if m.is_cluster() && roll < 70 => Step::KillCoordinator { after_ms },
            m if m.is_cluster() => Step::SavepointThenKillWorker {
                after_ms,
                kill_ms: rng.random_range(0..=1500),
                worker: rng.random_range(0..8),
            },
            Mode::Rescale if roll < 55 => Step::StopAndRescale {
                after_ms,
                parallelism: rng.random_range(1..=4),
            },
            m if m.has_restore_steps() && roll < 32 => Step::KillAtStart {
                after_ms: rng.random_range(0..=600),
            },
            m if m.has_restore_steps() && roll < 40 => Step::KillDuringStop {
                after_ms,
                kill_ms: rng.random_range(0..=400),
            },
            m if m.has_restore_steps() && roll < 50 => Step::StopAndRescale {
                after_ms,
                parallelism: rng.random_range(1..=4),
            },
            _ if roll < 70 => Step::Kill { after_ms },
            _ => Step::SavepointThenKill {
                after_ms,
                kill_ms: rng.random_range(0..=1500),
            },
        };
        steps.push(step);
    }
    if mode == Mode::Rescale && !steps.iter().any(|s| matches!(s, Step::StopAndRescale { .. })) {
        steps[0] = Step::StopAndRescale {
            after_ms: rng.random_range(100..=2500),
            parallelism: rng.random_range(1..=4),
        };
    }
    let faults = matches!(mode, Mode::StorageFaults | Mode::UnalignedFaults).then(|| {
        let all = [
            FaultKind::InternalError,
            FaultKind::SlowDown,
            FaultKind::LostResponse,
            FaultKind::TruncatedRead,
            FaultKind::SlowDelete,
        ];
        let mut kinds: Vec<FaultKind> = all.into_iter().filter(|_| rng.random_bool(0.6)).collect();
        if kinds.is_empty() {
            kinds.push(all[rng.random_range(0..all.len())]);
        }
        FaultPlan {
            per_mille: rng.random_range(50..=150),
            kinds,
            slow_delete_ms: rng.random_range(500..=4000),
        }
    });
    // Drawn last, only in the modes that have it, so the other modes' plans stay as they were.
    let shape = match mode {
        Mode::Unaligned | Mode::ClusterUnaligned => Shape::UnionUnaligned {
            timeout_ms: rng.random_bool(0.4).then(|| rng.random_range(0..=300)),
            sink_rate: rng.random_range(1000..=3000),
            unaligned: true,
            checkpoint_timeout_ms: None,
            tolerable_failed: 0,
            ttl: rng.random_bool(0.5),
        },
        Mode::UnalignedFaults => Shape::UnionUnaligned {
            timeout_ms: rng.random_bool(0.3).then(|| rng.random_range(0..=300)),
            sink_rate: rng.random_range(1000..=3000),
            unaligned: true,
            checkpoint_timeout_ms: None,
            tolerable_failed: if rng.random_bool(0.5) { 1000 } else { 0 },
            ttl: rng.random_bool(0.5),
        },
        Mode::Timeouts => {
            let unaligned = rng.random_bool(0.5);
            Shape::UnionUnaligned {
                timeout_ms: (unaligned && rng.random_bool(0.5)).then(|| rng.random_range(0..=50)),
                sink_rate: rng.random_range(1000..=3000),
                unaligned,
                checkpoint_timeout_ms: Some(rng.random_range(60..=1000)),
                tolerable_failed: 1000,
                ttl: rng.random_bool(0.5),
            }
        }
        Mode::Windows => Shape::Windowed {
            window: match rng.random_range(0..3) {
                0 => WindowKind::Tumbling {
                    size: rng.random_range(1..=6) * 10_000,
                },
                1 => WindowKind::Sliding {
                    size: 60_000,
                    slide: [10_000, 20_000, 30_000][rng.random_range(0..3)],
                },
                _ => WindowKind::Session {
                    gap: rng.random_range(1..=6) * 5_000,
                },
            },
            union: rng.random_bool(0.5),
        },
        Mode::AtLeastOnce => Shape::Guarantee { mode: "at-least-once" },
        Mode::AtMostOnce | Mode::ClusterAtMostOnce => Shape::Guarantee { mode: "at-most-once" },
        _ => Shape::WordCount,
    };
    // The union jobs read 1,500-3,000 lines per file: with the sink at 1,000-3,000 records/s
    // per subtask (below the ~11,000-22,000 words/s the two sources produce) the channels stay
    // full and unaligned checkpoints hold channel state, and a trial still ends in about a
    // minute at parallelism 1.
    let lines_per_file = if matches!(shape, Shape::UnionUnaligned { .. }) {
        rng.random_range(1500..=3000)
    } else {
        lines_per_file
    };
    // The timeouts mode checkpoints more often (20-150 ms), so checkpoints overlap with
    // timed-out, declined and superseded ones.
    // Aligned ones keep the common 150-500 ms: aligned barriers under backpressure, aborted
    // every 60 ms, slow the job down so far that a loaded machine did not finish a trial
    // (seed 850018: 940 checkpoints timed out in the 240 s of the final run).
    let aligned = matches!(shape, Shape::UnionUnaligned { unaligned: false, .. });
    let interval_ms = if mode == Mode::Timeouts && !aligned {
        rng.random_range(20..=150)
    } else {
        interval_ms
    };
    Plan {
        shape,
        lines_per_file,
        rate,
        interval_ms,
        parallelism,
        steps,
        faults,
        sub_seed: rng.random(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_mode_and_seed_give_the_same_plan() {
        for mode in Mode::ALL {
            for seed in [0, 1, 42, u64::MAX] {
                assert_eq!(format!("{:?}", plan(mode, seed)), format!("{:?}", plan(mode, seed)));
            }
        }
        assert_ne!(
            format!("{:?}", plan(Mode::Local, 1)),
            format!("{:?}", plan(Mode::Local, 2))
        );
    }

    #[test]
    fn each_mode_draws_only_its_own_steps() {
        for seed in 0..300 {
            let local = plan(Mode::Local, seed);
            assert!(!local.steps.is_empty() && local.faults.is_none());
            assert!(
                local
                    .steps
                    .iter()
                    .all(|s| matches!(s, Step::Kill { .. } | Step::SavepointThenKill { .. }))
            );
            for mode in [Mode::Cluster, Mode::ClusterUnaligned, Mode::ClusterAtMostOnce] {
                let cluster = plan(mode, seed);
                assert!((2..=4).contains(&cluster.parallelism));
                assert!((1..=3).contains(&cluster.steps.len()) && cluster.faults.is_none());
                assert!(cluster.steps.iter().all(|s| matches!(
                    s,
                    Step::KillWorker { .. } | Step::KillCoordinator { .. } | Step::SavepointThenKillWorker { .. }
                )));
            }
            assert!(matches!(
                plan(Mode::ClusterUnaligned, seed).shape,
                Shape::UnionUnaligned { unaligned: true, .. }
            ));
            assert_eq!(
                plan(Mode::ClusterAtMostOnce, seed).shape,
                Shape::Guarantee { mode: "at-most-once" }
            );
            let rescale = plan(Mode::Rescale, seed);
            assert!(rescale.steps.iter().any(|s| matches!(s, Step::StopAndRescale { .. })));
            let faults = plan(Mode::StorageFaults, seed).faults.expect("faults");
            assert!(!faults.kinds.is_empty() && (50..=150).contains(&faults.per_mille));
            assert!(plan(Mode::S3, seed).faults.is_none());
            assert_eq!(local.shape, Shape::WordCount);
            let unaligned = plan(Mode::Unaligned, seed);
            assert!(matches!(unaligned.shape, Shape::UnionUnaligned { .. }));
            let windows = plan(Mode::Windows, seed);
            assert!(matches!(windows.shape, Shape::Windowed { .. }));
            for p in [unaligned, windows] {
                assert!(p.faults.is_none() && (2..=4).contains(&p.steps.len()));
                assert!(p.steps.iter().all(|s| matches!(
                    s,
                    Step::Kill { .. }
                        | Step::SavepointThenKill { .. }
                        | Step::StopAndRescale { .. }
                        | Step::KillThenRescale { .. }
                        | Step::KillDuringStop { .. }
                        | Step::KillAtStart { .. }
                )));
            }
        }
    }
}
