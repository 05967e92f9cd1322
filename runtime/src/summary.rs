//! The run summary: what a run did (records per task, checkpoints, elapsed time, where its
//! committed output is). `weir run` and `weir coordinator` log it as one event when the run
//! ends ([`log_run_summary`], [`summary_message`]); `GET /v1/job` reports the same numbers
//! while it runs ([`crate::control::api::JobStatus::summary`]).

use crate::control::api::{CommittedOutput, RunSummary, TaskTotals};
use crate::exec::JobHandle;
use crate::exec::task::TaskMetrics;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Sums the counters of `tasks` (`(task name, subtask, counters)`, as in
/// [`JobHandle::tasks`]) per task name, keeping the order in which each name first appears
/// (plan order).
pub fn totals_by_task(tasks: &[(String, u32, Arc<TaskMetrics>)]) -> Vec<TaskTotals> {
    let mut out: Vec<TaskTotals> = Vec::new();
    for (name, _, m) in tasks {
        let (records_in, records_out) = (
            m.records_in.load(Ordering::Relaxed),
            m.records_out.load(Ordering::Relaxed),
        );
        match out.iter_mut().find(|t| &t.task == name) {
            Some(t) => {
                t.records_in += records_in;
                t.records_out += records_out;
            }
            None => out.push(TaskTotals {
                task: name.clone(),
                records_in,
                records_out,
            }),
        }
    }
    out
}

impl JobHandle {
    /// The run's summary as of now.
    pub fn summary(&self) -> RunSummary {
        let (completed, failed) = {
            let s = self.shared.lock().expect("lock");
            (s.completed_total, s.history.failed)
        };
        RunSummary {
            elapsed_ms: u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            tasks: totals_by_task(&self.tasks),
            checkpoints_completed: completed,
            checkpoints_failed: failed,
            continues_lineage: {
                let lineage = self.lineage_id.lock().expect("lock").clone();
                (lineage != self.job_id).then_some(lineage)
            },
            restarts: self.restarts.load(Ordering::Relaxed),
            output: self
                .outputs
                .iter()
                .map(|path| CommittedOutput {
                    path: path.clone(),
                    run_id: self.job_id.clone(),
                })
                .collect(),
        }
    }
}

/// Logs the run summary of `handle` as one INFO event (target `weir`): the message of
/// [`summary_message`], with the numbers as fields for `--log-format json`. `weir run` and
/// `weir coordinator` call it once when the run ends, however it ends (finished, stopped with
/// a savepoint, suspended, failed).
pub fn log_run_summary(handle: &JobHandle) {
    let summary = handle.summary();
    tracing::info!(
        target: "weir",
        elapsed_ms = summary.elapsed_ms,
        checkpoints_completed = summary.checkpoints_completed,
        checkpoints_failed = summary.checkpoints_failed,
        run_id = %handle.job_id,
        "{}",
        summary_message(&summary)
    );
}

/// The one-line message `weir run` and `weir coordinator` log at the end, e.g.
/// `run summary: 2.4s elapsed; records in/out: gen-0 0/1000, count-2 1000/50;
/// checkpoints: 3 completed, 0 failed; committed output in ./out (files part-<run>-*.jsonl)`.
/// Without a completed checkpoint nothing of this run is committed, which it says.
pub fn summary_message(s: &RunSummary) -> String {
    let elapsed = Duration::from_millis(s.elapsed_ms).as_secs_f64();
    let records: Vec<String> = s
        .tasks
        .iter()
        .map(|t| format!("{} {}/{}", t.task, t.records_in, t.records_out))
        .collect();
    let output = if s.output.is_empty() {
        "no file sink".to_string()
    } else if s.checkpoints_completed == 0 {
        "no checkpoint completed, so nothing of this run is committed".to_string()
    } else {
        let dirs: Vec<String> = s
            .output
            .iter()
            .map(|o| format!("{} (files part-{}-*.jsonl)", o.path, o.run_id))
            .collect();
        let earlier = s.continues_lineage.as_ref().map_or(String::new(), |l| {
            // Where those runs wrote is not known here: the output path may have changed.
            format!(", continuing the output the earlier runs of lineage {l} committed")
        });
        format!("committed output in {}{earlier}", dirs.join(", "))
    };
    // After a restart the subtasks count from the checkpoint they restarted from.
    let since = match s.restarts {
        0 => String::new(),
        1 => " since the restart (from a checkpoint)".to_string(),
        n => format!(" since the last of {n} restarts (from a checkpoint)"),
    };
    format!(
        "run summary: {elapsed:.1}s elapsed; records in/out{since}: {}; checkpoints: {} completed, {} failed; {output}",
        records.join(", "),
        s.checkpoints_completed,
        s.checkpoints_failed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(records_in: u64, records_out: u64) -> Arc<TaskMetrics> {
        let m = TaskMetrics::default();
        m.records_in.store(records_in, Ordering::Relaxed);
        m.records_out.store(records_out, Ordering::Relaxed);
        Arc::new(m)
    }

    #[test]
    fn totals_sum_subtasks_per_task_in_plan_order() {
        let tasks = vec![
            ("gen-0".to_string(), 0, metrics(0, 10)),
            ("gen-0".to_string(), 1, metrics(0, 15)),
            ("count-2 -> sink-3".to_string(), 0, metrics(12, 4)),
            ("count-2 -> sink-3".to_string(), 1, metrics(13, 5)),
        ];
        let t = totals_by_task(&tasks);
        assert_eq!(
            t.iter()
                .map(|t| (t.task.as_str(), t.records_in, t.records_out))
                .collect::<Vec<_>>(),
            vec![("gen-0", 0, 25), ("count-2 -> sink-3", 25, 9)]
        );
    }

    fn summary(completed: u64, output: &[&str]) -> RunSummary {
        RunSummary {
            elapsed_ms: 2_449,
            tasks: vec![
                TaskTotals {
                    task: "gen-0".into(),
                    records_in: 0,
                    records_out: 1000,
                },
                TaskTotals {
                    task: "count-2 -> sink-3".into(),
                    records_in: 1000,
                    records_out: 50,
                },
            ],
            checkpoints_completed: completed,
            checkpoints_failed: 1,
            continues_lineage: None,
            restarts: 0,
            output: output
                .iter()
                .map(|p| CommittedOutput {
                    path: p.to_string(),
                    run_id: "abc".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_message_names_records_checkpoints_and_output() {
        for (s, want) in [
            (
                summary(3, &["./out"]),
                "run summary: 2.4s elapsed; records in/out: gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 3 completed, 1 failed; committed output in ./out (files part-abc-*.jsonl)",
            ),
            (
                summary(0, &["./out"]),
                "run summary: 2.4s elapsed; records in/out: gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 0 completed, 1 failed; no checkpoint completed, so nothing of this run is committed",
            ),
            (
                RunSummary {
                    continues_lineage: Some("9442".into()),
                    ..summary(3, &["./out"])
                },
                "run summary: 2.4s elapsed; records in/out: gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 3 completed, 1 failed; committed output in ./out (files part-abc-*.jsonl), continuing the output the earlier runs of lineage 9442 committed",
            ),
            (
                summary(3, &[]),
                "run summary: 2.4s elapsed; records in/out: gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 3 completed, 1 failed; no file sink",
            ),
            (
                RunSummary {
                    restarts: 1,
                    ..summary(3, &[])
                },
                "run summary: 2.4s elapsed; records in/out since the restart (from a checkpoint): gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 3 completed, 1 failed; no file sink",
            ),
            (
                RunSummary {
                    restarts: 3,
                    ..summary(3, &[])
                },
                "run summary: 2.4s elapsed; records in/out since the last of 3 restarts (from a checkpoint): gen-0 0/1000, count-2 -> sink-3 1000/50; checkpoints: 3 completed, 1 failed; no file sink",
            ),
        ] {
            assert_eq!(summary_message(&s), want);
        }
    }
}
