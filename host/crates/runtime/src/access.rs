//! The startup access check: before any controller starts, the host asks the API server
//! (SelfSubjectAccessReview) whether its identity holds every permission the Blueprint
//! needs, so missing RBAC is one clear error instead of 403s in the middle of a reconcile.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use inrun_generate::rbac::Permission;

/// Why the host may not run the Blueprint.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The identity lacks permissions; each line names the verb, resource and reason.
    #[error(
        "{who} lacks permissions this Blueprint needs (apply `{hint}` for it):\n{}",
        .missing.join("\n")
    )]
    Missing {
        /// Whose permissions: the host's identity, or the tenant's ServiceAccount.
        who: String,
        /// The command that prints the RBAC to apply.
        hint: &'static str,
        /// One line per missing verb.
        missing: Vec<String>,
    },
    /// The access review itself failed (for a tenant, also when the host may not
    /// impersonate its ServiceAccount).
    #[error("checking the permissions of {who} (SelfSubjectAccessReview){hint}")]
    Review {
        /// Whose permissions.
        who: String,
        /// What to look at.
        hint: &'static str,
        /// Why.
        #[source]
        source: inrun_reconcilers::api::ApiFailure,
    },
}

/// Checks every verb of every permission as the identity `client` acts as (the host's,
/// or a tenant's ServiceAccount when `tenant` names it); lists all that are missing.
///
/// # Errors
/// [`AccessError::Missing`] naming each missing permission, or [`AccessError::Review`].
pub async fn check(
    client: &Client,
    tenant: Option<&inrun_blueprint::ServiceAccountRef>,
    perms: &[Permission],
) -> Result<(), AccessError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let (who, hint) = match tenant {
        Some(sa) => (
            format!("the tenant's identity, ServiceAccount {sa},"),
            "inrun generate rbac --tenant",
        ),
        None => ("the host's identity".to_owned(), "inrun generate rbac"),
    };
    let review_failed = |source: kube::Error| AccessError::Review {
        who: who.trim_end_matches(',').to_owned(),
        hint: if tenant.is_some() {
            "; the host must be allowed to impersonate it (`inrun generate rbac --impersonate`)"
        } else {
            ""
        },
        source: source.into(),
    };
    let mut missing = Vec::new();
    for p in perms {
        let (resource, subresource) = match p.resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (p.resource.clone(), None),
        };
        let names: Vec<Option<String>> = if p.names.is_empty() {
            vec![None]
        } else {
            p.names.iter().cloned().map(Some).collect()
        };
        for verb in &p.verbs {
            for name in &names {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            group: Some(p.group.clone()),
                            resource: Some(resource.clone()),
                            subresource: subresource.clone(),
                            verb: Some(verb.clone()),
                            namespace: p.namespace.clone(),
                            name: name.clone(),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let answer = api
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(review_failed)?;
                if !answer.status.is_some_and(|s| s.allowed) {
                    let group = if p.group.is_empty() { "core" } else { &p.group };
                    let scope = match &p.namespace {
                        Some(ns) => format!("in namespace {ns}"),
                        None => "cluster-wide".into(),
                    };
                    let name = name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
                    missing.push(format!(
                        "  {verb} {}.{group}{name} {scope} (for {})",
                        p.resource, p.why
                    ));
                }
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(AccessError::Missing { who, hint, missing })
    }
}
