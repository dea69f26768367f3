//! The deletion safeguard for managed types: a CR whose children define types (CRDs, and
//! APIServices) or whose reconcile block names `managedTypes` is not released while
//! *foreign* instances of those types exist (ones without the CR's owner label). Deleting
//! the CRD, or the operator that serves the instances' finalizers, would leave them behind
//! with finalizers no controller remains to process.

use std::collections::HashSet;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery, verbs};
use serde_json::Value;

use super::children::{ChildError, Listed};
use super::context::Ctx;
use inrun_blueprint::ManagedType;
use inrun_pass::ChildKey;
use inrun_pass::meta::OWNER_UID;
use inrun_pass::waves;

/// How many foreign instances a message names.
const NAMED: u32 = 3;

/// Foreign instances of one managed type.
#[derive(Debug, Clone)]
pub struct Foreign {
    /// The type's kind.
    pub kind: String,
    /// The child that defines the type (a CRD or an APIService); `None` for a type named
    /// in `managedTypes`.
    pub source: Option<ChildKey>,
    /// How many there are, as far as the API server tells (at least the names).
    pub count: String,
    /// The first few, as `namespace/name` or `name`.
    pub names: Vec<String>,
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}: {})",
            self.kind,
            self.count,
            self.names.join(", ")
        )
    }
}

