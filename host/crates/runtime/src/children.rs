//! The child API that applying ([`super::apply`]), pruning and releasing
//! ([`super::teardown`]) and the pass's effects share: reading, listing, deleting and
//! orphaning a CR's children, and the errors of all of them.
//!
//! Prune, release and `request.children` touch only objects the host applied for the CR
//! (its owner label and the host's field manager), never a same-named stranger.

use std::collections::HashSet;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::context::Ctx;
use super::kinds::{Kind, UnknownKind};
use super::stores::child_id;
use inrun_pass::meta::APPLIED_HASH;
use inrun_pass::meta::{OWNER_UID, RECONCILER_MANAGER};
use inrun_pass::{ChildKey, ConditionReason, Observed, waves};

/// The child's id in the triggers' records of what the host wrote.
pub(super) fn id_of(key: &ChildKey) -> String {
    child_id(&key.group, &key.kind, key.namespace.as_deref(), &key.name)
}

/// Why writing children failed.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// A failpoint of a test build failed the step (`inrun_pass::failpoint`).
    #[error(transparent)]
    Failpoint(#[from] inrun_pass::failpoint::Injected),
    /// The kind is not served.
    #[error(transparent)]
    Kind(#[from] UnknownKind),
    /// A resource has no name.
    #[error("resources[{0}] has no metadata.name")]
    NoName(usize),
    /// A resource's metadata has the wrong shape (labels that are not a map, ...).
    #[error("resources[{index}]: {problem}")]
    Shape {
        /// Position in the Result's resources.
        index: usize,
        /// What is wrong.
        problem: String,
    },
    /// An object the CR does not own already has the child's name.
    #[error(
        "{child} already exists and is not this CR's ({held}); it is left alone — set `adopt: true` on its managedResources entry to take it over"
    )]
    Conflict {
        /// Which child.
        child: String,
        /// Who holds it, as far as its labels tell.
        held: String,
    },
    /// Discovery of the API server's types failed.
    #[error("discovering the API server's types")]
    Discovery(#[source] kube::Error),
    /// Discovery did not answer in time.
    #[error(
        "discovering the API server's types: the API server did not answer within {}s (an aggregated API it proxies to may be down)",
        .within.as_secs()
    )]
    DiscoveryTimedOut {
        /// How long it waited.
        within: std::time::Duration,
    },
    /// An available APIService's group/version did not tell its types in time.
    #[error(
        "discovering the API server's types: APIService {api_service} serves {served}, which did not answer within {}s",
        .within.as_secs()
    )]
    ServedTypesTimedOut {
        /// The APIService.
        api_service: String,
        /// The group/version it serves.
        served: String,
        /// How long it waited.
        within: std::time::Duration,
    },
    /// An available APIService's types could not be read.
    #[error(
        "discovering the API server's types: APIService {api_service} serves {served}, whose types could not be read"
    )]
    ServedTypes {
        /// The APIService.
        api_service: String,
        /// The group/version it serves.
        served: String,
        /// The API server's error.
        #[source]
        source: kube::Error,
    },
    /// The API call failed.
    #[error("{action} {child}: {}", ApiFailure::text(error))]
    Api {
        /// `applying`, `deleting`, `listing`.
        action: &'static str,
        /// Which child (or kind, for a list).
        child: String,
        /// The API error (told in the message, as [`ApiFailure`] tells it).
        error: kube::Error,
    },
}

pub(crate) use inrun_reconcilers::api::ApiFailure;

impl ChildError {
    /// The `Ready` reason it deserves, when more telling than `ReconcileError`.
    pub fn condition(&self) -> Option<ConditionReason> {
        match self {
            ChildError::Conflict { .. } => Some(ConditionReason::Conflict),
            ChildError::Api {
                error: kube::Error::Api(e),
                ..
            } if e.code == 403 => Some(ConditionReason::Forbidden),
            _ => None,
        }
    }
}

pub(super) fn api_for(ctx: &Ctx, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(ctx.client.clone(), ns, &kind.resource),
        _ => Api::all_with(ctx.client.clone(), &kind.resource),
    }
}

