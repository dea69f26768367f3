//! The CR's children: applied by server-side apply (field manager `inrun-reconciler`,
//! forced) in waves, owned and labelled — and only when the desired object differs from
//! what the host last applied or the child drifted; pruned when a Result no longer
//! returns them; deleted everywhere when the CR is released.
//!
//! Adoption is explicit: an existing object the CR does not own (no `inrun.dev/owner-uid`
//! of its uid) is never taken over unless its `managedResources` entry says `adopt: true`,
//! and prune, release and `request.children` touch only objects the host applied for the
//! CR (its owner label and the host's field manager), never a same-named stranger.

use std::collections::HashSet;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use serde_json::{Value, json};

use super::context::Ctx;
use super::kinds::{Kind, UnknownKind};
use super::stores::child_id;
use inrun_contract::CREATE_ONLY_ANNOTATION;
use inrun_pass::meta::{OWNER_UID, RECONCILER_MANAGER};
use inrun_pass::{Applied, ChildKey};

/// Annotation on every child the host applies: a hash of the object it sent, so a later
/// pass (or another replica, or the host after a restart) knows the child is as desired
/// without writing it again.
pub const APPLIED_HASH: &str = "inrun.dev/applied";

fn id_of(key: &ChildKey) -> String {
    child_id(&key.group, &key.kind, key.namespace.as_deref(), &key.name)
}

/// Why writing children failed.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
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
    pub fn condition(&self) -> Option<&'static str> {
        match self {
            ChildError::Conflict { .. } => Some("Conflict"),
            ChildError::Api {
                error: kube::Error::Api(e),
                ..
            } if e.code == 403 => Some("Forbidden"),
            _ => None,
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Apply order: CRDs and namespaces first, instances of CRDs from the same Result last.
fn wave(r: &Value, crd_groups: &HashSet<(String, String)>) -> u8 {
    let kind = r["kind"].as_str().unwrap_or_default();
    let group = group_of(r["apiVersion"].as_str().unwrap_or_default());
    match kind {
        "CustomResourceDefinition" | "Namespace" => 0,
        _ if crd_groups.contains(&(group.to_string(), kind.to_string())) => 2,
        _ => 1,
    }
}

fn api_for(ctx: &Ctx, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(ctx.client.clone(), ns, &kind.resource),
        _ => Api::all_with(ctx.client.clone(), &kind.resource),
    }
}

/// Applies every resource for `cr`; `owned` adds the owner label and, in the CR's
/// namespace, a controller owner reference. A child already as desired is not written.
/// Returns what the resources are and how many were written.
///
/// # Errors
/// [`ChildError`] for the first resource that could not be applied.
pub async fn apply(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
    resources: &[Value],
    owned: bool,
) -> Result<Applied, ChildError> {
    let crd_groups: HashSet<(String, String)> = resources
        .iter()
        .filter(|r| r["kind"] == "CustomResourceDefinition")
        .filter_map(|r| {
            let spec = &r["spec"];
            Some((
                spec["group"].as_str()?.to_string(),
                spec["names"]["kind"].as_str()?.to_string(),
            ))
        })
        .collect();
    let mut order: Vec<(usize, &Value)> = resources.iter().enumerate().collect();
    order.sort_by_key(|(i, r)| (wave(r, &crd_groups), *i));
    ctx.children.ready().await;
    let mut applied = Applied::default();
    for (index, resource) in order {
        let adopt = spec.managed_resources.iter().any(|m| {
            m.adopt && resource["apiVersion"] == m.api_version && resource["kind"] == m.kind
        });
        let (key, written) = apply_one(ctx, cr, index, resource, owned, adopt).await?;
        applied.keys.insert(key);
        applied.written += usize::from(written);
    }
    Ok(applied)
}

