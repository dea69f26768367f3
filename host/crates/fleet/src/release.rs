//! Letting go of the CRs no controller will serve again: when a tenant is removed (its
//! Blueprint resource deleted, its file gone) or a reload drops a CRD from its Blueprint,
//! the host's finalizers on that CRD's CRs would hold each one, and every namespace
//! holding one, in Terminating forever. The controller stopped, [`release`] removes them:
//! children stay (owner references still garbage-collect them with their CR), a package's
//! infrastructure stays but its identity lock goes (no one would renew it, and the
//! infrastructure is no longer managed), and a CR already being deleted goes now, with a
//! warning event saying that its cleanup did not run.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;

use inrun_blueprint::{CrdSpec, RuntimeSpec};
use inrun_pass::{Reason, infrastructure, meta};
use inrun_runtime::events::Events;

/// What the host does with the finalizers of CRs no tenant serves any more
/// (`--on-tenant-removal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRemoval {
    /// Remove them, so nothing waits on a controller that will not come back.
    #[default]
    Release,
    /// Leave them: the CRs wait for a tenant serving their CRD again (deleting one, or its
    /// namespace, hangs until then).
    Keep,
}

impl std::str::FromStr for OnRemoval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "release" => Ok(OnRemoval::Release),
            "keep" => Ok(OnRemoval::Keep),
            other => Err(format!("`{other}`: expected `release` or `keep`")),
        }
    }
}

/// How many CRs a release changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// CRs whose finalizers were removed.
    pub released: usize,
    /// Of them, CRs already being deleted (they go now, their cleanup not run).
    pub deleting: usize,
    /// Package CRs whose identity lock was let go.
    pub unclaimed: usize,
}

/// The finalizers the host may have put on a CR of a CRD with `runtime`: its own, the
/// package's, and `runtime.finalizers.names`.
fn ours(runtime: &RuntimeSpec) -> Vec<String> {
    let mut names = meta::finalizers(runtime);
    names.push(infrastructure::FINALIZER.to_string());
    names
}

/// Whether `cr` carries one of `names`.
fn holds(cr: &DynamicObject, names: &[String]) -> bool {
    cr.finalizers().iter().any(|f| names.contains(f))
}

