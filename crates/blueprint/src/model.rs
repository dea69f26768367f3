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
    /// Blueprint resource then needs the host's `--default-tenant-service-account`.
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

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
