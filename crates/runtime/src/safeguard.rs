//! The deletion safeguard for managed types: a CR whose children include
//! CustomResourceDefinitions is not released while *foreign* instances of those types
//! exist (ones without the CR's owner label). Deleting the CRD would leave them behind,
//! often with finalizers no controller remains to process.

use std::collections::HashSet;

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::Value;

use super::children::{self, ChildError};
use super::context::Ctx;
use inrun_blueprint::ReconcileSpec;
use inrun_pass::meta::OWNER_UID;

/// How many foreign instances a message names.
const NAMED: u32 = 3;

const CRD_API_VERSION: &str = "apiextensions.k8s.io/v1";
const CRD_KIND: &str = "CustomResourceDefinition";

/// Why the CR's deletion must wait, if it must: the foreign instances of its CRD children,
/// named in a message for status and events. CRDs in `prune.keep` are not deleted, so
/// they guard nothing.
///
/// Only CRDs are managed types here; APIServices, and extra types declared in the
/// Blueprint, are not covered yet.
///
/// # Errors
/// [`ChildError`] when listing the CRDs or their instances fails (other than a type that
/// is not served, which has no instances to protect).
pub async fn foreign_instances(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &ReconcileSpec,
) -> Result<Option<String>, ChildError> {
    let guarded = spec.managed_resources.iter().any(|m| {
        m.api_version == CRD_API_VERSION
            && m.kind == CRD_KIND
            && !spec.prune.keeps(&m.api_version, &m.kind)
    });
    if !guarded {
        return Ok(None);
    }
    let kind = ctx
        .kinds
        .resolve(&ctx.client, CRD_API_VERSION, CRD_KIND)
        .await?;
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for crd in children::list_owned(ctx, cr, &kind).await? {
        let Some(instances) = served_type(&crd) else {
            continue;
        };
        if !seen.insert(instances.api_version.clone() + "/" + &instances.kind) {
            continue;
        }
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &instances);
        // `!=` also matches objects without the label at all.
        let params = ListParams::default()
            .labels(&format!("{OWNER_UID}!={uid}"))
            .limit(NAMED);
        let list = match api.list(&params).await {
            Ok(list) => list,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(error) => {
                return Err(ChildError::Api {
                    action: "listing",
                    child: format!("instances of {}", instances.kind),
                    error,
                });
            }
        };
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
        if names.is_empty() {
            continue;
        }
        if more {
            names.push("and more".into());
        }
        found.push(format!("{} {}", instances.kind, names.join(", ")));
    }
    Ok((!found.is_empty()).then(|| {
        format!(
            "deletion blocked: foreign instances of managed types exist ({}); delete them first",
            found.join("; ")
        )
    }))
}

/// The type a CRD defines, at a version the API server serves (the storage version when
/// it is served).
fn served_type(crd: &DynamicObject) -> Option<ApiResource> {
    let spec = crd.data.get("spec")?;
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

    fn crd(versions: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": CRD_API_VERSION, "kind": CRD_KIND,
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Gadget", "plural": "gadgets"},
                     "scope": "Namespaced", "versions": versions},
        }))
        .expect("crd")
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
}