/// The child `key` of `api_version`, whole, as the server has it now.
///
/// # Errors
/// [`ChildError`] when its kind is not served or the read fails.
pub async fn observe(ctx: &Ctx, api_version: &str, key: &ChildKey) -> Result<Observed, ChildError> {
    let kind = ctx
        .kinds
        .resolve(&ctx.client, api_version, &key.kind)
        .await?;
    let api = api_for(ctx, &kind, key.namespace.as_deref());
    let got = api
        .get_opt(&key.name)
        .await
        .map_err(|error| ChildError::Api {
            action: "reading",
            child: key.to_string(),
            error,
        })?;
    Ok(match got {
        Some(object) => serde_json::to_value(object)
            .map(Observed::Object)
            .unwrap_or(Observed::Missing),
        None => Observed::Missing,
    })
}

/// Children of `cr` of one kind, across namespaces, by the owner label (whoever applied
/// them).
pub(super) async fn list_owned(
    ctx: &Ctx,
    cr: &DynamicObject,
    kind: &Kind,
) -> Result<Vec<DynamicObject>, ChildError> {
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &kind.resource);
    let list = api
        .list(&ListParams::default().labels(&format!("{OWNER_UID}={uid}")))
        .await
        .map_err(|error| ChildError::Api {
            action: "listing",
            child: kind.resource.kind.clone(),
            error,
        })?;
    Ok(list.items)
}

/// The CR's children of every kind in `spec.managedResources` (keep kinds too), as the
/// Request's `children`: `{Kind: {name: object}}`, without `managedFields`. A child in
/// another namespace than the CR's is keyed `namespace/name`.
///
/// # Errors
/// [`ChildError`] for the first failed list.
pub async fn observed(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
) -> Result<Value, ChildError> {
    let mut grouped = serde_json::Map::new();
    let mut seen = HashSet::new();
    for m in &spec.managed_resources {
        if !seen.insert((m.api_version.clone(), m.kind.clone())) {
            continue;
        }
        let kind = ctx
            .kinds
            .resolve(&ctx.client, &m.api_version, &m.kind)
            .await?;
        let mut by_name = serde_json::Map::new();
        for mut child in list_owned(ctx, cr, &kind).await? {
            if !applied_by_host(&child) {
                continue;
            }
            child.metadata.managed_fields = None;
            let name = child.metadata.name.clone().unwrap_or_default();
            let key = match &child.metadata.namespace {
                Some(ns) if Some(ns) != cr.metadata.namespace.as_ref() => format!("{ns}/{name}"),
                _ => name,
            };
            let mut value = serde_json::to_value(&child).unwrap_or(Value::Null);
            if value.get("apiVersion").is_none() {
                value["apiVersion"] = json!(kind.resource.api_version);
                value["kind"] = json!(kind.resource.kind);
            }
            by_name.insert(key, value);
        }
        let entry = grouped
            .entry(kind.resource.kind.clone())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(map) = entry {
            map.extend(by_name);
        }
    }
    Ok(Value::Object(grouped))
}

/// Whether the host applied `obj` (its field manager has an `Apply` entry).
fn applied_by_host(obj: &DynamicObject) -> bool {
    obj.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(RECONCILER_MANAGER) && m.operation.as_deref() == Some("Apply")
    })
}