/// The foreign instances, described for status and events.
pub fn describe(found: &[Foreign]) -> String {
    found
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the CR's deletion must wait, as a status message.
pub fn message(found: &[Foreign]) -> String {
    format!(
        "deletion blocked: foreign instances of managed types exist ({}); delete them first",
        describe(found)
    )
}

/// A managed type whose instances could not be listed.
#[derive(Debug)]
pub struct Unchecked {
    /// The type's kind (or the declared types, when discovery failed).
    pub kind: String,
    /// The child that defines the type; `None` for types named in `managedTypes`.
    pub source: Option<ChildKey>,
    /// Why.
    pub error: ChildError,
}

/// What the safeguard found: foreign instances, and types it could not check.
#[derive(Debug, Default)]
pub struct Found {
    /// Types with foreign instances.
    pub foreign: Vec<Foreign>,
    /// Types whose instances could not be listed.
    pub unchecked: Vec<Unchecked>,
}

impl Found {
    /// The foreign instances, or the first type that could not be checked.
    ///
    /// # Errors
    /// The [`ChildError`] of the first type that could not be checked.
    pub fn checked(self) -> Result<Vec<Foreign>, ChildError> {
        match self.unchecked.into_iter().next() {
            Some(u) => Err(u.error),
            None => Ok(self.foreign),
        }
    }
}

/// The types `children` define and `declared` names, with foreign instances of each (none
/// listed for a type that has none); a type whose instances cannot be listed (other than
/// one that is not served, which has no instances to protect) is told apart in
/// [`Found::unchecked`], so that a forced release can spare what it could not check.
pub(crate) async fn foreign(
    ctx: &Ctx,
    cr: &DynamicObject,
    children: &[&Listed],
    declared: &[ManagedType],
) -> Found {
    let mut found = Found::default();
    let (mut types, aggregated) = defined_types(ctx, children, &mut found.unchecked).await;
    let declared: Vec<ManagedType> = declared
        .iter()
        .filter(|t| t.is_pattern() || !aggregated.contains(&t.group))
        .cloned()
        .collect();
    if !declared.is_empty() {
        match declared_types(ctx, &declared).await {
            Ok(declared) => types.extend(declared.into_iter().map(|t| (t, None))),
            Err(error) => found.unchecked.push(Unchecked {
                kind: "the types named in managedTypes".into(),
                source: None,
                error,
            }),
        }
    }
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let mut seen = HashSet::new();
    for (ty, source) in types {
        if !seen.insert((ty.api_version.clone(), ty.kind.clone())) {
            continue;
        }
        match instances(&ctx.client, &uid, &ty).await {
            Ok(None) => {}
            Ok(Some((count, names))) => found.foreign.push(Foreign {
                kind: ty.kind.clone(),
                source,
                count,
                names,
            }),
            Err(error) => found.unchecked.push(Unchecked {
                kind: ty.kind.clone(),
                source,
                error,
            }),
        }
    }
    found
}

/// The foreign instances of the types `child` defines (a CRD, or an available
/// APIService, as the API server returns it), which hold the deletion of the CR `uid` —
/// judged as the host judges them before it releases the CR, for `inrun trace`. A type the
/// API server does not serve has none; an unavailable APIService's types cannot be
/// reached, so none are asked for.
///
/// # Errors
/// [`ChildError`] when an APIService's types or a type's instances cannot be listed.
pub async fn foreign_instances(
    client: &Client,
    uid: &str,
    child: &Value,
) -> Result<Vec<Foreign>, ChildError> {
    let api_version = child["apiVersion"].as_str().unwrap_or_default();
    let kind = child["kind"].as_str().unwrap_or_default();
    let types = if !waves::defines_types(api_version, kind) {
        Vec::new()
    } else if kind == waves::CRD.1 {
        served_type(child).into_iter().collect()
    } else if available(child) {
        let name = child.pointer("/metadata/name").and_then(Value::as_str);
        api_service_types(client, name.unwrap_or_default(), child).await?
    } else {
        Vec::new()
    };
    let mut found = Vec::new();
    for ty in types {
        if let Some((count, names)) = instances(client, uid, &ty).await? {
            found.push(Foreign {
                kind: ty.kind,
                source: None,
                count,
                names,
            });
        }
    }
    Ok(found)
}

/// The types `children` define, each with the child that defines it (a CRD's, and an
/// available APIService's as discovery tells them; one whose types could not be asked is
/// added to `unchecked`), and the groups an unavailable APIService among them serves: no
/// instance of those can be reached, and asking (through the API server) would only wait;
/// `managedTypes` naming them is not asked either.
async fn defined_types(
    ctx: &Ctx,
    children: &[&Listed],
    unchecked: &mut Vec<Unchecked>,
) -> (Vec<(ApiResource, Option<ChildKey>)>, Vec<String>) {
    let mut types = Vec::new();
    let mut aggregated = Vec::new();
    for child in children {
        let (api_version, kind) = (
            child.kind.resource.api_version.as_str(),
            child.kind.resource.kind.as_str(),
        );
        if !waves::defines_types(api_version, kind) {
            continue;
        }
        if kind == waves::CRD.1 {
            types.extend(served_type(&child.obj.data).map(|t| (t, Some(child.key.clone()))));
        } else if !available(&child.obj.data) {
            if let Some(group) = child
                .obj
                .data
                .pointer("/spec/group")
                .and_then(Value::as_str)
            {
                aggregated.push(group.to_string());
            }
        } else {
            match api_service_types(&ctx.client, &child.key.name, &child.obj.data).await {
                Ok(served) => {
                    types.extend(served.into_iter().map(|t| (t, Some(child.key.clone()))));
                }
                // Available, but its types could not be asked: unchecked, never "none".
                Err(error) => unchecked.push(Unchecked {
                    kind: format!("the types of APIService {}", child.key.name),
                    source: Some(child.key.clone()),
                    error,
                }),
            }
        }
    }
    (types, aggregated)
}

/// The instances of `ty` not labelled as the CR's of `uid`, if any: how many (as far as
/// the API server tells) and the first few names (`namespace/name` or `name`, then "and
/// more" when there are). A type the API server no longer serves has none.
///
/// # Errors
/// [`ChildError::Api`] when they cannot be listed.
async fn instances(
    client: &Client,
    uid: &str,
    ty: &ApiResource,
) -> Result<Option<(String, Vec<String>)>, ChildError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ty);
    // `!=` also matches objects without the label at all.
    let params = ListParams::default()
        .labels(&format!("{OWNER_UID}!={uid}"))
        .limit(NAMED);
    let list = match api.list(&params).await {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(error) => {
            return Err(ChildError::Api {
                action: "listing",
                child: format!("instances of {}", ty.kind),
                error,
            });
        }
    };
    if list.items.is_empty() {
        return Ok(None);
    }
    let more = list
        .metadata
        .continue_
        .as_deref()
        .is_some_and(|c| !c.is_empty());
    let mut names: Vec<String> = list
        .items
        .iter()
        .map(|o| {
            let name = o.metadata.name.as_deref().unwrap_or_default();
            match &o.metadata.namespace {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_string(),
            }
        })
        .collect();
    let count = match list.metadata.remaining_item_count {
        Some(rest) => (names.len() as i64 + rest).to_string(),
        None if more => format!("{} or more", names.len()),
        None => names.len().to_string(),
    };
    if more {
        names.push("and more".into());
    }
    Ok(Some((count, names)))
}

/// How long discovery through the API server may take here: it may be proxied to an
/// aggregated API's backend, which need not answer at all.
const ASK_AGGREGATED: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether an APIService says it is `Available`.
fn available(api_service: &Value) -> bool {
    api_service
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True")
}

