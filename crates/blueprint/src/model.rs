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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueprintSpec {
    /// Host settings; defaults when absent.
    #[serde(default)]
    pub runtime: RuntimeSpec,
    /// The custom resource types, in document order (file order when merged).
    #[serde(default)]
    pub crds: Vec<CrdSpec>,
}
