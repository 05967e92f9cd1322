//! Checks of the operator-only fields of a [`StreamJobSpec`] that the CRD schema cannot express
//! (durations in the runtime's syntax, [`weir_runtime::job::parse_duration`], which CEL's Go
//! durations do not cover: `7d`, `PT10S`, `500 milliseconds`), run together
//! with the runtime's validation before the operator changes anything.

use super::StreamJobSpec;
use weir_runtime::job::operator_durations::{OPERATOR_DURATIONS, check_positive_duration};

impl StreamJobSpec {
    /// Validates the whole spec for a job named `name`: the operator-only durations
    /// (`savepoints.periodicInterval`, `savepoints.history.maxAge`, `rollback.readinessTimeout`,
    /// `health.restartWindow` must parse and be greater than 0), then the runtime's rules
    /// ([`StreamJobSpec::runtime_job`]): the distributed runtime the operator deploys runs
    /// every job `weir run` runs, in all three `checkpointing.mode`s.
    ///
    /// Errors: the first violation, naming the field (`spec.rollback.readinessTimeout: ...`).
    pub fn validate(&self, name: &str) -> Result<weir_runtime::job::Job, String> {
        let savepoints = self.savepoints.as_ref();
        // In the order of `OPERATOR_DURATIONS`, which names each field and its hint.
        let values = [
            savepoints.and_then(|s| s.periodic_interval.as_deref()),
            savepoints.and_then(|s| s.history.as_ref()?.max_age.as_deref()),
            Some(self.rollback.readiness_timeout.as_str()),
            Some(self.health.restart_window.as_str()),
        ];
        for ((field, hint), value) in OPERATOR_DURATIONS.iter().zip(values) {
            if let Some(text) = value {
                check_positive_duration(field, text, hint)?;
            }
        }
        self.runtime_job(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> StreamJobSpec {
        let yaml = format!(
            "image: x\njob: {{ steps: [ {{ source: {{ generator: {{}} }} }}, {{ sink: {{ print: {{}} }} }} ] }}\n{extra}"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    #[test]
    fn a_multi_input_dataflow_is_accepted_as_the_cluster_runs_it() {
        let yaml = "image: x\njob:\n  steps:\n    - { name: a, source: { generator: {} } }\n    - { name: b, source: { generator: {} } }\n    - { union: {}, inputs: [a, b] }\n    - { sink: { print: {} } }\n";
        let spec: StreamJobSpec = serde_yaml::from_str(yaml).unwrap();
        assert!(spec.validate("wc").is_ok());
    }

    /// A branch (one source read by two steps), several sinks and a window's late side
    /// output: accepted, as the cluster runs them; the misuses fail with the runtime's message.
    #[test]
    fn a_branching_dataflow_with_several_sinks_is_accepted_as_the_cluster_runs_it() {
        let steps = r#"    - name: events
      source:
        file: { path: e.jsonl, format: jsonl, schema: [{ name: t, type: int }, { name: user, type: string }] }
        eventTime: { field: t, maxOutOfOrderness: 1s }
    - keyBy: { expression: user, as: user }
    - { name: w, window: { type: tumbling, size: 1m, lateRecords: sideOutput } }
    - { uid: windows-out, sink: { discard: {} } }
    - { inputs: [events], filter: { expression: "user != ''" } }
    - { uid: events-out, sink: { print: {} } }
    - { inputs: [w.late], sink: { discard: {} } }
"#;
        let spec: StreamJobSpec = serde_yaml::from_str(&format!("image: x\njob:\n  steps:\n{steps}")).unwrap();
        let job = spec.validate("wc").unwrap();
        assert_eq!(job.operators.iter().filter(|o| o.kind.is_sink()).count(), 3);
        let unread = steps.replace("    - { inputs: [w.late], sink: { discard: {} } }\n", "");
        let spec: StreamJobSpec = serde_yaml::from_str(&format!("image: x\njob:\n  steps:\n{unread}")).unwrap();
        let e = spec.validate("wc").unwrap_err();
        assert!(
            e.starts_with("spec.job.steps[2].window.lateRecords: `sideOutput` sends the late records"),
            "{e}"
        );
    }

    #[test]
    fn every_guarantee_is_accepted_as_the_cluster_runs_all_three() {
        for mode in ["exactly-once", "at-least-once", "at-most-once"] {
            let job = spec(&format!("checkpointing: {{ mode: {mode} }}")).validate("wc");
            assert!(job.is_ok(), "{mode}: {job:?}");
        }
    }

    #[test]
    fn operator_durations_must_parse_and_be_positive() {
        assert!(spec("").validate("wc").is_ok());
        assert!(
            spec("savepoints: { periodicInterval: 6h, history: { maxAge: 7d } }")
                .validate("wc")
                .is_ok()
        );
        for (extra, want) in [
            (
                "savepoints: { periodicInterval: 0s }",
                "spec.savepoints.periodicInterval: must be greater than 0; omit it for no periodic savepoints",
            ),
            (
                "savepoints: { periodicInterval: often }",
                "spec.savepoints.periodicInterval: `often` is not a duration",
            ),
            (
                "rollback: { readinessTimeout: -5m }",
                "spec.rollback.readinessTimeout: `-5m` is negative: give a positive duration",
            ),
            (
                "savepoints: { history: { maxAge: 0d } }",
                "spec.savepoints.history.maxAge: must be greater than 0",
            ),
            (
                "rollback: { readinessTimeout: 0s }",
                "spec.rollback.readinessTimeout: must be greater than 0",
            ),
            (
                "health: { restartWindow: an hour }",
                "spec.health.restartWindow: `an hour` is not a duration",
            ),
            ("parallelism: 0", "spec.parallelism"),
        ] {
            let e = spec(extra).validate("wc").unwrap_err();
            assert!(e.starts_with(want), "{extra}: want `{want}`, got `{e}`");
        }
    }

    /// Every operator-only duration takes the forms every runtime duration takes (Flink's unit
    /// words, ISO-8601), through the one parser, and refuses a number without a unit the same way.
    #[test]
    fn operator_durations_take_the_runtime_forms() {
        for d in [
            "PT10S",
            "500 milliseconds",
            "10 seconds",
            "1 MIN",
            "P1DT12H",
            "7d",
            "1h 30m",
        ] {
            let extra = format!(
                "savepoints: {{ periodicInterval: '{d}', history: {{ maxAge: '{d}' }} }}\n\
                 rollback: {{ readinessTimeout: '{d}' }}\nhealth: {{ restartWindow: '{d}' }}"
            );
            let job = spec(&extra).validate("wc");
            assert!(job.is_ok(), "{d}: {job:?}");
        }
        let e = spec("health: { restartWindow: '3600' }").validate("wc").unwrap_err();
        assert!(
            e.starts_with("spec.health.restartWindow: `3600` has no unit; write `3600ms`"),
            "{e}"
        );
        let e = spec("savepoints: { periodicInterval: P1M }")
            .validate("wc")
            .unwrap_err();
        assert!(e.starts_with("spec.savepoints.periodicInterval: `P1M`: "), "{e}");
    }

    /// The same bad YAML gives the same error, path included, under `weir run` and in a
    /// StreamJob (the operator's validation), in the one path style (`steps[2]`, 0-based).
    #[test]
    fn weir_run_and_the_operator_name_the_same_path() {
        let manifest = |steps: &str| {
            format!(
                "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: wc }}\nspec:\n  image: x\n  job:\n    steps:\n{steps}"
            )
        };
        for (steps, path) in [
            (
                "      - source: { generator: { keys: 0 } }\n      - sink: { print: {} }\n",
                "spec.job.steps[0].source.generator.keys",
            ),
            (
                "      - source: { generator: {} }\n      - filter: { expression: 'key +' }\n      - sink: { print: {} }\n",
                "spec.job.steps[1].filter.expression",
            ),
            (
                "      - { name: a, source: { generator: {} } }\n      - { name: b, source: { generator: {} } }\n      - { union: {}, inputs: [a, c] }\n      - sink: { print: {} }\n",
                "spec.job.steps[2].inputs[1]",
            ),
        ] {
            let yaml = manifest(steps);
            let by_run = weir_runtime::job::parse_manifest(&yaml, &[]).unwrap_err().to_string();
            let doc: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
            let spec: StreamJobSpec = serde_yaml::from_value(doc["spec"].clone()).unwrap();
            let by_operator = spec.validate("wc").unwrap_err();
            assert_eq!(by_operator, by_run, "{steps}");
            assert!(by_run.starts_with(&format!("{path}: ")), "{by_run}");
        }
    }
}
