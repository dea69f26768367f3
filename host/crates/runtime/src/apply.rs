//! Applying a CR's children: server-side apply (field manager `inrun-reconciler`, forced)
//! in waves, owned and labelled — and only when the desired object differs from what the
//! host last applied or the child drifted.
//!
//! Adoption is explicit: an existing object the CR does not own (no `inrun.dev/owner-uid`
//! of its uid) is never taken over unless its `managedResources` entry says `adopt: true`.

use std::sync::Arc;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use super::children::{ChildError, api_for, id_of};
use super::context::Ctx;
use super::kinds::Kind;
use super::stores;
use inrun_contract::CREATE_ONLY_ANNOTATION;
use inrun_contract::api_version::group_of;
use inrun_pass::meta::{APPLIED_HASH, OWNER_UID, RECONCILER_MANAGER};
use inrun_pass::{Applied, AppliedChild, ChildKey, failpoint, readiness, waves};

/// Whether the children a pass applies are the CR's: labelled with its uid (and, in its
/// namespace, referenced to it), and refused where another holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The CR's children.
    Owned,
    /// Applied for the CR, not owned by it (no owner label or reference).
    Unowned,
}

/// What an owned child gets when an object of its name exists that the CR does not own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stranger {
    /// It is left alone, and the apply fails ([`ChildError::Conflict`]).
    Refuse,
    /// It is taken over (`adopt: true` on its `managedResources` entry).
    Adopt,
}

/// An apply stage: its wave and its class ([`waves::apply_stage`]).
type Stage = (i32, u8);

/// A CRD or APIService applied in an earlier stage, which later stages wait for.
struct WaveGate {
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
async fn closed(ctx: &Ctx, gates: &[WaveGate]) -> Result<Option<String>, ChildError> {
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

/// Applies every resource for `cr` in apply waves ([`waves`]); an [`Ownership::Owned`]
/// child gets the owner label and, in the CR's namespace, a controller owner reference. A
/// child already as desired is not written. A stage whose CRDs are not `Established`
/// (APIServices not `Available`) yet ends the apply, and so does a stage of managed
/// instances while a status-reading child of an earlier stage (the operator's Deployment)
/// is not ready: [`Applied::waiting`] says what for, and a later pass goes on — nothing
/// here waits.
///
/// # Errors
/// [`ChildError`] for the first resource that could not be applied.
pub async fn apply(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
    resources: &[Value],
    ownership: Ownership,
) -> Result<Applied, ChildError> {
    let types = waves::ManagedTypes::of(resources, &spec.managed_types);
    let order = in_stages(resources, &types)?;
    ctx.children.ready().await;
    let mut applied = Applied::default();
    let mut waits = Waits::default();
    let mut stage = None;
    for (this, index, resource) in order {
        if stage != Some(this) {
            if stage.is_some_and(|(wave, _)| wave != this.0) {
                failpoint::hit(failpoint::APPLY_WAVE)?;
            }
            if let Some(on) = waits.entering(ctx, stage, this).await? {
                applied.waiting = Some(on);
                return Ok(applied);
            }
            stage = Some(this);
        }
        let api_version = resource["apiVersion"].as_str().unwrap_or_default();
        let kind_name = resource["kind"].as_str().unwrap_or_default();
        let adopt = spec
            .managed_resources
            .iter()
            .any(|m| m.adopt && m.api_version == api_version && m.kind == kind_name);
        let stranger = if adopt {
            Stranger::Adopt
        } else {
            Stranger::Refuse
        };
        let one = match apply_one(ctx, cr, index, resource, ownership, stranger).await {
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
        waits.add(this, resource, one);
    }
    Ok(applied)
}

/// The resources in the order they are applied: by stage, then as the Result lists them.
///
/// # Errors
/// [`ChildError::Shape`] for a resource whose wave or delete annotations are not valid.
fn in_stages<'r>(
    resources: &'r [Value],
    types: &waves::ManagedTypes,
) -> Result<Vec<(Stage, usize, &'r Value)>, ChildError> {
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
        let stage = waves::apply_stage(wave, waves::class(api_version, kind, types));
        order.push((stage, index, r));
    }
    order.sort_by_key(|(stage, index, _)| (*stage, *index));
    Ok(order)
}

/// What later stages of one apply wait for: the CRDs and APIServices of the current
/// stage, and the status-reading children of earlier ones.
#[derive(Default)]
struct Waits {
    gates: Vec<WaveGate>,
    prerequisites: Vec<Prerequisite>,
}

impl Waits {
    /// Entering the stage `this` after `previous`: what it must wait for, if anything — a
    /// closed gate, or (for a new wave, or the managed instances) a prerequisite not ready.
    async fn entering(
        &mut self,
        ctx: &Ctx,
        previous: Option<Stage>,
        this: Stage,
    ) -> Result<Option<String>, ChildError> {
        if let Some(on) = closed(ctx, &self.gates).await? {
            return Ok(Some(on));
        }
        let next = if previous.is_some_and(|(wave, _)| wave != this.0) {
            Some(format!("apply wave {}", this.0))
        } else if this.1 == waves::Class::Instance as u8 {
            Some("the managed instances".to_string())
        } else {
            None
        };
        if let Some(next) = next {
            if let Some(on) = unready(ctx, &self.prerequisites, &next).await? {
                return Ok(Some(on));
            }
            // Ready once: a later stage does not ask again.
            self.prerequisites.clear();
        }
        if !self.gates.is_empty() {
            // A type a CRD just defined is served now: its children's watch may start.
            ctx.kinds_changed.notify_one();
        }
        self.gates.clear();
        Ok(None)
    }