/// The kinds an available APIService's group/version serves that can be listed.
///
/// # Errors
/// When they cannot be asked in time: the API server proxies this to the aggregated API's
/// backend, which would otherwise hold the pass as long as the request lasts.
async fn api_service_types(
    client: &Client,
    name: &str,
    api_service: &Value,
) -> Result<Vec<ApiResource>, ChildError> {
    let text = |p: &str| api_service.pointer(p).and_then(Value::as_str);
    let (Some(group), Some(version)) = (text("/spec/group"), text("/spec/version")) else {
        return Ok(Vec::new());
    };
    let gv = format!("{group}/{version}");
    let asked = tokio::time::timeout(ASK_AGGREGATED, client.list_api_group_resources(&gv)).await;
    let Ok(asked) = asked else {
        return Err(ChildError::ServedTypesTimedOut {
            api_service: name.to_string(),
            served: gv,
            within: ASK_AGGREGATED,
        });
    };
    let list = asked.map_err(|source| ChildError::ServedTypes {
        api_service: name.to_string(),
        served: gv.clone(),
        source,
    })?;
    Ok(list
        .resources
        .iter()
        .filter(|r| !r.name.contains('/') && r.verbs.iter().any(|v| v == verbs::LIST))
        .map(|r| ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: gv.clone(),
            kind: r.kind.clone(),
            plural: r.name.clone(),
        })
        .collect())
}

/// The served types `declared` names (wildcards resolved against discovery).
async fn declared_types(
    ctx: &Ctx,
    declared: &[ManagedType],
) -> Result<Vec<ApiResource>, ChildError> {
    let mut discovery = Discovery::new(ctx.client.clone());
    if declared.iter().all(|t| !t.is_pattern()) {
        let groups: Vec<&str> = declared.iter().map(|t| t.group.as_str()).collect();
        discovery = discovery.filter(&groups);
    }
    let discovery = match tokio::time::timeout(ASK_AGGREGATED, discovery.run()).await {
        Ok(run) => run.map_err(ChildError::Discovery)?,
        Err(_) => {
            return Err(ChildError::DiscoveryTimedOut {
                within: ASK_AGGREGATED,
            });
        }
    };
    let mut types = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.supports_operation(verbs::LIST)
                && declared.iter().any(|t| t.matches(&ar.group, &ar.kind))
            {
                types.push(ar);
            }
        }
    }
    Ok(types)
}

/// The type a CRD defines, at a version the API server serves (the storage version when
/// it is served).
pub fn served_type(crd: &Value) -> Option<ApiResource> {
    let spec = crd.get("spec")?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let group = text(spec, "group")?;
    let names = spec.get("names")?;
    let versions = spec.get("versions")?.as_array()?;
    let served = |v: &&Value| v.get("served").and_then(Value::as_bool) == Some(true);
    let version = versions
        .iter()
        .filter(served)
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| versions.iter().find(served))?;
    let version = text(version, "name")?;
    Some(ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version,
        kind: text(names, "kind")?,
        plural: text(names, "plural")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(versions: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Gadget", "plural": "gadgets"},
                     "scope": "Namespaced", "versions": versions},
        })
    }

    #[test]
    fn served_type_prefers_the_served_storage_version() {
        let ar = served_type(&crd(json!([
            {"name": "v1alpha1", "served": true, "storage": false},
            {"name": "v1", "served": true, "storage": true},
        ])))
        .expect("type");
        assert_eq!(
            (
                ar.api_version.as_str(),
                ar.kind.as_str(),
                ar.plural.as_str()
            ),
            ("example.com/v1", "Gadget", "gadgets")
        );
    }

    #[test]
    fn served_type_falls_back_to_a_served_version_and_needs_one() {
        let ar = served_type(&crd(json!([
            {"name": "v1", "served": false, "storage": true},
            {"name": "v2", "served": true, "storage": false},
        ])))
        .expect("type");
        assert_eq!(ar.version, "v2");
        assert!(
            served_type(&crd(
                json!([{"name": "v1", "served": false, "storage": true}])
            ))
            .is_none()
        );
    }

    #[test]
    fn a_message_names_each_type_with_its_count_and_first_instances() {
        let found = [
            Foreign {
                kind: "Gadget".into(),
                source: None,
                count: "1".into(),
                names: vec!["team-a/theirs".into()],
            },
            Foreign {
                kind: "Widget".into(),
                source: None,
                count: "7".into(),
                names: vec!["a".into(), "b".into(), "c".into(), "and more".into()],
            },
        ];
        assert_eq!(
            message(&found),
            "deletion blocked: foreign instances of managed types exist (Gadget (1: team-a/theirs); Widget (7: a, b, c, and more)); delete them first"
        );
    }
}
