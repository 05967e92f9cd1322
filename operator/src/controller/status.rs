//! Pure status finishing: conditions and the scale subresource selector. Nothing here changes
//! unless the state it describes changes, so writing status never retriggers the controller
//! with a new value on every pass.

use crate::build::{Component, selector_labels};
use crate::crd::{LifecycleState, StreamJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::time::SystemTime;

fn state_name<T: serde::Serialize>(t: &T) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `FINISHED` → `Finished` (a condition reason is CamelCase).
fn pascal_case(state: &str) -> String {
    state
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase())
                .unwrap_or_default()
        })
        .collect()
}

/// The worker pods' label selector (`status.selector`, for `kubectl scale`).
pub fn worker_selector(job: &str) -> String {
    selector_labels(job, Component::Worker)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `Ready`, `Progressing` and `Degraded` for `st`. A condition whose status, reason and message
/// are unchanged keeps its `lastTransitionTime` from `old`.
pub fn conditions(st: &StreamJobStatus, old: &[Condition], generation: i64, now: SystemTime) -> Vec<Condition> {
    let lifecycle = st.lifecycle_state;
    let job_running = st.job_status.as_ref().is_some_and(|j| j.state == "RUNNING");
    // The current generation was refused or rolled back: what runs is the previous spec.
    let previous_spec = st.failed_generation == Some(generation);
    let ready = lifecycle == LifecycleState::Running && job_running && !previous_spec;
    let job_state = st.job_status.as_ref().map(|j| j.state.as_str()).unwrap_or("");
    let (ready_reason, ready_message) = if ready {
        ("Running".to_string(), String::new())
    } else if lifecycle == LifecycleState::Running && job_running && previous_spec {
        (
            "RunningPreviousSpec".to_string(),
            st.error
                .clone()
                .unwrap_or_else(|| format!("generation {generation} is not deployed")),
        )
    } else if lifecycle == LifecycleState::Running && !job_state.is_empty() {
        // The operator's part is done but the job is not running: say what it is doing (a
        // bounded job that consumed its input reads Finished, not Running).
        (
            pascal_case(job_state),
            format!("the job's coordinator reports {job_state}"),
        )
    } else {
        (state_name(&lifecycle), String::new())
    };
    let (progressing, progressing_reason) = match &st.pending {
        Some(p) => (true, state_name(&p.kind)),
        None => match lifecycle {
            LifecycleState::Deploying
            | LifecycleState::Upgrading
            | LifecycleState::RollingBack
            | LifecycleState::Deleting => (true, state_name(&lifecycle)),
            _ => (false, "Idle".to_string()),
        },
    };
    let degraded = lifecycle == LifecycleState::Failed || st.error.is_some();
    let degraded_reason = if lifecycle == LifecycleState::Failed {
        "Failed"
    } else if st.error.is_some() {
        "Error"
    } else {
        "AsExpected"
    };
    let now = Time(k8s_openapi::jiff::Timestamp::try_from(now).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    [
        ("Ready", ready, ready_reason, ready_message),
        ("Progressing", progressing, progressing_reason, String::new()),
        (
            "Degraded",
            degraded,
            degraded_reason.to_string(),
            st.error.clone().unwrap_or_default(),
        ),
    ]
    .into_iter()
    .map(|(type_, on, reason, message)| {
        let status = if on { "True" } else { "False" }.to_string();
        let last_transition_time = old
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        Condition {
            type_: type_.into(),
            status,
            reason,
            message,
            observed_generation: Some(generation),
            last_transition_time,
        }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::JobStatusSummary;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn conditions_table_and_stable_transition_times() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t1 = t0 + Duration::from_secs(60);
        let running = StreamJobStatus {
            lifecycle_state: LifecycleState::Running,
            job_status: Some(JobStatusSummary {
                state: "RUNNING".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c0 = conditions(&running, &[], 3, t0);
        let by = |cs: &[Condition], t: &str| cs.iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!(by(&c0, "Ready").status, "True");
        assert_eq!(by(&c0, "Progressing").status, "False");
        assert_eq!(by(&c0, "Degraded").status, "False");
        // Same state later: identical conditions (no volatile writes).
        assert_eq!(conditions(&running, &c0, 3, t1), c0);
        // A failure flips Ready and Degraded at t1, Progressing keeps t0.
        let failed = StreamJobStatus {
            lifecycle_state: LifecycleState::Failed,
            error: Some("boom".into()),
            ..running.clone()
        };
        let c1 = conditions(&failed, &c0, 4, t1);
        assert_eq!(by(&c1, "Ready").status, "False");
        assert_eq!(by(&c1, "Ready").reason, "Failed");
        assert_eq!(by(&c1, "Degraded").message, "boom");
        assert_ne!(
            by(&c1, "Degraded").last_transition_time,
            by(&c0, "Degraded").last_transition_time
        );
        assert_eq!(
            by(&c1, "Progressing").last_transition_time,
            by(&c0, "Progressing").last_transition_time
        );
        assert_eq!(by(&c1, "Ready").observed_generation, Some(4));
        let deploying = StreamJobStatus {
            lifecycle_state: LifecycleState::Deploying,
            ..Default::default()
        };
        assert_eq!(
            by(&conditions(&deploying, &[], 1, t0), "Progressing").reason,
            "Deploying"
        );
    }

    /// Ready for each (lifecycle, job state): a FINISHED job is not "Running".
    #[test]
    fn ready_reason_table() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let cases = [
            (LifecycleState::Running, "RUNNING", "True", "Running"),
            (LifecycleState::Running, "FINISHED", "False", "Finished"),
            (LifecycleState::Running, "INITIALIZING", "False", "Initializing"),
            (LifecycleState::Running, "UNKNOWN", "False", "Unknown"),
            (LifecycleState::Deploying, "RUNNING", "False", "Deploying"),
            (LifecycleState::Suspended, "", "False", "Suspended"),
        ];
        for (lifecycle, job_state, status, reason) in cases {
            let mut st = StreamJobStatus {
                lifecycle_state: lifecycle,
                job_status: (!job_state.is_empty()).then(|| JobStatusSummary {
                    state: job_state.into(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let ready = conditions(&st, &[], 1, t0)
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                (status, reason),
                "{lifecycle:?}/{job_state}"
            );
            // Generation 1 rolled back (or refused): the old spec runs, so not Ready.
            st.failed_generation = Some(1);
            st.error = Some("rolled back".into());
            let ready = conditions(&st, &[], 1, t0)
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            assert_eq!(ready.status, "False", "{lifecycle:?}/{job_state} rolled back");
            if (lifecycle, job_state) == (LifecycleState::Running, "RUNNING") {
                assert_eq!(
                    (ready.reason.as_str(), ready.message.as_str()),
                    ("RunningPreviousSpec", "rolled back")
                );
            }
        }
    }

    #[test]
    fn selector() {
        assert_eq!(
            worker_selector("wc"),
            "app.kubernetes.io/component=worker,app.kubernetes.io/instance=wc,app.kubernetes.io/name=weir,weir.dev/job=wc"
        );
    }
}
