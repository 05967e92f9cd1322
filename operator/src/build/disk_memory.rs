//! `spec.diskState` against the worker pods' memory limit, when the operator deploys a job:
//! the same rule as the warning each worker logs at its start
//! ([`weir_runtime::state::disk_memory`]), but where a platform engineer looks first
//! (`kubectl describe streamjob`), and before a pod is killed for memory. Pure: it reads the
//! spec and the operator's defaults only.

use super::Target;
use kube::ResourceExt;
use weir_runtime::job::quantity::parse_byte_quantity;
use weir_runtime::state::disk_memory::{MemoryLimit, WORKER_POD, configured_stores, over_limit_warning};

/// Where the worker's limit comes from, for the message.
const WORKER_LIMIT_SOURCE: &str = "the worker container's memory limit (resources.limits.memory)";

/// The Warning for `t`'s worker pods, or `None` when they fit or nothing can be said: a job on
/// the heap backend or without stateful steps, workers without a memory limit (in
/// `spec.worker.resources` or the operator's `workerResources` default), a limit that is not
/// a whole number of bytes (`500m`), or a spec the runtime refuses (the deployment reports
/// that itself). Each worker pod runs `min(slotsPerWorker, parallelism)` subtasks of every
/// stateful step (slot k runs subtask k of every stage), each with its own store.
pub fn disk_memory_warning(t: &Target) -> Option<String> {
    let job = t.spec.runtime_job(&t.job.name_any()).ok()?;
    let options = job.spec.disk_state_options().ok()?;
    let resources = t
        .spec
        .worker
        .as_ref()
        .and_then(|w| w.resources.as_ref())
        .or(t.defaults.worker_resources.as_ref())?;
    let memory = resources.limits.as_ref()?.get("memory")?;
    let bytes = parse_byte_quantity("resources.limits.memory", &memory.0).ok()?;
    let slots = u64::try_from(t.spec.slots_per_worker.max(1)).unwrap_or(1);
    let subtasks = slots.min(u64::from(job.parallelism.max(1)));
    let configured = configured_stores(&job, &options, subtasks)?;
    let limit = MemoryLimit {
        bytes,
        source: WORKER_LIMIT_SOURCE,
    };
    over_limit_warning(configured, &limit, WORKER_POD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::RuntimeDefaults;
    use crate::build::state_volume_tests::job;

    fn warning_with(extra: &str, defaults: &RuntimeDefaults) -> Option<String> {
        let job = job(extra);
        disk_memory_warning(&Target {
            job: &job,
            spec: &job.spec,
            restore_from: None,
            deploy_generation: 1,
            spec_generation: 1,
            defaults,
        })
    }

    fn warning(extra: &str) -> Option<String> {
        warning_with(extra, &RuntimeDefaults::default())
    }

    /// (The fixture runs at parallelism 2.) One store per subtask of the count: `cacheSize + 3 × writeBufferSize + writeCacheSize`,
    /// 32Mi + 48Mi + 16Mi = 96Mi at the defaults, times the subtasks a pod runs, against three
    /// quarters of the worker's limit.
    #[test]
    fn worker_pods_table() {
        let rows: [(&str, &str, Option<&str>); 8] = [
            ("heap backend", "  worker: {resources: {limits: {memory: 64Mi}}}", None),
            ("disk, no limit", "  stateBackend: disk", None),
            (
                "disk, 2 slots × 96Mi = 192Mi within 3/4 of 256Mi",
                "  stateBackend: disk\n  slotsPerWorker: 2\n  worker: {resources: {limits: {memory: 256Mi}}}",
                None,
            ),
            (
                "disk, 2 slots × 96Mi = 192Mi over 3/4 of 255Mi",
                "  stateBackend: disk\n  slotsPerWorker: 2\n  worker: {resources: {limits: {memory: 255Mi}}}",
                Some("the 2 disk stores of each worker pod are configured for 192.0 MiB"),
            ),
            (
                "slots beyond the parallelism run nothing",
                "  stateBackend: disk\n  slotsPerWorker: 16\n  worker: {resources: {limits: {memory: 250Mi}}}",
                Some("the 2 disk stores of each worker pod are configured for 192.0 MiB"),
            ),
            (
                "a cacheSize of 1Gi on a 1Gi worker",
                "  stateBackend: disk\n  diskState: {cacheSize: 1Gi}\n  worker: {resources: {limits: {memory: 1Gi}}}",
                Some("of the 1.0 GiB of the worker container's memory limit"),
            ),
            (
                "a limit in millibytes is not judged",
                "  stateBackend: disk\n  worker: {resources: {limits: {memory: 500m}}}",
                None,
            ),
            (
                "requests alone are not a limit",
                "  stateBackend: disk\n  worker: {resources: {requests: {memory: 64Mi}}}",
                None,
            ),
        ];
        for (case, extra, want) in rows {
            let got = warning(extra);
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(part) => {
                    let got = got.unwrap_or_else(|| panic!("{case}: no warning"));
                    assert!(got.contains(part), "{case}: {got}");
                    assert!(got.contains("spec.slotsPerWorker"), "{case}: {got}");
                }
            }
        }
    }

    /// Without `spec.worker.resources`, the operator's `workerResources` default is the limit.
    #[test]
    fn the_operators_default_worker_resources_count() {
        let defaults: RuntimeDefaults =
            serde_json::from_str(r#"{"workerResources":{"limits":{"memory":"100Mi"}}}"#).unwrap();
        let got = warning_with("  stateBackend: disk", &defaults).expect("1 store of 96Mi over 3/4 of 100Mi");
        assert!(got.contains("the 1 disk stores of each worker pod"), "{got}");
        let own = "  stateBackend: disk\n  worker: {resources: {limits: {memory: 1Gi}}}";
        assert_eq!(warning_with(own, &defaults), None, "the spec's own limit wins");
    }
}