/// A hash of the object as the host sends it: the first 8 bytes of its sha256, so every
/// replica and every build of the host computes the same stamp (std's hasher may change
/// between Rust releases, which would rewrite every child after an upgrade).
fn hash_of(obj: &Value) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(obj.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Whether nobody but the host has written the child's fields since the host's last
/// apply: in its managed fields (status aside), the host's entry is the newest.
fn untouched(child: &PartialObjectMeta<DynamicObject>) -> bool {
    let entries: Vec<_> = child
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
        .collect();
    let Some(ours) = entries.iter().find(|m| {
        m.manager.as_deref() == Some(RECONCILER_MANAGER) && m.operation.as_deref() == Some("Apply")
    }) else {
        return false;
    };
    entries.iter().all(|m| {
        std::ptr::eq(*m, *ours) || matches!((&m.time, &ours.time), (Some(t), Some(o)) if t.0 < o.0)
    })
}

/// Applies one child unless it is already as desired; returns it and whether it was
/// written. An owned child that exists without the CR's owner label is refused
/// ([`ChildError::Conflict`]) unless `adopt`.
async fn apply_one(
    ctx: &Ctx,
    cr: &DynamicObject,
    index: usize,
    resource: &Value,
    owned: bool,
    adopt: bool,
) -> Result<(ChildKey, bool), ChildError> {
    let api_version = resource["apiVersion"].as_str().unwrap_or_default();
    let kind_name = resource["kind"].as_str().unwrap_or_default();
    let kind = ctx
        .kinds
        .resolve(&ctx.client, api_version, kind_name)
        .await?;
    check_shape(resource).map_err(|problem| ChildError::Shape { index, problem })?;
    let mut obj = resource.clone();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or(ChildError::NoName(index))?
        .to_string();
    let cr_ns = cr.metadata.namespace.clone();
    let namespace = if kind.namespaced {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(cr_ns.clone());
        obj["metadata"]["namespace"] = json!(ns);
        ns
    } else {
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        None
    };
    let create_only = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove(CREATE_ONLY_ANNOTATION))
        .is_some();
    if owned {
        let uid = cr.metadata.uid.clone().unwrap_or_default();
        obj["metadata"]["labels"][OWNER_UID] = json!(uid);
        if kind.namespaced && namespace.is_some() && namespace == cr_ns && ctx.namespaced {
            obj["metadata"]["ownerReferences"] = json!([{
                "apiVersion": ctx.cr_resource.api_version,
                "kind": ctx.cr_resource.kind,
                "name": cr.metadata.name,
                "uid": uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }]);
        }
    }
    let key = ChildKey {
        group: group_of(api_version).to_string(),
        kind: kind_name.to_string(),
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let api = api_for(ctx, &kind, namespace.as_deref());
    let err = |action, error| ChildError::Api {
        action,
        child: key.to_string(),
        error,
    };
    let hash = hash_of(&obj);
    let id = id_of(&key);
    let cr_key = Ctx::key(cr);
    let live = if owned {
        ctx.children.get(&kind, namespace.as_deref(), &name)
    } else {
        None
    };
    let uid = cr.metadata.uid.as_deref().unwrap_or_default();
    // The cache holds only objects with an owner label: one whose label names another CR
    // is someone else's, and one the cache lacks may still exist (unlabelled) — ask.
    let holder = match &live {
        Some(Some(child)) => Some(owner_of(&child.metadata)),
        _ if owned || create_only => api
            .get_metadata_opt(&name)
            .await
            .map_err(|e| err("reading", e))?
            .map(|o| owner_of(&o.metadata)),
        _ => None,
    };
    if create_only && holder.is_some() {
        return Ok((key, false));
    }
    if owned
        && !adopt
        && let Some(held) = holder.filter(|h| h.as_deref() != Some(uid))
    {
        return Err(ChildError::Conflict {
            child: key.to_string(),
            held: match held {
                Some(other) => format!("its {OWNER_UID} label names another CR, uid {other}"),
                None => format!("it has no {OWNER_UID} label"),
            },
        });
    }
    if let Some(Some(child)) = &live {
        let stamped = child
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED_HASH))
            .is_some_and(|h| *h == format!("{hash:016x}"));
        let same_version = child
            .metadata
            .resource_version
            .as_deref()
            .is_some_and(|rv| ctx.triggers.applied_as(&cr_key, &id, hash, rv));
        if stamped
            && (same_version || untouched(child))
            && child.metadata.deletion_timestamp.is_none()
        {
            return Ok((key, false));
        }
    }
    obj["metadata"]["annotations"][APPLIED_HASH] = json!(format!("{hash:016x}"));
    let written = api
        .patch(
            &name,
            &PatchParams::apply(RECONCILER_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|e| err("applying", e))?;
    if let Some(rv) = &written.metadata.resource_version {
        ctx.triggers.applied(&cr_key, &id, hash, rv);
    }
    Ok((key, true))
}