    /// Keeps `one`, applied in stage `this`, if later stages wait for it.
    fn add(&mut self, this: Stage, resource: &Value, one: One) {
        let api_version = resource["apiVersion"].as_str().unwrap_or_default();
        let kind = resource["kind"].as_str().unwrap_or_default();
        if waves::defines_types(api_version, kind) {
            self.gates.push(WaveGate {
                key: one.key,
                kind: one.kind,
                written: one.written,
            });
        } else if this.1 != waves::Class::Foundation as u8 && readiness::reads_status(resource) {
            self.prerequisites.push(Prerequisite {
                key: one.key,
                kind: one.kind,
                written: one.written,
            });
        }
    }
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

/// One child an apply covered.
struct One {
    key: ChildKey,
    kind: Kind,
    /// The object as written; `None` when it was already as desired.
    written: Option<DynamicObject>,
}

impl One {
    /// A child left as it is.
    fn unwritten(shaped: Shaped) -> One {
        One {
            key: shaped.key,
            kind: shaped.kind,
            written: None,
        }
    }
}

/// Applies one child unless it is already as desired. An owned child that exists without
/// the CR's owner label is refused ([`ChildError::Conflict`]) unless adopted
/// ([`Stranger::Adopt`]).
async fn apply_one(
    ctx: &Ctx,
    cr: &DynamicObject,
    index: usize,
    resource: &Value,
    ownership: Ownership,
    stranger: Stranger,
) -> Result<One, ChildError> {
    let shaped = shape(ctx, cr, index, resource, ownership).await?;
    let current = current(ctx, &shaped, ownership).await?;
    let holder = current
        .as_ref()
        .map(|c| c.owner.as_deref().map(str::to_string));
    if shaped.create_only && holder.is_some() {
        return Ok(One::unwritten(shaped));
    }
    let uid = cr.metadata.uid.as_deref().unwrap_or_default();
    if ownership == Ownership::Owned
        && stranger == Stranger::Refuse
        && let Some(held) = holder.filter(|h| h.as_deref() != Some(uid))
    {
        return Err(ChildError::Conflict {
            child: shaped.key.to_string(),
            held: match held {
                Some(other) => format!("its {OWNER_UID} label names another CR, uid {other}"),
                None => format!("it has no {OWNER_UID} label"),
            },
        });
    }
    let hash = hash_of(&shaped.obj);
    if let Some(child) = current.as_deref().filter(|_| ownership == Ownership::Owned)
        && as_desired(ctx, cr, &shaped.key, hash, child)
    {
        return Ok(One::unwritten(shaped));
    }
    let written = patch(ctx, cr, &shaped, hash).await?;
    Ok(One {
        key: shaped.key,
        kind: shaped.kind,
        written: Some(written),
    })
}

/// A child as the host sends it.
struct Shaped {
    /// The object: its namespace set (or removed, for a cluster-scoped kind), the create-only
    /// annotation taken out, and for an owned child the owner label and reference added.
    obj: Value,
    key: ChildKey,
    kind: Kind,
    /// Whether it is created only, never updated ([`CREATE_ONLY_ANNOTATION`]).
    create_only: bool,
}

/// Shapes `resource` (the Result's `index`th) for `cr`: its kind resolved, its metadata
/// checked, its namespace the CR's unless it names one (none for a cluster-scoped kind),
/// and, [`Ownership::Owned`], the owner label and — in the CR's namespace, for a
/// namespaced CR — a controller owner reference.
async fn shape(
    ctx: &Ctx,
    cr: &DynamicObject,
    index: usize,
    resource: &Value,
    ownership: Ownership,
) -> Result<Shaped, ChildError> {
    let api_version = resource["apiVersion"].as_str().unwrap_or_default();
    let kind_name = resource["kind"].as_str().unwrap_or_default();
    let kind = ctx
        .kinds
        .resolve(&ctx.client, api_version, kind_name)
        .await?;
    check_shape(resource).map_err(|problem| ChildError::Shape { index, problem })?;
    let name = resource
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or(ChildError::NoName(index))?
        .to_string();
    let owner = Owner {
        resource: &ctx.cr_resource,
        namespaced: ctx.namespaced,
        uid: cr.metadata.uid.as_deref().unwrap_or_default(),
        name: cr.metadata.name.as_deref().unwrap_or_default(),
        namespace: cr.metadata.namespace.as_deref(),
    };
    let (obj, create_only) = shaped_object(
        resource,
        kind.namespaced,
        &owner,
        ownership == Ownership::Owned,
    );
    let namespace = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let key = ChildKey {
        group: group_of(api_version).to_string(),
        kind: kind_name.to_string(),
        namespace,
        name,
    };
    Ok(Shaped {
        obj,
        key,
        kind,
        create_only,
    })
}

/// The CR a child belongs to, as its marks name it.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The CR's resource.
    pub resource: &'a ApiResource,
    /// Whether CRs of its kind live in namespaces.
    pub namespaced: bool,
    /// The CR's uid.
    pub uid: &'a str,
    /// The CR's name.
    pub name: &'a str,
    /// The CR's namespace.
    pub namespace: Option<&'a str>,
}

/// `resource` as the host applies it for `owner`: its namespace the CR's unless it names
/// one (none for a kind that is not `namespaced`), the create-only annotation taken off
/// (and told), and, when `owned`, the owner label and — in the CR's namespace, for a
/// namespaced CR — a controller owner reference. `inrun plan`'s dry runs send what this
/// makes, so they are judged as the host's applies are.
pub fn shaped_object(
    resource: &Value,
    namespaced: bool,
    owner: &Owner<'_>,
    owned: bool,
) -> (Value, bool) {
    let mut obj = resource.clone();
    let namespace = if namespaced {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| owner.namespace.map(str::to_string));
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
        obj["metadata"]["labels"][OWNER_UID] = json!(owner.uid);
        let in_crs_namespace = namespace.is_some() && namespace.as_deref() == owner.namespace;
        if namespaced && in_crs_namespace && owner.namespaced {
            obj["metadata"]["ownerReferences"] = json!([{
                "apiVersion": owner.resource.api_version,
                "kind": owner.resource.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }]);
        }
    }
    (obj, create_only)
}

