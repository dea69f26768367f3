//! Writes to the CR's own metadata, each by server-side apply under its own field
//! manager, so a key the host stops sending is removed and nobody else's is touched:
//! finalizers and managed labels (`inrun-finalizer`), and the Result's labels,
//! annotations and pending cleanup (`inrun-reconciler`).

use std::collections::BTreeMap;

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::context::Ctx;

/// The finalizer every CR Inrun manages carries.
pub const FINALIZER: &str = "inrun.dev/cleanup";
/// Field manager for finalizers and managed labels.
const FINALIZER_MANAGER: &str = "inrun-finalizer";
/// Field manager for the Result's labels and annotations (and children).
pub const RECONCILER_MANAGER: &str = "inrun-reconciler";
/// Annotation holding when a pending cleanup deletes the CR (RFC 3339).
pub const CLEANUP_AT: &str = "inrun.dev/cleanup-at";
/// Label on every CR Inrun manages.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "inrun");

/// The finalizers the host puts on CRs: `inrun.dev/cleanup` plus `runtime.finalizers.names`.
pub fn finalizers(ctx: &Ctx) -> Vec<String> {
    std::iter::once(FINALIZER.to_string())
        .chain(ctx.runtime.finalizers.names.iter().cloned())
        .collect()
}

/// Whether the CR carries the host's finalizer.
pub fn has_finalizer(obj: &DynamicObject) -> bool {
    obj.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// The CR's identity for an apply. The uid makes the API server refuse (409) an apply to
/// a CR that is gone, which server-side apply would otherwise create anew.
fn skeleton(ctx: &Ctx, obj: &DynamicObject) -> Value {
    let mut meta = json!({"name": obj.metadata.name, "uid": obj.metadata.uid});
    if let Some(ns) = &obj.metadata.namespace {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": ctx.cr_resource.api_version, "kind": ctx.cr_resource.kind, "metadata": meta})
}

async fn apply(
    ctx: &Ctx,
    obj: &DynamicObject,
    manager: &str,
    patch: Value,
) -> Result<DynamicObject, kube::Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    ctx.cr_api(obj)
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&patch),
        )
        .await
}

/// Puts the finalizers (unless `runtime.finalizers.remove`) and managed labels on the CR.
/// Returns the CR as the server now has it.
///
/// # Errors
/// The API call failed.
pub async fn maintain(ctx: &Ctx, obj: &DynamicObject) -> Result<DynamicObject, kube::Error> {
    let mut patch = skeleton(ctx, obj);
    patch["metadata"]["labels"] = json!({MANAGED_BY.0: MANAGED_BY.1});
    if !ctx.runtime.finalizers.remove {
        patch["metadata"]["finalizers"] = json!(finalizers(ctx));
    }
    apply(ctx, obj, FINALIZER_MANAGER, patch).await
}

/// Drops the host's finalizers and managed labels, releasing a deleting CR.
///
/// # Errors
/// The API call failed.
pub async fn release(ctx: &Ctx, obj: &DynamicObject) -> Result<(), kube::Error> {
    let held = obj
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| finalizers(ctx).contains(f));
    if !held {
        return Ok(());
    }
    let mut patch = skeleton(ctx, obj);
    patch["metadata"]["finalizers"] = json!([]);
    match apply(ctx, obj, FINALIZER_MANAGER, patch).await {
        Ok(_) => Ok(()),
        // Gone already (409: the uid no longer exists): another finalizer holder finished
        // after us.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sets the Result's labels and annotations (and the pending cleanup time) on the CR;
/// keys from an earlier Result that are missing now are removed.
///
/// # Errors
/// The API call failed.
pub async fn set_result_metadata(
    ctx: &Ctx,
    obj: &DynamicObject,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    cleanup_at: Option<String>,
) -> Result<DynamicObject, kube::Error> {
    let mut patch = skeleton(ctx, obj);
    let mut annotations = annotations.clone();
    if let Some(at) = cleanup_at {
        annotations.insert(CLEANUP_AT.into(), at);
    }
    // An empty map is left out rather than sent as `{}`: on a custom resource, applying
    // `{}` rewrites the managed fields every time, so an unchanged pass would still bump
    // the resourceVersion (and wake the watch). Leaving the key out removes our old keys
    // just the same.
    if !labels.is_empty() {
        patch["metadata"]["labels"] = json!(labels);
    }
    if !annotations.is_empty() {
        patch["metadata"]["annotations"] = json!(annotations);
    }
    apply(ctx, obj, RECONCILER_MANAGER, patch).await
}