/// The host edits `metadata`, `metadata.labels`, `metadata.annotations` and
/// `metadata.namespace` of every child: they must be a map, maps of strings, and a string.
fn check_shape(resource: &Value) -> Result<(), String> {
    let meta = match resource.get("metadata") {
        Some(Value::Object(m)) => m,
        _ => return Err("metadata is not an object".into()),
    };
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {}
            Some(_) => return Err(format!("metadata.{field} is not a map of strings")),
        }
    }
    match meta.get("namespace") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(_) => Err("metadata.namespace is not a string".into()),
    }
}

/// Children of `cr` of one kind, across namespaces, by the owner label.
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

/// The owner uid an object's label names, if any.
fn owner_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.labels.as_ref()?.get(OWNER_UID).cloned()
}

fn applied_by_host(obj: &DynamicObject) -> bool {
    obj.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(RECONCILER_MANAGER) && m.operation.as_deref() == Some("Apply")
    })
}

fn key_of(obj: &DynamicObject, kind: &Kind) -> ChildKey {
    ChildKey {
        group: kind.resource.group.clone(),
        kind: kind.resource.kind.clone(),
        namespace: obj.metadata.namespace.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

async fn delete(
    ctx: &Ctx,
    cr: &DynamicObject,
    kind: &Kind,
    key: &ChildKey,
) -> Result<(), ChildError> {
    ctx.triggers.deleting(&Ctx::key(cr), &id_of(key));
    let api = api_for(ctx, kind, key.namespace.as_deref());
    match api.delete(&key.name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(error) => Err(ChildError::Api {
            action: "deleting",
            child: key.to_string(),
            error,
        }),
    }
}

/// The managed kinds of a reconcile block that are not in `prune.keep`.
async fn candidate_kinds(
    ctx: &Ctx,
    spec: &inrun_blueprint::ReconcileSpec,
) -> Result<Vec<Kind>, ChildError> {
    let mut kinds = Vec::new();
    let mut seen = HashSet::new();
    for m in &spec.managed_resources {
        if spec.prune.keeps(&m.api_version, &m.kind)
            || !seen.insert((m.api_version.clone(), m.kind.clone()))
        {
            continue;
        }
        kinds.push(
            ctx.kinds
                .resolve(&ctx.client, &m.api_version, &m.kind)
                .await?,
        );
    }
    Ok(kinds)
}

/// Deletes children that `applied` no longer contains: only ones with the CR's owner label
/// that the host applied, never kinds in `prune.keep`. Returns what was deleted.
///
/// # Errors
/// [`ChildError`] for the first failed list or delete.
pub async fn prune(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
    applied: &HashSet<ChildKey>,
) -> Result<Vec<ChildKey>, ChildError> {
    let mut pruned = Vec::new();
    for kind in candidate_kinds(ctx, spec).await? {
        for obj in list_owned(ctx, cr, &kind).await? {
            let key = key_of(&obj, &kind);
            if applied.contains(&key)
                || !applied_by_host(&obj)
                || obj.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            delete(ctx, cr, &kind, &key).await?;
            pruned.push(key);
        }
    }
    Ok(pruned)
}

/// Deletes every child of a released CR, in every namespace and cluster-scoped ones too,
/// except kinds in `prune.keep`. Instances of managed types go first, CRDs and namespaces
/// last (the reverse of the apply waves).
///
/// # Errors
/// [`ChildError`] for the first failed list or delete.
pub async fn delete_all(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
) -> Result<Vec<ChildKey>, ChildError> {
    let mut kinds = candidate_kinds(ctx, spec).await?;
    kinds.sort_by_key(|k| match k.resource.kind.as_str() {
        "CustomResourceDefinition" | "Namespace" => 1,
        _ => 0,
    });
    let mut deleted = Vec::new();
    for kind in kinds {
        for obj in list_owned(ctx, cr, &kind).await? {
            // Labelled by someone else, never applied by the host: not the host's to delete.
            if !applied_by_host(&obj) {
                continue;
            }
            let key = key_of(&obj, &kind);
            delete(ctx, cr, &kind, &key).await?;
            deleted.push(key);
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::check_shape;
    use serde_json::json;

    #[test]
    fn children_whose_metadata_the_host_cannot_edit_are_refused_not_panicked_on() {
        assert!(check_shape(&json!({"metadata": {"name": "a", "labels": {"x": "y"}}})).is_ok());
        for bad in [
            json!({"metadata": "a"}),
            json!({"metadata": {"name": "a", "labels": "x"}}),
            json!({"metadata": {"name": "a", "annotations": {"x": 1}}}),
            json!({"metadata": {"name": "a", "namespace": 3}}),
        ] {
            assert!(check_shape(&bad).is_err(), "{bad}");
        }
    }
}