/// The child's metadata as it is now, where it matters: for an owned child, and for a
/// create-only one (to know whether it exists).
///
/// The cache holds only objects with an owner label: one whose label names another CR
/// is someone else's, and one the cache lacks (or a cache that has not listed yet, such
/// as a kind watched only since a CRD child defined it) may still exist — ask, and judge
/// what the server answers as a cached child would be judged.
async fn current(
    ctx: &Ctx,
    shaped: &Shaped,
    ownership: Ownership,
) -> Result<Option<Arc<stores::CachedChild>>, ChildError> {
    let owned = ownership == Ownership::Owned;
    let key = &shaped.key;
    let live = if owned {
        ctx.children
            .get(&shaped.kind, key.namespace.as_deref(), &key.name)
    } else {
        None
    };
    Ok(match live {
        Some(Some(child)) => Some(child),
        _ if owned || shaped.create_only => api_for(ctx, &shaped.kind, key.namespace.as_deref())
            .get_metadata_opt(&key.name)
            .await
            .map_err(|error| ChildError::Api {
                action: "reading",
                child: key.to_string(),
                error,
            })?
            // Read as the cache keeps it.
            .map(|child| Arc::new(stores::CachedChild::new(child))),
        _ => None,
    })
}

/// Whether the owned `child` is as desired: it carries the stamp of `hash`, nobody wrote
/// it since the host did (the version the host's apply returned, or no newer manager),
/// and it is not being deleted.
fn as_desired(
    ctx: &Ctx,
    cr: &DynamicObject,
    key: &ChildKey,
    hash: u64,
    child: &stores::CachedChild,
) -> bool {
    let stamped = child
        .stamp
        .as_deref()
        .is_some_and(|h| h == format!("{hash:016x}"));
    let same_version = child
        .metadata
        .resource_version
        .as_deref()
        .is_some_and(|rv| {
            ctx.triggers
                .applied_as(&Ctx::key(cr), &id_of(key), hash, rv)
        });
    stamped && (same_version || child.untouched) && child.metadata.deletion_timestamp.is_none()
}

/// Writes the child, stamped with `hash`, and records the version written, so that its
/// own watch event does not wake the CR.
async fn patch(
    ctx: &Ctx,
    cr: &DynamicObject,
    shaped: &Shaped,
    hash: u64,
) -> Result<DynamicObject, ChildError> {
    let key = &shaped.key;
    let mut obj = shaped.obj.clone();
    obj["metadata"]["annotations"][APPLIED_HASH] = json!(format!("{hash:016x}"));
    let written = api_for(ctx, &shaped.kind, key.namespace.as_deref())
        .patch(
            &key.name,
            &PatchParams::apply(RECONCILER_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|error| ChildError::Api {
            action: "applying",
            child: key.to_string(),
            error,
        })?;
    if let Some(rv) = &written.metadata.resource_version {
        ctx.triggers.applied(&Ctx::key(cr), &id_of(key), hash, rv);
    }
    Ok(written)
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
