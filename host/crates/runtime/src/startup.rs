//! The checks before a controller starts: the host's permissions, the Blueprint's CRDs,
//! and the kinds each CRD's CRs may own.

use std::collections::HashSet;

use inrun_pass::waves;
use inrun_reconcilers::assemble::Assembly;
use inrun_reconcilers::plan::CrdPlan;

use crate::shared::Shared;
use crate::{access, crds, kinds};

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The host's identity lacks permissions the Blueprint needs.
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// A CRD is missing or could not be installed.
    #[error(transparent)]
    Crd(#[from] crds::CrdError),
    /// A kind in `managedResources` is not served by the API server.
    #[error("{field}")]
    ManagedKind {
        /// Where the kind is named.
        field: String,
        /// Why.
        #[source]
        source: kinds::UnknownKind,
    },
    /// The Blueprint names an identity this entry point cannot assume.
    #[error(
        "the Blueprint acts as ServiceAccount {0} (spec.serviceAccount); serve it through the fleet (`inrun run`), which impersonates it"
    )]
    Identity(inrun_blueprint::ServiceAccountRef),
}

/// The kinds one CRD's CRs may own.
#[derive(Debug, Clone, Default)]
pub struct CrdKinds {
    /// Kinds the API server serves: their children are watched from the start.
    pub served: Vec<kinds::Kind>,
    /// Kinds (apiVersion, kind) it does not serve yet — typically defined by a CRD a
    /// Result creates: their children are watched once it does.
    pub pending: Vec<(String, String)>,
}

/// The kinds each CRD's CRs may own, in `assembly.crds()` order.
pub type ChildKinds = Vec<CrdKinds>;

/// Checks what `assembly` needs before a controller starts: the host's permissions, its
/// CRDs (installed when `install_crds`), and every managed kind. A kind the API server
/// does not serve yet is accepted with a warning (a CRD among the CR's children may define
/// it): its watch starts when it is served. Returns the kinds each CRD's CRs may own.
///
/// # Errors
/// [`RunError`] naming what is missing.
pub async fn prepare(
    shared: &Shared,
    assembly: &Assembly,
    install_crds: bool,
) -> Result<ChildKinds, RunError> {
    let client = &shared.client;
    let needed = permissions(shared, assembly, install_crds);
    access::check(client, shared.identity.as_ref(), &needed).await?;
    // The identity locks and rollout records are the host's own, whoever the Blueprint
    // acts as: checked as the host, in the namespace it keeps them in.
    if let Some(locks) = &shared.locks
        && let Some(p) =
            inrun_generate::rbac::lock_permission(&assembly.blueprint, locks.namespace())
    {
        access::check(&locks.host_client(), None, &[p]).await?;
    }
    let specs: Vec<_> = assembly.crds().iter().map(|c| &c.spec).collect();
    let on_breaking = if assembly.blueprint.spec.allow_breaking_schema_changes {
        crds::OnBreaking::Install
    } else {
        crds::OnBreaking::Refuse {
            instance: &shared.instance,
        }
    };
    crds::ensure(client, &specs, shared.install(install_crds), on_breaking).await?;
    let mut all = Vec::new();
    for plan in assembly.crds() {
        all.push(child_kinds(shared, plan).await?);
    }
    Ok(all)
}

/// The permissions checked before `assembly` is served by `shared`'s identity.
fn permissions(
    shared: &Shared,
    assembly: &Assembly,
    install_crds: bool,
) -> Vec<inrun_generate::rbac::Permission> {
    let options = inrun_generate::rbac::RbacOptions {
        install_crds,
        ..Default::default()
    };
    match &shared.identity {
        // A tenant's ServiceAccount is checked for reading its kinds cluster-wide (the
        // watches are) and for its CRDs. Where it may write is its RBAC's business,
        // enforced on every write: a refused one fails that CR's pass with `Forbidden`.
        Some(_) => inrun_generate::rbac::tenant_required(&assembly.blueprint, &[], &options)
            .into_iter()
            .filter_map(|mut p| {
                if p.resource != "customresourcedefinitions" {
                    p.verbs
                        .retain(|v| ["get", "list", "watch"].contains(&v.as_str()));
                }
                (!p.verbs.is_empty()).then_some(p)
            })
            .collect(),
        // The Lease is checked by the leader elector, which knows its namespace; the
        // rest, namespaced grants too (children written where the Blueprint bounds them,
        // the Secrets it names), is checked here.
        None => inrun_generate::rbac::required(&assembly.blueprint, &options)
            .into_iter()
            .filter(|p| p.resource != "leases")
            .collect(),
    }
}

/// Every kind the CRs of `plan`'s CRD may own, from every reconcile block: served, or
/// (a kind a CRD may define later) pending.
///
/// # Errors
/// [`RunError::ManagedKind`] for a kind that is not served and never will be.
async fn child_kinds(shared: &Shared, plan: &CrdPlan) -> Result<CrdKinds, RunError> {
    let mut child_kinds = CrdKinds::default();
    let mut seen = HashSet::new();
    let blocks = std::iter::once((plan.spec.source.field() + ".reconcile", &plan.default)).chain(
        plan.targets.iter().map(|(t, p)| {
            (
                format!("{}.serve.targets[{t}]", plan.spec.source.field()),
                p,
            )
        }),
    );
    for (field, block) in blocks {
        for (i, m) in block.spec.managed_resources.iter().enumerate() {
            if !seen.insert((m.api_version.clone(), m.kind.clone())) {
                continue;
            }
            let at = || {
                format!(
                    "{}: crd {}: {field}.managedResources[{i}]",
                    plan.spec.source.file.display(),
                    plan.spec.kind
                )
            };
            match shared
                .kinds
                .resolve(&shared.client, &m.api_version, &m.kind)
                .await
            {
                Ok(kind) => child_kinds.served.push(kind),
                // A kind of a group with a dot may be a CRD's, created later (by a
                // Result, or by anyone); a built-in group's kind never appears, so a
                // typo there is still refused.
                Err(e) if e.not_served() && may_be_defined_later(&m.api_version) => {
                    let defined_here = block
                        .spec
                        .managed_resources
                        .iter()
                        .any(|c| waves::defines_types(&c.api_version, &c.kind));
                    tracing::warn!(
                        at = %at(),
                        kind = %format!("{} {}", m.api_version, m.kind),
                        defined_here,
                        "the API server does not serve this kind yet; its children are watched once it does"
                    );
                    child_kinds
                        .pending
                        .push((m.api_version.clone(), m.kind.clone()));
                }
                Err(source) => {
                    return Err(RunError::ManagedKind {
                        field: at(),
                        source,
                    });
                }
            }
        }
    }
    Ok(child_kinds)
}

/// Whether a kind of `api_version` may be served later: its group could be a CRD's (it
/// has a dot; the built-in groups without one, core included, never gain kinds).
fn may_be_defined_later(api_version: &str) -> bool {
    inrun_contract::api_version::group_of(api_version).contains('.')
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_kinds_of_groups_a_crd_could_define_are_waited_for() {
        assert!(super::may_be_defined_later("parts.example.com/v1"));
        assert!(super::may_be_defined_later("gateway.networking.k8s.io/v1"));
        assert!(!super::may_be_defined_later("v1"), "core");
        assert!(!super::may_be_defined_later("apps/v1"));
    }
}
