//! The Blueprint document: metadata and a spec of host settings and custom resource types.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::crd::CrdSpec;
use super::runtime::RuntimeSpec;

/// The only `apiVersion` a Blueprint may have.
pub const API_VERSION: &str = "inrun.dev/v1alpha1";
/// The only `kind` a Blueprint may have.
pub const KIND: &str = "Blueprint";

/// A Blueprint: custom resource types and how each is reconciled.
///
/// Written like a Kubernetes object so the same document can later be applied as a
/// cluster-scoped custom resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Blueprint {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Name and labels.
    pub metadata: Metadata,
    /// Host settings and CRDs.
    #[serde(default)]
    pub spec: BlueprintSpec,
    /// The file the Blueprint (or, when merged, its first document) was read from.
    #[serde(skip)]
    pub source: PathBuf,
}

impl Blueprint {
    /// The CRD declaring `group` / `kind`, if any.
    pub fn crd(&self, group: &str, kind: &str) -> Option<&CrdSpec> {
        self.spec
            .crds
            .iter()
            .find(|c| c.group == group && c.kind == kind)
    }
}

/// The Kubernetes-style metadata of a Blueprint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// The Blueprint's name.
    pub name: String,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `spec`: host settings and the custom resource types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueprintSpec {
    /// Host settings; defaults when absent.
    #[serde(default)]
    pub runtime: RuntimeSpec,
    /// The custom resource types, in document order (file order when merged).
    #[serde(default)]
    pub crds: Vec<CrdSpec>,
    /// The Kubernetes identity the host acts as for this Blueprint (by impersonation):
    /// every watch, apply, prune, status write, event and Secret read on its behalf.
    /// `None`: the host's own identity for a file Blueprint (the operator wrote it); a
    /// Blueprint resource then acts as its own, derived from its name by the host's
    /// `--default-tenant-service-account namespace/{name}`, or is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountRef>,
    /// Lets the host install a change to a CRD's schema that live CRs would no longer
    /// pass (a field removed, a type changed, a field newly required, an enum narrowed, a
    /// version no longer served: `inrun plan` lists them and the CRs they strand). Without
    /// it the host refuses such a change and says which, and which CRs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_breaking_schema_changes: bool,
}

/// A ServiceAccount by namespace and name.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccountRef {
    /// The user name the API server gives it: `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// Parses `namespace/name` (the form flags take).
    ///
    /// # Errors
    /// [`AccountError`] saying what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, AccountError> {
        let (namespace, name) = split_account(text)?;
        let sa = ServiceAccountRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        match sa.problem() {
            Some(why) => Err(AccountError::Invalid {
                text: text.to_string(),
                why,
            }),
            None => Ok(sa),
        }
    }

    /// What is wrong with the names, if anything.
    pub fn problem(&self) -> Option<NameProblem> {
        if !crate::validate::names::is_dns_label(&self.namespace) {
            return Some(NameProblem::Namespace(self.namespace.clone()));
        }
        if !crate::validate::names::is_dns_subdomain(&self.name) {
            return Some(NameProblem::Name(self.name.clone()));
        }
        None
    }
}

/// What is wrong with a ServiceAccount's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameProblem {
    /// The namespace is not a DNS label.
    #[error("namespace {0:?} must be a lowercase DNS label")]
    Namespace(String),
    /// The name is not a DNS subdomain.
    #[error("name {0:?} must be a lowercase DNS subdomain")]
    Name(String),
}

/// A ServiceAccount or a pattern of them that cannot be used, as written (`text`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// Not `namespace/name`.
    #[error("{text:?}: expected namespace/name")]
    NotNamespaced {
        /// What was written.
        text: String,
    },
    /// A name that Kubernetes would refuse.
    #[error("{text:?}: {why}")]
    Invalid {
        /// What was written.
        text: String,
        /// Which part is wrong.
        why: NameProblem,
    },
    /// A pattern without `{name}`: one ServiceAccount would serve every Blueprint resource.
    #[error(
        "{text:?}: one ServiceAccount for every Blueprint resource would give each the union of all their rights; name one each with {{name}}, the Blueprint's name (e.g. {namespace}/{{name}})"
    )]
    Shared {
        /// What was written.
        text: String,
        /// Its namespace.
        namespace: String,
    },
    /// A pattern with `{name}` more than once.
    #[error("{text:?}: {{name}} may appear once")]
    NameTwice {
        /// What was written.
        text: String,
    },
    /// A pattern whose names would not be valid ones, as a one-letter Blueprint name shows.
    #[error("{text:?}: {derived}")]
    Pattern {
        /// What was written.
        text: String,
        /// What it derives, and why that is refused.
        derived: Box<AccountError>,
    },
    /// The name a pattern derives for a Blueprint resource is not a valid one (too long,
    /// say).
    #[error("the ServiceAccount derived from {pattern}: {why}")]
    Derived {
        /// The pattern, as `namespace/…{name}…`.
        pattern: String,
        /// Which part is wrong.
        why: NameProblem,
    },
}

