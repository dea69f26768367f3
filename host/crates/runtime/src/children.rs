//! The CR's children: applied by server-side apply (field manager `inrun-reconciler`,
//! forced) in waves, owned and labelled — and only when the desired object differs from
//! what the host last applied or the child drifted. Pruning and deleting them go through
//! the helpers here from [`super::teardown`].
//!
//! Adoption is explicit: an existing object the CR does not own (no `inrun.dev/owner-uid`
//! of its uid) is never taken over unless its `managedResources` entry says `adopt: true`,
//! and prune, release and `request.children` touch only objects the host applied for the
//! CR (its owner label and the host's field manager), never a same-named stranger.

use std::sync::Arc;

use std::collections::HashSet;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use serde_json::{Value, json};

use super::context::Ctx;
use super::kinds::{Kind, UnknownKind};
use super::stores::child_id;
use inrun_contract::CREATE_ONLY_ANNOTATION;
use inrun_contract::api_version::group_of;
use inrun_pass::meta::{OWNER_UID, RECONCILER_MANAGER};
use inrun_pass::{Applied, AppliedChild, ChildKey, Observed, readiness, waves};

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
    /// Discovery of the API server's types failed.
    #[error("discovering the API server's types: {error}")]
    Discovery {
        /// Why.
        error: String,
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

pub(super) fn api_for(ctx: &Ctx, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(ctx.client.clone(), ns, &kind.resource),
        _ => Api::all_with(ctx.client.clone(), &kind.resource),
    }
}

/// A CRD or APIService applied in an earlier stage, which later stages wait for.
struct Gate {
    key: ChildKey,
    kind: Kind,
    /// The object as the apply returned it; `None` when nothing was written.
    written: Option<DynamicObject>,
}

/// The condition that opens a gate of `kind`: an APIService's `Available`, a CRD's
/// `Established`.
fn gate_condition(kind: &str) -> &'static str {
    if kind == waves::API_SERVICE.1 {
        "Available"
    } else {
        "Established"
    }
}

/// Whether a CRD is `Established` or an APIService `Available`.
fn gate_open(obj: &DynamicObject, kind: &str) -> bool {
    let condition = gate_condition(kind);
    obj.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == condition && c["status"] == "True")
}

/// What the first closed gate waits for, if any gate is closed.
async fn closed(ctx: &Ctx, gates: &[Gate]) -> Result<Option<String>, ChildError> {
    for gate in gates {
        let obj = match &gate.written {
            Some(obj) => Some(obj.clone()),
            None => api_for(ctx, &gate.kind, None)
                .get_opt(&gate.key.name)
                .await
                .map_err(|error| ChildError::Api {
                    action: "reading",
                    child: gate.key.to_string(),
                    error,
                })?,
        };
        let Some(obj) = obj else {
            return Ok(Some(format!("waiting for {} to exist", gate.key)));
        };
        if !gate_open(&obj, &gate.key.kind) {
            return Ok(Some(format!(
                "waiting for {} to be {} before the next wave",
                gate.key,
                gate_condition(&gate.key.kind)
            )));
        }
    }
    Ok(None)
}

/// A status-reading child of an earlier stage (a Deployment, a StatefulSet, a Job...), which
/// later apply waves and the managed instances wait for: an instance is served by an
/// operator the same Result may ship, and a wave is declared to come after the ones
/// before, so each goes in only once what it may depend on is ready.
struct Prerequisite {
    key: ChildKey,
    kind: Kind,
    /// The object as the apply returned it; `None` when nothing was written.
    written: Option<DynamicObject>,
}

/// What the first prerequisite not yet ready (by its kind's rules, as for the CR's `Ready`)
/// waits for, if any is not; `next` names the stage that waits.
async fn unready(
    ctx: &Ctx,
    prerequisites: &[Prerequisite],
    next: &str,
) -> Result<Option<String>, ChildError> {
    for p in prerequisites {
        let obj = match &p.written {
            Some(obj) => Some(obj.clone()),
            None => api_for(ctx, &p.kind, p.key.namespace.as_deref())
                .get_opt(&p.key.name)
                .await
                .map_err(|error| ChildError::Api {
                    action: "reading",
                    child: p.key.to_string(),
                    error,
                })?,
        };
        let Some(obj) = obj else {
            return Ok(Some(format!(
                "waiting for {} to exist before {next}",
                p.key
            )));
        };
        let state = readiness::state(&serde_json::to_value(&obj).unwrap_or_default());
        if state != readiness::State::Current {
            return Ok(Some(format!(
                "waiting for {} to be ready before {next}: {}",
                p.key,
                state.message().unwrap_or(state.as_str())
            )));
        }
    }
    Ok(None)
}

