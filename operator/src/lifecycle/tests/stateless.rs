//! Defect 11, stateless: a stateless job whose first deploy from `spec.initialSavepointPath`
//! never ran (an image that cannot be pulled, then fixed) redeploys from that savepoint; only a
//! deployment that has run (RUNNING with its restore done, or a checkpoint of its own) lets a
//! stateless redeploy start empty.

use super::*;

const INITIAL: &str = "s3://b/svp/savepoint-old-4";

/// A stateless job first deployed from `INITIAL` at `at(0)`, still Deploying (its pods never
/// pulled the image), with `job_status` as given.
fn first_deploy_status(spec: &StreamJobSpec, job_status: Option<JobStatusSummary>) -> StreamJobStatus {
    let mut st = deployed_status(spec, LifecycleState::Deploying);
    st.last_stable_spec = None;
    st.deployed_from = Some(INITIAL.into());
    st.restore_point = Some(RestorePoint {
        path: INITIAL.into(),
        origin: RestoreOrigin::Initial,
        checkpoint_id: None,
    });
    st.job_status = job_status;
    st
}

fn checkpoint(path: &str, completed: u64) -> Option<JobStatusSummary> {
    Some(JobStatusSummary {
        job_id: "run-1".into(),
        state: "INITIALIZING".into(),
        last_checkpoint: Some(CheckpointRef {
            id: 5,
            path: path.into(),
            completed_at: Some(rfc3339(at(completed))),
        }),
        failure: None,
    })
}