/// `namespace` and `name` of `namespace/name`.
fn split_account(text: &str) -> Result<(&str, &str), AccountError> {
    text.split_once('/')
        .ok_or_else(|| AccountError::NotNamespaced {
            text: text.to_string(),
        })
}

/// The ServiceAccount each `Blueprint` resource that names none acts as, derived from its
/// name: `namespace/…{name}…` (e.g. `inrun-tenants/{name}`), so no two Blueprint resources
/// share one identity (a shared one would hold the union of every tenant's rights). The
/// namespace is fixed: the operator owns it and creates one ServiceAccount a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountPattern {
    /// The namespace of every derived ServiceAccount.
    pub namespace: String,
    prefix: String,
    suffix: String,
}

impl AccountPattern {
    /// The placeholder for the Blueprint's name.
    pub const NAME: &'static str = "{name}";

    /// Parses `namespace/name` whose name holds [`Self::NAME`] once.
    ///
    /// # Errors
    /// [`AccountError`] saying what is wrong; a fixed name is refused, saying why.
    pub fn parse(text: &str) -> Result<Self, AccountError> {
        let (namespace, name) = split_account(text)?;
        let Some((prefix, suffix)) = name.split_once(Self::NAME) else {
            return Err(AccountError::Shared {
                text: text.to_string(),
                namespace: namespace.to_string(),
            });
        };
        if suffix.contains(Self::NAME) {
            return Err(AccountError::NameTwice {
                text: text.to_string(),
            });
        }
        let pattern = AccountPattern {
            namespace: namespace.to_string(),
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
        };
        // Checked with a one-letter Blueprint name: the rest must make a valid name.
        match pattern.for_blueprint("x") {
            Err(derived) => Err(AccountError::Pattern {
                text: text.to_string(),
                derived: Box::new(derived),
            }),
            Ok(_) => Ok(pattern),
        }
    }

    /// The ServiceAccount the Blueprint resource `blueprint` acts as.
    ///
    /// # Errors
    /// [`AccountError::Derived`] when the derived name is not a valid ServiceAccount name
    /// (too long, say).
    pub fn for_blueprint(&self, blueprint: &str) -> Result<ServiceAccountRef, AccountError> {
        let sa = ServiceAccountRef {
            namespace: self.namespace.clone(),
            name: format!("{}{blueprint}{}", self.prefix, self.suffix),
        };
        match sa.problem() {
            Some(why) => Err(AccountError::Derived {
                pattern: self.to_string(),
                why,
            }),
            None => Ok(sa),
        }
    }
}

impl std::fmt::Display for AccountPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}{}{}",
            self.namespace,
            self.prefix,
            Self::NAME,
            self.suffix
        )
    }
}

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_pattern_names_one_service_account_a_blueprint_and_refuses_a_shared_one() {
        let p = AccountPattern::parse("inrun-tenants/t-{name}").expect("pattern");
        assert_eq!(p.to_string(), "inrun-tenants/t-{name}");
        let sa = p.for_blueprint("team-b").expect("sa");
        assert_eq!(sa.to_string(), "inrun-tenants/t-team-b");
        assert_ne!(sa, p.for_blueprint("team-a").expect("sa"));
        let shared = AccountPattern::parse("inrun-tenants/tenant").unwrap_err();
        assert!(matches!(shared, AccountError::Shared { .. }), "{shared}");
        assert!(
            shared.to_string().contains("union of all their rights"),
            "{shared}"
        );
        assert!(matches!(
            AccountPattern::parse("inrun-tenants/{name}-{name}"),
            Err(AccountError::NameTwice { .. })
        ));
        assert!(matches!(
            AccountPattern::parse("Bad_NS/{name}"),
            Err(AccountError::Pattern { .. })
        ));
        assert!(matches!(
            AccountPattern::parse("{name}"),
            Err(AccountError::NotNamespaced { .. })
        ));
        let long = "a".repeat(260);
        let too_long = p.for_blueprint(&long).unwrap_err();
        assert!(
            matches!(
                too_long,
                AccountError::Derived {
                    why: NameProblem::Name(_),
                    ..
                }
            ),
            "{too_long}"
        );
        assert!(
            too_long.to_string().contains("inrun-tenants/t-{name}"),
            "{too_long}"
        );
    }
}