/// The key of a listed child of `kind`.
fn key_of(obj: &DynamicObject, kind: &Kind) -> ChildKey {
    ChildKey {
        group: kind.resource.group.clone(),
        kind: kind.resource.kind.clone(),
        namespace: obj.metadata.namespace.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// A child of the CR as listed on the server.
pub(super) struct Listed {
    /// Its kind.
    pub kind: Kind,
    /// The object.
    pub obj: DynamicObject,
    /// Its key.
    pub key: ChildKey,
}

impl Listed {
    fn annotation(&self, name: &str) -> Option<&str> {
        self.obj
            .metadata
            .annotations
            .as_ref()?
            .get(name)
            .map(String::as_str)
    }

    /// Its delete policy (a value the host would not have applied counts as `delete`).
    fn delete_policy(&self) -> waves::DeletePolicy {
        waves::delete_policy(self.annotation(waves::DELETE_POLICY))
            .unwrap_or(waves::DeletePolicy::Delete)
    }

    /// Whether its delete policy leaves it in place when its CR is deleted (`orphan`,
    /// `orphan-on-delete`).
    pub fn orphans(&self) -> bool {
        self.delete_policy().kept_on_delete()
    }

    /// Whether its delete policy leaves it in place when a later Result drops it
    /// (`orphan` only: `orphan-on-delete` is pruned on an update).
    pub fn orphans_on_prune(&self) -> bool {
        self.delete_policy().kept_on_prune()
    }

    /// Whether it is being deleted already.
    pub fn deleting(&self) -> bool {
        self.obj.metadata.deletion_timestamp.is_some()
    }

    /// Its delete stage among objects with managed types `types`.
    pub fn delete_stage(&self, types: &waves::ManagedTypes) -> (i32, u8) {
        let wave =
            waves::wave(self.annotation(waves::DELETE_ORDER), waves::DELETE_ORDER).unwrap_or(0);
        let r = &self.kind.resource;
        waves::delete_stage(wave, waves::class(&r.api_version, &r.kind, types))
    }

    /// The whole object as JSON, apiVersion and kind included (list items may lack them).
    pub fn value(&self) -> Value {
        let mut v = serde_json::to_value(&self.obj).unwrap_or(Value::Null);
        v["apiVersion"] = json!(self.kind.resource.api_version);
        v["kind"] = json!(self.kind.resource.kind);
        v
    }
}

/// The CR's children of `kinds` that the host applied, across namespaces.
pub(super) async fn listed(
    ctx: &Ctx,
    cr: &DynamicObject,
    kinds: Vec<Kind>,
) -> Result<Vec<Listed>, ChildError> {
    let mut all = Vec::new();
    for kind in kinds {
        for obj in list_owned(ctx, cr, &kind).await? {
            // Labelled by someone else, never applied by the host: not the host's to delete.
            if !applied_by_host(&obj) {
                continue;
            }
            all.push(Listed {
                key: key_of(&obj, &kind),
                kind: kind.clone(),
                obj,
            });
        }
    }
    Ok(all)
}

/// Deletes a child; returns whether it is gone (not held by finalizers).
pub(super) async fn delete(
    ctx: &Ctx,
    cr: &DynamicObject,
    kind: &Kind,
    key: &ChildKey,
) -> Result<bool, ChildError> {
    ctx.triggers.deleting(&Ctx::key(cr), &id_of(key));
    let api = api_for(ctx, kind, key.namespace.as_deref());
    match api.delete(&key.name, &DeleteParams::background()).await {
        // The object as it was, or as it is while finalizers hold it; or a status.
        Ok(answer) => Ok(answer.left().is_none_or(|obj| {
            obj.metadata.deletion_timestamp.is_none()
                || obj.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
        })),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
        Err(error) => Err(ChildError::Api {
            action: "deleting",
            child: key.to_string(),
            error,
        }),
    }
}

/// Leaves a child in place, no longer the CR's: its owner label, the host's hash stamp and
/// the CR's owner reference are removed.
pub(super) async fn orphan(
    ctx: &Ctx,
    cr: &DynamicObject,
    child: &Listed,
) -> Result<(), ChildError> {
    let uid = cr.metadata.uid.as_deref().unwrap_or_default();
    let refs: Vec<_> = child
        .obj
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.uid != uid)
        .collect();
    let patch = json!({"metadata": {
        "labels": {OWNER_UID: null},
        "annotations": {APPLIED_HASH: null},
        "ownerReferences": if refs.is_empty() { Value::Null } else { json!(refs) },
    }});
    ctx.triggers.deleting(&Ctx::key(cr), &id_of(&child.key));
    let api = api_for(ctx, &child.kind, child.key.namespace.as_deref());
    match api
        .patch(
            &child.key.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(error) => Err(ChildError::Api {
            action: "orphaning",
            child: child.key.to_string(),
            error,
        }),
    }
}

/// Resolves the kinds of `entries` (apiVersion, kind); a kind the API server does not
/// serve has no objects and is left out.
pub(super) async fn served_kinds(
    ctx: &Ctx,
    entries: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Kind>, ChildError> {
    let mut kinds = Vec::new();
    let mut seen = HashSet::new();
    for (api_version, kind) in entries {
        if !seen.insert((api_version.clone(), kind.clone())) {
            continue;
        }
        match ctx.kinds.resolve(&ctx.client, &api_version, &kind).await {
            Ok(k) => kinds.push(k),
            Err(e) if e.not_served() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(kinds)
}