/// Runs the cycle of a spec change (or suspend) to its end: start, old pods gone, restore point
/// inspected; returns where the new deployment restores from (or the suspended restore point).
fn cycle(new: &StreamJobSpec, st: StreamJobStatus, first: Observation) -> Option<String> {
    let d = decide(new, &st, &first);
    assert_eq!(d.status.pending.as_ref().map(|p| p.mode), Some(UpgradeMode::Stateless));
    let d = decide(new, &d.status, &gone(obs()));
    if new.state == DesiredState::Suspended {
        assert_eq!(d.status.lifecycle_state, LifecycleState::Suspended);
        return d.status.restore_point.map(|r| r.path);
    }
    let mut o = gone(obs());
    if let Some(r) = &d.status.restore_point {
        o.restore_info = RestoreInfo::Found {
            path: r.path.clone(),
            info: info(&["counts"]),
        };
    }
    let d = decide(new, &d.status, &o);
    d.actions
        .iter()
        .find_map(|a| match a {
            Action::Deploy { restore_from, .. } => Some(restore_from.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no deploy: {:?} {:?}", kinds(&d), d.status.error))
}

#[test]
fn stateless_redeploy_keeps_the_initial_savepoint_until_the_deployment_has_run() {
    let mut old = base_spec(UpgradeMode::Stateless);
    old.initial_savepoint_path = Some(INITIAL.into());
    old.image = "weir:typo".into();
    let mut fixed = old.clone();
    fixed.image = "weir:1".into();
    let mut suspended = old.clone();
    suspended.state = DesiredState::Suspended;
    let image_pull = |mut o: Observation| {
        o.coordinator = CoordinatorReport::Absent; // no coordinator answers: its pod never started
        o
    };
    let reports = |state: JobState| {
        move |mut o: Observation| {
            o.coordinator = CoordinatorReport::Reported(JobReport {
                job_id: "run-1".into(),
                state,
                last_completed: None,
                failure: None,
            });
            o
        }
    };
    type Tweak = Box<dyn Fn(&mut StreamJobStatus)>;
    let none: Tweak = Box::new(|_| {});
    #[allow(clippy::type_complexity)]
    let rows: Vec<(
        &str,
        &StreamJobSpec,
        Tweak,
        Box<dyn Fn(Observation) -> Observation>,
        Option<&str>,
    )> = vec![
        (
            "never ran, image fixed",
            &fixed,
            none,
            Box::new(image_pull),
            Some(INITIAL),
        ),
        (
            "never ran, suspended",
            &suspended,
            Box::new(|_| {}),
            Box::new(image_pull),
            Some(INITIAL),
        ),
        (
            "still initializing (restore not done)",
            &fixed,
            Box::new(|_| {}),
            Box::new(reports(JobState::Initializing)),
            Some(INITIAL),
        ),
        (
            "a checkpoint of the previous deployment (before this deploy)",
            &fixed,
            Box::new(|st| {
                st.job_status = checkpoint("s3://b/chk/j/chk-5", 0).map(|mut j| {
                    j.last_checkpoint.as_mut().unwrap().completed_at = Some("2023-11-14T22:00:00Z".into());
                    j
                })
            }),
            Box::new(image_pull),
            Some(INITIAL),
        ),
        (
            "the restored savepoint itself reported as last completed",
            &fixed,
            Box::new(|st| st.job_status = checkpoint(INITIAL, 10)),
            Box::new(image_pull),
            Some(INITIAL),
        ),
        (
            "reported RUNNING earlier (firstRunningAt)",
            &fixed,
            Box::new(|st| st.first_running_at = Some(rfc3339(at(20)))),
            Box::new(image_pull),
            None,
        ),
        (
            "reports RUNNING in this pass",
            &fixed,
            Box::new(|_| {}),
            Box::new(reports(JobState::Running)),
            None,
        ),
        (
            "completed a checkpoint of its own",
            &fixed,
            Box::new(|st| st.job_status = checkpoint("s3://b/chk/j/chk-5", 10)),
            Box::new(image_pull),
            None,
        ),
        (
            "ran, then suspended",
            &suspended,
            Box::new(|st| st.first_running_at = Some(rfc3339(at(20)))),
            Box::new(image_pull),
            None,
        ),
    ];
    for (row, new, tweak, observe, expected) in rows {
        let mut st = first_deploy_status(&old, None);
        tweak(&mut st);
        let got = cycle(new, st, observe(obs()));
        assert_eq!(got.as_deref(), expected, "{row}");
    }
}

#[test]
fn deployment_ran_table() {
    let spec = base_spec(UpgradeMode::Stateless);
    let rows: Vec<(&str, Option<&str>, Option<JobStatusSummary>, bool)> = vec![
        ("nothing reported", None, None, false),
        ("RUNNING seen", Some("2023-11-14T22:13:40Z"), None, true),
        (
            "own checkpoint after the deploy",
            None,
            checkpoint("s3://b/chk/j/chk-5", 10),
            true,
        ),
        (
            "checkpoint at the deploy second",
            None,
            checkpoint("s3://b/chk/j/chk-5", 0),
            true,
        ),
        ("the restore point itself", None, checkpoint(INITIAL, 10), false),
        (
            "a checkpoint without completion time",
            None,
            checkpoint("s3://b/chk/j/chk-5", 10).map(|mut j| {
                j.last_checkpoint.as_mut().unwrap().completed_at = None;
                j
            }),
            false,
        ),
    ];
    for (row, first_running_at, job_status, expected) in rows {
        let mut st = first_deploy_status(&spec, job_status);
        st.first_running_at = first_running_at.map(str::to_string);
        assert_eq!(deployment_ran(&st), expected, "{row}");
    }
}

/// Every deploy starts a new deployment that has not run yet.
#[test]
fn a_deploy_resets_first_running_at() {
    let spec = base_spec(UpgradeMode::Stateless);
    let mut st = first_deploy_status(&spec, None);
    st.first_running_at = Some(rfc3339(at(20)));
    let mut new = spec.clone();
    new.image = "weir:2".into();
    let d = decide(&new, &st, &obs());
    let d = decide(&new, &d.status, &gone(obs()));
    let d = decide(&new, &d.status, &gone(obs()));
    assert_eq!(kinds(&d), ["deploy"]);
    assert_eq!(d.status.first_running_at, None);
    let d = decide(&new, &d.status, &obs());
    assert_eq!(
        d.status.first_running_at,
        Some(rfc3339(at(100))),
        "set when RUNNING is reported"
    );
}
