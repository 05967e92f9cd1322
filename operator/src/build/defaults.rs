//! Operator-wide defaults of the runtime pods (`WEIR_RUNTIME_IMAGE`, `WEIR_RUNTIME_DEFAULTS`):
//! what a StreamJob gets for whatever its own spec leaves unset.

use crate::crd::ImagePullPolicy;
use k8s_openapi::api::core::v1::{PodSecurityContext, ResourceRequirements, SecurityContext};
use serde::{Deserialize, Serialize};

/// Image of StreamJobs without `spec.image` when nothing else is configured: the runtime of the
/// same version as this operator.
pub const BUILT_IN_RUNTIME_IMAGE: &str = concat!("ghcr.io/weir-dev/weir:", env!("CARGO_PKG_VERSION"));

/// Defaults of every job's coordinator and worker pods. A StreamJob's own `spec.image`,
/// `spec.imagePullPolicy` and `spec.coordinator|worker.resources` win; its pod templates merge
/// over the result. The security contexts merge key by key over the operator's built-in ones
/// (non-root uid 65532, read-only root filesystem, no capabilities, RuntimeDefault seccomp), so
/// a default can add settings but a missing key never loosens one.
///
/// The JSON shape is the Helm chart's `runtime` block (camelCase keys, unknown keys refused).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeDefaults {
    /// Image for StreamJobs without `spec.image`; empty: [`BUILT_IN_RUNTIME_IMAGE`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Pull policy of the runtime containers; unset: Kubernetes' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Resources of the coordinator container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_resources: Option<ResourceRequirements>,
    /// Resources of each worker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_resources: Option<ResourceRequirements>,
    /// Pod-level securityContext, merged over the built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Container-level securityContext of the `weir` container, merged over the built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,
}

impl RuntimeDefaults {
    /// Parses `WEIR_RUNTIME_DEFAULTS` (JSON). Errors name the offending key and say where the
    /// value comes from.
    pub fn from_json(text: &str) -> Result<RuntimeDefaults, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "WEIR_RUNTIME_DEFAULTS (--runtime-defaults) is not valid runtime defaults JSON: {e}; \
                 expected keys: image, imagePullPolicy, coordinatorResources, workerResources, \
                 podSecurityContext, containerSecurityContext"
            )
        })
    }

    /// These defaults with the image set from `WEIR_RUNTIME_IMAGE` when given.
    ///
    /// Errors: both name an image and they differ (which one would apply is unclear).
    pub fn with_image(mut self, runtime_image: Option<&str>) -> Result<RuntimeDefaults, String> {
        match runtime_image.filter(|i| !i.is_empty()) {
            Some(i) if !self.image.is_empty() && self.image != i => Err(format!(
                "WEIR_RUNTIME_IMAGE ({i}) and WEIR_RUNTIME_DEFAULTS.image ({}) disagree; set one",
                self.image
            )),
            Some(i) => {
                self.image = i.to_string();
                Ok(self)
            }
            None => Ok(self),
        }
    }

    /// The image of a job without `spec.image`.
    pub fn image(&self) -> &str {
        if self.image.is_empty() {
            BUILT_IN_RUNTIME_IMAGE
        } else {
            &self.image
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_charts_runtime_block_and_refuses_unknown_keys() {
        let d = RuntimeDefaults::from_json(
            r#"{"image":"r:1","imagePullPolicy":"Never","coordinatorResources":{"requests":{"cpu":"100m"}},
                "workerResources":{"limits":{"memory":"1Gi"}},"podSecurityContext":{"fsGroup":65532},
                "containerSecurityContext":{"readOnlyRootFilesystem":true}}"#,
        )
        .unwrap();
        assert_eq!(d.image(), "r:1");
        assert_eq!(d.image_pull_policy, Some(ImagePullPolicy::Never));
        assert!(d.worker_resources.unwrap().limits.unwrap().contains_key("memory"));
        let err = RuntimeDefaults::from_json(r#"{"workerResource":{}}"#).unwrap_err();
        assert!(
            err.contains("workerResource") && err.contains("WEIR_RUNTIME_DEFAULTS"),
            "{err}"
        );
        let err = RuntimeDefaults::from_json(r#"{"imagePullPolicy":"Sometimes"}"#).unwrap_err();
        assert!(err.contains("Sometimes"), "{err}");
    }

    #[test]
    fn image_precedence() {
        assert_eq!(RuntimeDefaults::default().image(), BUILT_IN_RUNTIME_IMAGE);
        let d = RuntimeDefaults::default().with_image(Some("a:1")).unwrap();
        assert_eq!(d.image(), "a:1");
        assert_eq!(d.clone().with_image(Some("a:1")).unwrap(), d);
        assert!(d.with_image(Some("b:2")).unwrap_err().contains("disagree"));
    }
}
