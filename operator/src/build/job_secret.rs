//! The job secret (issue 15): one Secret per StreamJob, `<job>-job-secret`, holding a random
//! token under [`JOB_SECRET_KEY`]. It is mounted read-only into the coordinator and worker
//! pods ([`JOB_SECRET_DIR`], named by `WEIR_JOB_SECRET_FILE`): the coordinator's control API
//! takes it as a bearer token and workers prove they hold it (HMAC challenge) to the
//! coordinator and to each other. The operator's control API client reads it back.
//!
//! The Secret is owned by the StreamJob (deleted with it) and carries the deployment
//! generation it was made for: a new deployment generation gets a new token (rotation), a
//! re-apply within one generation keeps it ([`token_to_keep`]), so running pods and the
//! operator agree.

use super::{Component, LABEL_DEPLOY_GENERATION, Target, job_key, labels, owner_reference};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use std::collections::BTreeMap;
use weir_runtime::security::secret::JobSecret;

/// Key of the token in the Secret's data, and the file name in the pods.
pub const JOB_SECRET_KEY: &str = "job.secret";

/// Where the pods mount the Secret (read-only); the file is `<dir>/`[`JOB_SECRET_KEY`].
pub const JOB_SECRET_DIR: &str = "/etc/weir-secret";

/// The environment variable the runtime reads the secret file's path from.
pub const JOB_SECRET_ENV: &str = "WEIR_JOB_SECRET_FILE";

/// Name of the volume holding the Secret in the pod templates.
pub const JOB_SECRET_VOLUME: &str = "job-secret";

/// File mode of the mounted token: owner and group read (the pods' fsGroup is the runtime's
/// group), nothing for others. 0o440.
pub const JOB_SECRET_FILE_MODE: i32 = 0o440;

/// Name of the job's Secret: `<job key>-job-secret`.
pub fn job_secret_name(job: &str) -> String {
    format!("{}-job-secret", job_key(job))
}

/// The path of the token file in the pods.
pub fn job_secret_path() -> String {
    format!("{JOB_SECRET_DIR}/{JOB_SECRET_KEY}")
}

/// The job's Secret for deployment `t`, holding `token` (a [`JobSecret`]: printable ASCII,
/// 16 to 4096 bytes), labelled with `t`'s deployment generation and owned by the StreamJob.
pub fn job_secret(t: &Target, token: &JobSecret) -> Secret {
    let name = t.job.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(job_secret_name(&name)),
            namespace: t.job.namespace(),
            labels: Some(labels(&name, Component::JobSecret, t.deploy_generation)),
            owner_references: Some(vec![owner_reference(t.job)]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        immutable: None,
        data: Some(BTreeMap::from([(
            JOB_SECRET_KEY.to_string(),
            ByteString(token.expose().as_bytes().to_vec()),
        )])),
        string_data: None,
    }
}

/// The token in `secret`. Errors (naming the Secret) when the key is missing or the value is
/// not a valid job secret (e.g. edited by hand).
pub fn token_of(secret: &Secret) -> Result<JobSecret, String> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(JOB_SECRET_KEY))
        .ok_or_else(|| {
            format!("Secret {name} has no key {JOB_SECRET_KEY}; delete it and the operator makes a new one")
        })?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| format!("Secret {name}: {JOB_SECRET_KEY} is not UTF-8"))?;
    JobSecret::parse(text, &format!("Secret {name} key {JOB_SECRET_KEY}"))
}

/// Whether a deployment of `deploy_generation` keeps the `existing` Secret's token: only when
/// the Secret was made for that very generation and holds a valid token. `None`: make a new
/// token (no Secret yet, an older generation's, or an unusable value).
pub fn token_to_keep(existing: Option<&Secret>, deploy_generation: u64) -> Option<JobSecret> {
    let secret = existing?;
    let made_for = secret.labels().get(LABEL_DEPLOY_GENERATION)?.parse::<u64>().ok()?;
    (made_for == deploy_generation).then(|| token_of(secret).ok()).flatten()
}