/// Applies every resource for `cr` in apply waves ([`waves`]); `owned` adds the owner
/// label and, in the CR's namespace, a controller owner reference. A child already as
/// desired is not written. A stage whose CRDs are not `Established` (APIServices not
/// `Available`) yet ends the apply, and so does a stage of managed instances while a
/// status-reading child of an earlier stage (the operator's Deployment) is not ready:
/// [`Applied::waiting`] says what for, and a later pass goes on — nothing here waits.
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
    let types = waves::ManagedTypes::of(resources, &spec.managed_types);
    let mut order = Vec::with_capacity(resources.len());
    for (index, r) in resources.iter().enumerate() {
        let shape = |problem| ChildError::Shape { index, problem };
        let wave = waves::wave(waves::annotation(r, waves::APPLY_ORDER), waves::APPLY_ORDER)
            .map_err(shape)?;
        waves::wave(
            waves::annotation(r, waves::DELETE_ORDER),
            waves::DELETE_ORDER,
        )
        .map_err(shape)?;
        waves::delete_policy(waves::annotation(r, waves::DELETE_POLICY)).map_err(shape)?;
        let (api_version, kind) = (
            r["apiVersion"].as_str().unwrap_or_default(),
            r["kind"].as_str().unwrap_or_default(),
        );
        let stage = waves::apply_stage(wave, waves::class(api_version, kind, &types));
        order.push((stage, index, r));
    }
    order.sort_by_key(|(stage, index, _)| (*stage, *index));
    ctx.children.ready().await;
    let mut applied = Applied::default();
    let mut gates: Vec<Gate> = Vec::new();
    let mut prerequisites: Vec<Prerequisite> = Vec::new();
    let mut stage = None;
    for (this, index, resource) in order {
        if stage != Some(this) {
            if let Some(on) = closed(ctx, &gates).await? {
                applied.waiting = Some(on);
                return Ok(applied);
            }
            let next = if stage.is_some_and(|(wave, _)| wave != this.0) {
                Some(format!("apply wave {}", this.0))
            } else if this.1 == waves::Class::Instance as u8 {
                Some("the managed instances".to_string())
            } else {
                None
            };
            if let Some(next) = next {
                if let Some(on) = unready(ctx, &prerequisites, &next).await? {
                    applied.waiting = Some(on);
                    return Ok(applied);
                }
                // Ready once: a later stage does not ask again.
                prerequisites.clear();
            }
            if !gates.is_empty() {
                // A type a CRD just defined is served now: its children's watch may start.
                ctx.kinds_changed.notify_one();
            }
            gates.clear();
            stage = Some(this);
        }
        let api_version = resource["apiVersion"].as_str().unwrap_or_default();
        let kind_name = resource["kind"].as_str().unwrap_or_default();
        let adopt = spec
            .managed_resources
            .iter()
            .any(|m| m.adopt && m.api_version == api_version && m.kind == kind_name);
        let one = match apply_one(ctx, cr, index, resource, owned, adopt).await {
            // Established, but discovery does not show the new type yet: a moment later it does.
            Err(ChildError::Kind(e)) if types.brought(api_version, kind_name) => {
                applied.waiting = Some(format!("waiting for the API server to serve {e}"));
                return Ok(applied);
            }
            result => result?,
        };
        applied.written += usize::from(one.written.is_some());
        applied.keys.insert(one.key.clone());
        applied.children.push(AppliedChild {
            index,
            api_version: api_version.to_string(),
            key: one.key.clone(),
            // Kept only for a child whose readiness is judged on it: the rest are current
            // once applied, and converting every written object would cost each pass.
            object: one
                .written
                .as_ref()
                .filter(|_| readiness::judged_on_object(spec, resource))
                .and_then(|o| serde_json::to_value(o).ok()),
        });
        if waves::defines_types(api_version, kind_name) {
            gates.push(Gate {
                key: one.key,
                kind: one.kind,
                written: one.written,
            });
        } else if this.1 != waves::Class::Foundation as u8 && readiness::reads_status(resource) {
            prerequisites.push(Prerequisite {
                key: one.key,
                kind: one.kind,
                written: one.written,
            });
        }
    }
    Ok(applied)
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

/// One child an apply covered.
struct One {
    key: ChildKey,
    kind: Kind,
    /// The object as written; `None` when it was already as desired.
    written: Option<DynamicObject>,
}

/// Applies one child unless it is already as desired. An owned child that exists without
/// the CR's owner label is refused ([`ChildError::Conflict`]) unless `adopt`.
async fn apply_one(
    ctx: &Ctx,
    cr: &DynamicObject,
    index: usize,
    resource: &Value,
    owned: bool,
    adopt: bool,
) -> Result<One, ChildError> {
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
    // is someone else's, and one the cache lacks (or a cache that has not listed yet, such
    // as a kind watched only since a CRD child defined it) may still exist — ask, and judge
    // what the server answers as a cached child would be judged.
    let current: Option<Arc<PartialObjectMeta<DynamicObject>>> = match live {
        Some(Some(child)) => Some(child),
        _ if owned || create_only => api
            .get_metadata_opt(&name)
            .await
            .map_err(|e| err("reading", e))?
            .map(Arc::new),
        _ => None,
    };
    let holder = current.as_ref().map(|c| owner_of(&c.metadata));
    if create_only && holder.is_some() {
        return Ok(One {
            key,
            kind,
            written: None,
        });
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
    if let Some(child) = current.as_deref().filter(|_| owned) {
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
            return Ok(One {
                key,
                kind,
                written: None,
            });
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
    Ok(One {
        key,
        kind,
        written: Some(written),
    })
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
