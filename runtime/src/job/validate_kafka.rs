//! Checks of the Kafka source and sink settings (pure: no broker is contacted; a wrong address
//! or a missing topic fails the subtask when it starts, naming the operator).

use super::spec_kafka::{KafkaSinkSpec, KafkaSourceSpec, StartingOffsets};
use super::validate::JobError;
use std::collections::BTreeMap;

/// Properties Weir sets itself on consumers; a user value would break the source's contract
/// (`auto.offset.reset`, also spelled with librdkafka's `topic.` prefix: earliest starts at
/// offset 0 and relies on the reset to the log start).
const SOURCE_RESERVED: [&str; 5] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "auto.offset.reset",
    "topic.auto.offset.reset",
];
/// Properties Weir sets itself on producers.
const SINK_RESERVED: [&str; 2] = ["bootstrap.servers", "transactional.id"];

/// Checks a `source.kafka` at field path `at` (`spec.job.steps[0].source.kafka`).
///
/// Errors: an empty `bootstrapServers`, no topic or an empty topic name, `committed` without
/// `groupId`, `timestamp` without `startingTimestampMs` (or a timestamp with another starting
/// point), a zero rate limit, a property Weir sets itself.
pub fn check_source(at: &str, spec: &KafkaSourceSpec) -> Result<(), JobError> {
    check_servers(at, &spec.bootstrap_servers)?;
    if spec.topics.is_empty() {
        return Err(JobError::new(format!("{at}.topics"), "list at least one topic"));
    }
    if let Some(i) = spec.topics.iter().position(|t| t.trim().is_empty()) {
        return Err(JobError::new(format!("{at}.topics[{i}]"), "must not be empty"));
    }
    match (spec.starting_offsets, spec.starting_timestamp_ms) {
        (StartingOffsets::Timestamp, None) => {
            return Err(JobError::new(
                format!("{at}.startingTimestampMs"),
                "is required with `startingOffsets: timestamp` (milliseconds since the Unix epoch)",
            ));
        }
        (StartingOffsets::Timestamp, Some(ms)) if ms < 0 => {
            return Err(JobError::new(
                format!("{at}.startingTimestampMs"),
                "must not be negative",
            ));
        }
        (StartingOffsets::Timestamp, Some(_)) | (_, None) => {}
        (_, Some(_)) => {
            return Err(JobError::new(
                format!("{at}.startingTimestampMs"),
                "is only used with `startingOffsets: timestamp`; remove it or set that",
            ));
        }
    }
    if spec.starting_offsets == StartingOffsets::Committed && spec.group_id.is_none() {
        return Err(JobError::new(
            format!("{at}.groupId"),
            "is required with `startingOffsets: committed` (the group whose offsets to start from)",
        ));
    }
    if spec.max_records_per_second == Some(0) {
        return Err(JobError::new(
            format!("{at}.maxRecordsPerSecond"),
            "must be at least 1; omit it for no limit",
        ));
    }
    check_metadata_fields(at, spec)?;
    check_properties(at, &spec.properties, &SOURCE_RESERVED)
}

/// The source's metadata fields must be non-empty and distinct from each other.
fn check_metadata_fields(at: &str, spec: &KafkaSourceSpec) -> Result<(), JobError> {
    let named = [
        ("keyField", &spec.key_field),
        ("partitionField", &spec.partition_field),
        ("offsetField", &spec.offset_field),
        ("timestampField", &spec.timestamp_field),
    ];
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (setting, name) in named {
        let Some(name) = name else { continue };
        if name.trim().is_empty() {
            return Err(JobError::new(
                format!("{at}.{setting}"),
                "must not be empty; omit it to leave the field out",
            ));
        }
        if let Some((other, _)) = seen.iter().find(|(_, n)| *n == name.as_str()) {
            return Err(JobError::new(
                format!("{at}.{setting}"),
                format!("`{name}` is also `{other}`: give each metadata field its own name"),
            ));
        }
        seen.push((setting, name));
    }
    Ok(())
}

/// Checks a `sink.kafka` at field path `at`.
///
/// Errors: an empty `bootstrapServers` or `topic`, an empty or over-long
/// `transactionalIdPrefix`, a zero transaction timeout, a
/// property Weir sets itself.
pub fn check_sink(at: &str, spec: &KafkaSinkSpec) -> Result<(), JobError> {
    check_servers(at, &spec.bootstrap_servers)?;
    if spec.topic.trim().is_empty() {
        return Err(JobError::new(format!("{at}.topic"), "must not be empty"));
    }
    if let Some(prefix) = &spec.transactional_id_prefix
        && (prefix.trim().is_empty() || prefix.len() > 200)
    {
        return Err(JobError::new(
            format!("{at}.transactionalIdPrefix"),
            "must be 1 to 200 characters, unique per job and sink (e.g. `wordcount-out`)",
        ));
    }
    for (setting, name) in [("keyField", &spec.key_field), ("partitionField", &spec.partition_field)] {
        if name.as_ref().is_some_and(|n| n.trim().is_empty()) {
            return Err(JobError::new(
                format!("{at}.{setting}"),
                "must not be empty; omit it to leave the choice to the producer",
            ));
        }
    }
    if spec.transaction_timeout_ms == Some(0) {
        return Err(JobError::new(
            format!("{at}.transactionTimeoutMs"),
            "must be at least 1 (and above the checkpoint interval plus the longest expected downtime)",
        ));
    }
    check_properties(at, &spec.properties, &SINK_RESERVED)
}

