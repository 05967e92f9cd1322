//! Applying and deleting the job's child objects (server-side apply; deletes ignore objects
//! already gone).

use crate::build::{self, FIELD_MANAGER, coordinator_name, worker_name};
use crate::controller::{Context, Error};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

pub(super) async fn delete_ignoring_missing<K>(
    api: &Api<K>,
    name: &str,
    kind: &str,
    dp: &DeleteParams,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteError {
            what: format!("{kind}/{name}"),
            source,
        }),
    }
}

/// Deletes the coordinator Deployment and worker StatefulSet (foreground: the objects stay
/// until their pods are gone, which the lifecycle waits for). Services and the ConfigMap stay.
pub(super) async fn delete_workloads(ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let dp = DeleteParams::foreground();
    delete_ignoring_missing(
        &Api::<Deployment>::namespaced(ctx.client.clone(), ns),
        &coordinator_name(name),
        "Deployment",
        &dp,
    )
    .await?;
    delete_ignoring_missing(
        &Api::<StatefulSet>::namespaced(ctx.client.clone(), ns),
        &worker_name(name),
        "StatefulSet",
        &dp,
    )
    .await
}

async fn apply<K>(ctx: &Context, ns: &str, obj: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let name = obj.name_any();
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map(|_| ())
        .map_err(|source| Error::ApplyError {
            what: format!("{}/{name}", K::kind(&())),
            source,
        })
}

/// Makes sure the job's Secret holds a token of deployment `t` (docs/operations/security.md):
/// reads it, keeps it when it was made for `t`'s deployment generation
/// ([`build::token_to_keep`]), else server-side applies a new random token (a new deployment
/// generation rotates the token; the old generation's pods are gone by then). Runs before
/// [`apply_children`]: the pods mount it.
pub(super) async fn ensure_job_secret(ctx: &Context, ns: &str, t: &build::Target<'_>) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let name = build::job_secret_name(&t.job.name_any());
    let existing = api.get_opt(&name).await.map_err(|source| Error::ObserveError {
        what: format!("Secret/{name}"),
        source,
    })?;
    if build::token_to_keep(existing.as_ref(), t.deploy_generation).is_some() {
        return Ok(());
    }
    let token = weir_runtime::security::secret::JobSecret::generate();
    apply::<Secret>(ctx, ns, &build::job_secret(t, &token)).await
}

/// Server-side applies every child (ConfigMap first: the pods mount it; the NetworkPolicies
/// before the pods, so none runs unprotected).
pub(super) async fn apply_children(
    ctx: &Context,
    ns: &str,
    c: &build::Children,
    network_policies: &[NetworkPolicy],
) -> Result<(), Error> {
    apply::<ConfigMap>(ctx, ns, &c.config_map).await?;
    apply::<Service>(ctx, ns, &c.coordinator_service).await?;
    apply::<Service>(ctx, ns, &c.worker_service).await?;
    for policy in network_policies {
        apply::<NetworkPolicy>(ctx, ns, policy).await?;
    }
    apply::<Deployment>(ctx, ns, &c.coordinator).await?;
    apply::<StatefulSet>(ctx, ns, &c.workers).await
}

/// Deletes workloads of the job that this deployment did not produce: children of the job (in
/// the watch cache) under other names (renamed children). Objects under the names just applied
/// are this deployment's, whatever generation the cache still shows for them.
pub(super) async fn delete_orphans(ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    for d in ctx.cache.deployments_of(ns, name) {
        if d.name_any() != coordinator_name(name) {
            delete_ignoring_missing(&deployments, &d.name_any(), "Deployment", &DeleteParams::foreground()).await?;
        }
    }
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    for s in ctx.cache.stateful_sets_of(ns, name) {
        if s.name_any() != worker_name(name) {
            delete_ignoring_missing(&sets, &s.name_any(), "StatefulSet", &DeleteParams::foreground()).await?;
        }
    }
    Ok(())
}
