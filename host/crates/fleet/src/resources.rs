//! Blueprints as cluster-scoped custom resources: the `blueprints.inrun.dev` CRD, a watch
//! that turns each one into a tenant event, and the status the host writes back
//! (`Accepted` condition, the CRDs served, the observed generation).

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::mpsc;

use inrun_runtime::kinds::blueprint_resource;

/// Why a tenant's Blueprint is not served: the classification and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// [`FleetError::reason`].
    pub(crate) reason: &'static str,
    /// The error chain.
    pub(crate) message: String,
}

/// The CRD's name.
pub use inrun_blueprint::BLUEPRINT_CRD;

/// Field manager of the status the host writes on a Blueprint resource.
const MANAGER: &str = "inrun-fleet";

/// The `Blueprint` custom resource definition ([`inrun_generate::blueprint_crd`]).
pub use inrun_generate::blueprint_crd;

/// Installs (or requires) the CRD and waits until it is served.
///
/// # Errors
/// [`inrun_runtime::crds::CrdError`] when it is missing, cannot be installed, or is not served.
pub(super) async fn ensure_crd(
    client: &kube::Client,
    install: inrun_runtime::crds::Install,
) -> Result<(), inrun_runtime::crds::CrdError> {
    inrun_runtime::crds::ensure_manifest(client, BLUEPRINT_CRD, blueprint_crd(), install).await
}

/// One Blueprint resource, as the tenant loader reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Object {
    pub(super) name: String,
    /// Its uid: what a ServiceAccount's consent names.
    pub(super) uid: Option<String>,
    pub(super) generation: Option<i64>,
    /// The document as YAML text: apiVersion, kind, metadata.name and spec.
    pub(super) text: String,
}

/// What the watch reports.
#[derive(Debug)]
pub(super) enum Event {
    /// Created or changed.
    Apply(Object),
    /// Deleted.
    Delete(String),
    /// After a (re-)list: every name that exists, so tenants deleted meanwhile go.
    Present(Vec<String>),
}

fn object(obj: &DynamicObject) -> Option<Object> {
    let name = obj.metadata.name.clone()?;
    let doc = json!({
        "apiVersion": "inrun.dev/v1alpha1",
        "kind": "Blueprint",
        "metadata": {"name": name},
        "spec": obj.data.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    let text = serde_yaml_ng::to_string(&doc).ok()?;
    Some(Object {
        name,
        uid: obj.metadata.uid.clone(),
        generation: obj.metadata.generation,
        text,
    })
}

/// Watches every Blueprint resource and sends an [`Event`] for each change, until the
/// receiver is gone.
pub(super) async fn watch(client: kube::Client, events: mpsc::UnboundedSender<Event>) {
    let api: Api<DynamicObject> = Api::all_with(client, &blueprint_resource());
    // Backs off while the API server is away instead of relisting in a tight loop.
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = Vec::new();
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(watcher::Event::Apply(obj)) => object(&obj).map(Event::Apply),
            Ok(watcher::Event::Delete(obj)) => obj.metadata.name.clone().map(Event::Delete),
            Ok(watcher::Event::Init) => {
                listing.clear();
                None
            }
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(name) = &obj.metadata.name {
                    listing.push(name.clone());
                }
                object(&obj).map(Event::Apply)
            }
            Ok(watcher::Event::InitDone) => Some(Event::Present(std::mem::take(&mut listing))),
            Err(e) => {
                tracing::warn!(error = %e, "watching Blueprint resources; retrying");
                None
            }
        };
        if let Some(event) = event
            && events.send(event).is_err()
        {
            return;
        }
    }
}

/// The status of a `Blueprint` resource: the outcome of loading it.
#[derive(Debug, Clone)]
pub(super) struct Status {
    name: String,
    patch: serde_json::Value,
}

impl Status {
    /// The status saying how loading `object` went.
    pub(super) fn new(object: &Object, result: Result<(), Refusal>, crds: Vec<String>) -> Self {
        let (status, reason, message) = match result {
            Ok(()) => ("True", "Serving", format!("serving {} CRD(s)", crds.len())),
            Err(refusal) => ("False", refusal.reason, refusal.message),
        };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = json!({
            "apiVersion": "inrun.dev/v1alpha1",
            "kind": "Blueprint",
            "status": {
                "observedGeneration": object.generation,
                "crds": crds,
                "conditions": [{
                    "type": "Accepted",
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                    "observedGeneration": object.generation,
                }],
            },
        });
        Status {
            name: object.name.clone(),
            patch,
        }
    }

    /// Writes it (server-side apply of the status); a failure is logged.
    pub(super) async fn write(&self, client: &kube::Client) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &blueprint_resource());
        if let Err(e) = api
            .patch_status(
                &self.name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&self.patch),
            )
            .await
        {
            tracing::warn!(blueprint = %self.name, error = %e, "writing the Blueprint's status");
        }
    }
}