/// Removes the host's finalizers from every CR of `crd` (served with `runtime`) that
/// carries one, acting as `shared` does; each CR already being deleted gets a `Released`
/// warning event. Its controller must have stopped, or its next pass puts them back.
/// Finalizers of others stay.
///
/// # Errors
/// When the CRs cannot be listed; a CR that cannot be changed is logged and skipped.
pub async fn release(
    shared: &inrun_runtime::Shared,
    crd: &CrdSpec,
    runtime: &RuntimeSpec,
    why: &str,
) -> Result<Released, kube::Error> {
    let client = &shared.client;
    let events = Events::new(client.clone(), shared.instance.clone());
    let resource = inrun_runtime::kinds::cr_resource(crd);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let names = ours(runtime);
    let mut done = Released::default();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        if let Some(locks) = &shared.locks {
            done.unclaimed += unclaim(locks, &page.items).await;
        }
        for cr in page.items.iter().filter(|cr| holds(cr, &names)) {
            match let_go(client, &resource, cr).await {
                Ok(()) => {
                    // Best effort, as a CR that cannot be changed: only `kill` acts here.
                    let _ = inrun_pass::failpoint::hit(inrun_pass::failpoint::CRD_RELEASED);
                    done.released += 1;
                    if cr.metadata.deletion_timestamp.is_some() {
                        done.deleting += 1;
                        let on = reference(&resource, cr);
                        let note = format!(
                            "{why}: the host's finalizers were removed without its cleanup; \
                             children go with the CR through their owner references, anything \
                             else it created stays"
                        );
                        events.record(&on, Reason::Released, note).await;
                    }
                }
                Err(e) => tracing::warn!(
                    crd = %crd.crd_name(), cr = %cr.name_any(), error = %e,
                    "could not remove the host's finalizers from a CR no tenant serves"
                ),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(done)
}

/// The boundary and identity hash a package CR stores in its status: what it claimed.
fn claimed(cr: &DynamicObject) -> Option<(&str, &str)> {
    let status = cr.data.get("status")?;
    Some((
        status.get("boundary")?.as_str()?,
        status.get("identity")?.as_str()?,
    ))
}

/// Lets go of the identity locks `crs` hold (each one's, named by what its status stores);
/// returns how many were let go or already free. A lock that cannot be let go is logged: it
/// goes stale, unrenewed, after its duration.
async fn unclaim(locks: &inrun_runtime::locks::IdentityLocks, crs: &[DynamicObject]) -> usize {
    let mut done = 0;
    for cr in crs {
        let (Some((boundary, identity)), Some(uid)) = (claimed(cr), cr.metadata.uid.as_deref())
        else {
            continue;
        };
        match locks.release(boundary, identity, uid).await {
            Ok(()) => done += 1,
            Err(e) => tracing::warn!(cr = %cr.name_any(), error = %e,
                "could not let go of the identity lock of a CR no tenant serves; it goes stale unrenewed"),
        }
    }
    done
}

/// Empties the finalizers the host's finalizer manager owns on `cr` (the managed-by label
/// stays until the CR goes).
async fn let_go(
    client: &Client,
    resource: &ApiResource,
    cr: &DynamicObject,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = match cr.metadata.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut metadata = json!({
        "name": cr.name_any(),
        "uid": cr.metadata.uid,
        "finalizers": [],
        "labels": { meta::MANAGED_BY.0: meta::MANAGED_BY.1 },
    });
    if let Some(ns) = &cr.metadata.namespace {
        metadata["namespace"] = json!(ns);
    }
    let patch = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
    });
    match api
        .patch(
            &cr.name_any(),
            &PatchParams::apply(meta::FINALIZER_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone meanwhile (409: its uid no longer exists).
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

fn reference(resource: &ApiResource, cr: &DynamicObject) -> ObjectReference {
    ObjectReference {
        api_version: Some(resource.api_version.clone()),
        kind: Some(resource.kind.clone()),
        name: cr.metadata.name.clone(),
        namespace: cr.metadata.namespace.clone(),
        uid: cr.metadata.uid.clone(),
        resource_version: cr.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_reads_release_or_keep_and_names_what_it_expects() {
        assert_eq!("release".parse(), Ok(OnRemoval::Release));
        assert_eq!("keep".parse(), Ok(OnRemoval::Keep));
        assert_eq!(OnRemoval::default(), OnRemoval::Release);
        let e = "orphan".parse::<OnRemoval>().unwrap_err();
        assert!(e.contains("`release` or `keep`"), "{e}");
    }

    #[test]
    fn a_package_crs_claim_is_what_its_status_stores() {
        let mut cr = DynamicObject::new(
            "x",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        assert_eq!(claimed(&cr), None);
        cr.data = json!({"status": {"boundary": "http://db:5432", "identity": "ab12"}});
        assert_eq!(claimed(&cr), Some(("http://db:5432", "ab12")));
        cr.data = json!({"status": {"boundary": "http://db:5432"}});
        assert_eq!(claimed(&cr), None, "nothing claimed without the identity");
    }

    #[test]
    fn the_hosts_finalizers_are_its_own_the_packages_and_the_blueprints_names() {
        let mut runtime = RuntimeSpec::default();
        runtime.finalizers.names = vec!["example.com/drain".into()];
        let names = ours(&runtime);
        for f in [
            "inrun.dev/cleanup",
            "inrun.dev/infrastructure",
            "example.com/drain",
        ] {
            assert!(names.iter().any(|n| n == f), "{f} in {names:?}");
        }
        let mut cr = DynamicObject::new(
            "x",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        cr.metadata.finalizers = Some(vec!["example.com/other".into()]);
        assert!(!holds(&cr, &names), "another's finalizer is not ours");
        cr.metadata.finalizers = Some(vec!["example.com/other".into(), "inrun.dev/cleanup".into()]);
        assert!(holds(&cr, &names));
    }
}
