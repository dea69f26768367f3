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
    /// A message saying what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (namespace, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: expected namespace/name"))?;
        let sa = ServiceAccountRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        match sa.problem() {
            Some(why) => Err(format!("{text:?}: {why}")),
            None => Ok(sa),
        }
    }

    /// What is wrong with the names, if anything.
    pub fn problem(&self) -> Option<String> {
        if !crate::validate::names::is_dns_label(&self.namespace) {
            return Some(format!(
                "namespace {:?} must be a lowercase DNS label",
                self.namespace
            ));
        }
        if !crate::validate::names::is_dns_subdomain(&self.name) {
            return Some(format!(
                "name {:?} must be a lowercase DNS subdomain",
                self.name
            ));
        }
        None
    }
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
    /// A message saying what is wrong; a fixed name is refused, saying why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (namespace, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: expected namespace/name"))?;
        let Some((prefix, suffix)) = name.split_once(Self::NAME) else {
            return Err(format!(
                "{text:?}: one ServiceAccount for every Blueprint resource would give each the union of all their rights; name one each with {{name}}, the Blueprint's name (e.g. {namespace}/{{name}})"
            ));
        };
        if suffix.contains(Self::NAME) {
            return Err(format!("{text:?}: {{name}} may appear once"));
        }
        let pattern = AccountPattern {
            namespace: namespace.to_string(),
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
        };
        // Checked with a one-letter Blueprint name: the rest must make a valid name.
        pattern
            .for_blueprint("x")
            .map_err(|why| format!("{text:?}: {why}"))?;
        Ok(pattern)
    }

    /// The ServiceAccount the Blueprint resource `blueprint` acts as.
    ///
    /// # Errors
    /// When the derived name is not a valid ServiceAccount name (too long, say).
    pub fn for_blueprint(&self, blueprint: &str) -> Result<ServiceAccountRef, String> {
        let sa = ServiceAccountRef {
            namespace: self.namespace.clone(),
            name: format!("{}{blueprint}{}", self.prefix, self.suffix),
        };
        match sa.problem() {
            Some(why) => Err(format!("the ServiceAccount derived from {self}: {why}")),
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
        assert!(shared.contains("union of all their rights"), "{shared}");
        assert!(AccountPattern::parse("inrun-tenants/{name}-{name}").is_err());
        assert!(AccountPattern::parse("Bad_NS/{name}").is_err());
        assert!(AccountPattern::parse("{name}").is_err());
        let long = "a".repeat(260);
        let too_long = p.for_blueprint(&long).unwrap_err();
        assert!(too_long.contains("inrun-tenants/t-{name}"), "{too_long}");
    }
}
