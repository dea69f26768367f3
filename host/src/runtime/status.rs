//! The CR's status: `emit.status` and the Result's status, plus `observedGeneration` and a
//! `Ready` condition following the Kubernetes API conventions. Written by server-side apply
//! to the status subresource with the resourceVersion the pass read, so a pass never
//! acknowledges a spec it did not see.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::context::Ctx;

/// Field manager for status.
const STATUS_MANAGER: &str = "inrun-status";
/// Longest condition message, in characters.
const MESSAGE_MAX: usize = 1000;

/// The `Ready` condition's state.
#[derive(Debug, Clone)]
pub struct Ready {
    /// True when the pass succeeded.
    pub ok: bool,
    /// CamelCase reason: `Reconciled`, `ReconcileError`, `Invalid`, `Gated`, `Finalizing`,
    /// `DeletionBlocked`.
    pub reason: &'static str,
    /// For people; bounded and free of secrets.
    pub message: String,
}

/// How a status write ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// The status is on the CR.
    Done,
    /// The CR changed since the pass read it; a newer pass will write instead.
    Stale,
}

/// Writes `fields` and the `Ready` condition to the CR's status.
///
/// # Errors
/// The API call failed for a reason other than a stale resourceVersion.
pub async fn write(
    ctx: &Ctx,
    obj: &DynamicObject,
    mut fields: Map<String, Value>,
    ready: Ready,
) -> Result<Written, kube::Error> {
    let generation = obj.metadata.generation.unwrap_or_default();
    let previous = obj
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    let was = previous
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    let status_text = if ready.ok { "True" } else { "False" };
    let mut message: String = ready.message.chars().take(MESSAGE_MAX).collect();
    if message.is_empty() {
        message = ready.reason.to_string();
    }
    // The transition time moves only when the condition's status flips.
    let transition = match &was["lastTransitionTime"] {
        Value::String(t) if was["status"] == status_text => t.clone(),
        _ => now(),
    };
    let condition = json!({
        "type": "Ready",
        "status": status_text,
        "reason": ready.reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    });
    let mut conditions: Vec<Value> = previous
        .map(|c| c.iter().filter(|c| c["type"] != "Ready").cloned().collect())
        .unwrap_or_default();
    conditions.push(condition);
    fields.insert("observedGeneration".into(), json!(generation));
    fields.insert("conditions".into(), Value::Array(conditions));

    let mut meta =
        json!({"name": obj.metadata.name, "resourceVersion": obj.metadata.resource_version});
    if let Some(ns) = &obj.metadata.namespace {
        meta["namespace"] = json!(ns);
    }
    let patch = json!({
        "apiVersion": ctx.cr_resource.api_version,
        "kind": ctx.cr_resource.kind,
        "metadata": meta,
        "status": fields,
    });
    let name = obj.metadata.name.clone().unwrap_or_default();
    let result = ctx
        .cr_api(obj)
        .patch_status(
            &name,
            &PatchParams::apply(STATUS_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await;
    match result {
        Ok(_) => Ok(Written::Done),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Written::Stale),
        Err(e) => Err(e),
    }
}

/// Now, as an RFC 3339 timestamp with second precision (what `metav1.Time` holds).
pub fn now() -> String {
    let ts = k8s_openapi::jiff::Timestamp::now();
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