fn check_servers(at: &str, servers: &str) -> Result<(), JobError> {
    if servers.split(',').any(|s| s.trim().is_empty()) {
        return Err(JobError::new(
            format!("{at}.bootstrapServers"),
            "must list `host:port` addresses separated by commas, e.g. `localhost:9092`",
        ));
    }
    Ok(())
}

fn check_properties(at: &str, properties: &BTreeMap<String, String>, reserved: &[&str]) -> Result<(), JobError> {
    match properties.keys().find(|k| reserved.contains(&k.as_str())) {
        Some(k) => Err(JobError::new(
            format!("{at}.properties.{k}"),
            "is set by Weir; remove it (use the source or sink's own field, if it has one)",
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::DeliveryGuarantee;

    fn source() -> KafkaSourceSpec {
        KafkaSourceSpec {
            bootstrap_servers: "localhost:9092".into(),
            topics: vec!["in".into()],
            ..Default::default()
        }
    }

    fn sink() -> KafkaSinkSpec {
        KafkaSinkSpec {
            bootstrap_servers: "localhost:9092".into(),
            topic: "out".into(),
            ..Default::default()
        }
    }

    #[test]
    fn source_checks_name_the_field() {
        let cases: Vec<(KafkaSourceSpec, Option<&str>)> = vec![
            (source(), None),
            (
                KafkaSourceSpec {
                    bootstrap_servers: " ".into(),
                    ..source()
                },
                Some("x.bootstrapServers"),
            ),
            (
                KafkaSourceSpec {
                    topics: vec![],
                    ..source()
                },
                Some("x.topics"),
            ),
            (
                KafkaSourceSpec {
                    topics: vec!["a".into(), "".into()],
                    ..source()
                },
                Some("x.topics[1]"),
            ),
            (
                KafkaSourceSpec {
                    starting_offsets: StartingOffsets::Timestamp,
                    ..source()
                },
                Some("x.startingTimestampMs"),
            ),
            (
                KafkaSourceSpec {
                    starting_offsets: StartingOffsets::Timestamp,
                    starting_timestamp_ms: Some(1_700_000_000_000),
                    ..source()
                },
                None,
            ),
            (
                KafkaSourceSpec {
                    starting_timestamp_ms: Some(5),
                    ..source()
                },
                Some("x.startingTimestampMs"),
            ),
            (
                KafkaSourceSpec {
                    starting_offsets: StartingOffsets::Committed,
                    ..source()
                },
                Some("x.groupId"),
            ),
            (
                KafkaSourceSpec {
                    max_records_per_second: Some(0),
                    ..source()
                },
                Some("x.maxRecordsPerSecond"),
            ),
            (
                KafkaSourceSpec {
                    properties: [("group.id".to_string(), "g".to_string())].into(),
                    ..source()
                },
                Some("x.properties.group.id"),
            ),
            (
                KafkaSourceSpec {
                    properties: [("auto.offset.reset".to_string(), "latest".to_string())].into(),
                    ..source()
                },
                Some("x.properties.auto.offset.reset"),
            ),
            (
                KafkaSourceSpec {
                    key_field: Some("k".into()),
                    partition_field: Some("p".into()),
                    offset_field: Some("o".into()),
                    timestamp_field: Some("ts".into()),
                    ..source()
                },
                None,
            ),
            (
                KafkaSourceSpec {
                    offset_field: Some(" ".into()),
                    ..source()
                },
                Some("x.offsetField"),
            ),
            (
                KafkaSourceSpec {
                    key_field: Some("meta".into()),
                    timestamp_field: Some("meta".into()),
                    ..source()
                },
                Some("x.timestampField"),
            ),
        ];
        for (spec, want) in cases {
            let got = check_source("x", &spec).err().map(|e| e.field);
            assert_eq!(got.as_deref(), want, "{spec:?}");
        }
    }

    #[test]
    fn sink_checks_name_the_field() {
        let exactly_once = |prefix: Option<&str>| KafkaSinkSpec {
            delivery_guarantee: DeliveryGuarantee::ExactlyOnce,
            transactional_id_prefix: prefix.map(String::from),
            ..sink()
        };
        let cases: Vec<(KafkaSinkSpec, Option<&str>)> = vec![
            (sink(), None),
            (exactly_once(Some("job-out")), None),
            (exactly_once(None), None),
            (exactly_once(Some(" ")), Some("x.transactionalIdPrefix")),
            (
                KafkaSinkSpec {
                    topic: "".into(),
                    ..sink()
                },
                Some("x.topic"),
            ),
            (
                KafkaSinkSpec {
                    bootstrap_servers: "a:1,".into(),
                    ..sink()
                },
                Some("x.bootstrapServers"),
            ),
            (
                KafkaSinkSpec {
                    key_field: Some("word".into()),
                    partition_field: Some("p".into()),
                    ..sink()
                },
                None,
            ),
            (
                KafkaSinkSpec {
                    partition_field: Some("".into()),
                    ..sink()
                },
                Some("x.partitionField"),
            ),
            (
                KafkaSinkSpec {
                    transaction_timeout_ms: Some(0),
                    ..sink()
                },
                Some("x.transactionTimeoutMs"),
            ),
            (
                KafkaSinkSpec {
                    properties: [("transactional.id".to_string(), "t".to_string())].into(),
                    ..sink()
                },
                Some("x.properties.transactional.id"),
            ),
        ];
        for (spec, want) in cases {
            let got = check_sink("x", &spec).err().map(|e| e.field);
            assert_eq!(got.as_deref(), want, "{spec:?}");
        }
    }
}
