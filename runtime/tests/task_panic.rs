//! A subtask that panics (a bug, never user input: the test hook `WEIR_FAILPOINT=panic-subtask:<uid>`
//! stands in for one) fails the job at once with its own message, `subtask counts -> out
//! (1/2) panicked: ...`, not with the symptom its neighbours report (`downstream subtask is gone`,
//! `input 0 closed without end-of-stream`) after the coordinator's wait for a cause.

mod common;
use common::*;

/// A keyed count at parallelism 2 whose subtask 1/2 of the stage starting at step `uid` panics.
fn run_with_a_panic_in(uid: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("job.yaml");
    std::fs::write(
        &m,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: panics }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 1s, storage: "{}/checkpoints" }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 1, count: 100000, keys: 100 }} }}
      - keyBy: {{ expression: key, as: key }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ discard: {{}} }}
"#,
            dir.path().display()
        ),
    )
    .unwrap();
    let failpoint = [("WEIR_FAILPOINT".to_string(), format!("panic-subtask:{uid}"))];
    let (ok, err) = Weir::run(&m, &[], &failpoint).wait();
    assert!(!ok, "the job must fail: {err}");
    err
}

#[test]
fn a_panicking_subtask_is_the_cause_of_the_jobs_failure() {
    for (uid, subtask) in [("counts", "counts -> out (1/2)"), ("gen", "gen -> keyBy-1 (1/2)")] {
        let err = run_with_a_panic_in(uid);
        let want = format!("job panics failed: subtask {subtask} panicked: failpoint panic-subtask:{uid}");
        assert!(err.contains(&want), "want `{want}` in {err}");
    }
}
