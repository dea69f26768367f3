//! One custom resource type (`spec.crds[i]`): its API, gate, rules, status and serve targets.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::fieldpath::FieldPath;
use super::reconcile::ReconcileSpec;
use super::runtime::RuntimeSpec;

/// The category of every CRD a Blueprint declares: `kubectl get inrun` lists every CR
/// the host reconciles.
pub const CATEGORY: &str = "inrun";

/// The annotation that picks a serve target when `serve.selector` is not given.
pub const DEFAULT_TARGET_ANNOTATION: &str = "inrun.dev/target";

/// A custom resource type and how it is reconciled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CrdSpec {
    /// API group, a DNS subdomain with at least one dot (`demo.inrun.dev`).
    pub group: String,
    /// API version (`v1`, `v1alpha1`, `v2beta3`).
    pub version: String,
    /// Kind, UpperCamelCase (`WebApp`).
    pub kind: String,
    /// Plural resource name; see [`CrdSpec::plural`] for the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
    /// Short names `kubectl get` accepts (`wa` for `webapps`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// Categories besides `inrun`, which every generated CRD is in (`all` puts the
    /// type in `kubectl get all`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Whether CRs live in a namespace.
    #[serde(default)]
    pub scope: Scope,
    /// The `openAPIV3Schema`, free-form; the CRD accepts any spec when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any")]
    pub schema: Option<Value>,
    /// Extra `kubectl get` columns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub printer_columns: Vec<PrinterColumn>,
    /// Worker count for this CRD; `spec.runtime.workers` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// Which namespaces' CRs are reconciled.
    #[serde(default)]
    pub namespaces: NamespaceFilter,
    /// Gate: every condition must render true, else the CR waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_reconcile: Vec<GateCondition>,
    /// Rules a CR must satisfy before it is reconciled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation: Vec<ValidationRule>,
    /// Fields the host writes on the CR after each reconcile.
    #[serde(default)]
    pub emit: EmitSpec,
    /// How CRs of this type are reconciled.
    #[serde(default)]
    pub reconcile: ReconcileSpec,
    /// Serve targets, each with its own reconcile block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeSpec>,
    /// Where the CRD was declared.
    #[serde(skip)]
    pub source: CrdSource,
}

/// Where a CRD was declared: its file and its index in that document's `spec.crds`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrdSource {
    /// The file it was read from (or the name given to [`super::from_str`]).
    pub file: PathBuf,
    /// Its position in its own document's `spec.crds`.
    pub index: usize,
}

impl CrdSource {
    /// The field path of the CRD in its document, `spec.crds[3]`.
    pub fn field(&self) -> String {
        format!("spec.crds[{}]", self.index)
    }

    /// The directory relative plugin locations are resolved against.
    pub fn base_dir(&self) -> &Path {
        self.file.parent().unwrap_or(Path::new(""))
    }
}

impl CrdSpec {
    /// `group/version`, the apiVersion of the CRs.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// The plural name: as written, else the lowercase kind plus `s`.
    pub fn plural(&self) -> String {
        match &self.plural {
            Some(p) => p.clone(),
            None => format!("{}s", self.kind.to_lowercase()),
        }
    }

    /// The CRD object's name, `plural.group`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural(), self.group)
    }

    /// The CRD's categories: [`CATEGORY`], then the Blueprint's, each once.
    pub fn categories(&self) -> Vec<&str> {
        let mut all = vec![CATEGORY];
        for c in &self.categories {
            if !all.contains(&c.as_str()) {
                all.push(c);
            }
        }
        all
    }

    /// Worker count: this CRD's own, else the runtime default.
    pub fn workers(&self, runtime: &RuntimeSpec) -> u32 {
        self.workers.unwrap_or(runtime.workers)
    }

    /// The reconcile block for a CR that came through `target`, or the CRD's own for none.
    ///
    /// `None` when the target is not declared.
    pub fn reconcile_for(&self, target: Option<&str>) -> Option<&ReconcileSpec> {
        match target {
            None => Some(&self.reconcile),
            Some(name) => self
                .serve
                .as_ref()?
                .targets
                .iter()
                .find(|t| t.name == name)
                .map(|t| &t.reconcile),
        }
    }
}

/// Whether CRs of a type are namespaced.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum Scope {
    /// CRs live in a namespace (the default).
    #[default]
    Namespaced,
    /// CRs are cluster-scoped.
    Cluster,
}

/// One `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub type_: String,
    /// JSONPath into the CR, e.g. `.status.phase`.
    pub json_path: String,
    /// Shown by `kubectl explain`-style tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// 0 shows the column by default; higher only with `-o wide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// `namespaces`: which namespaces' CRs are reconciled (all when both lists are empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceFilter {
    /// Only these namespaces, when not empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// Never these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl NamespaceFilter {
    /// Whether CRs in `namespace` are reconciled.
    pub fn allows(&self, namespace: &str) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|n| n == namespace);
        included && !self.exclude.iter().any(|n| n == namespace)
    }
}

/// One `preReconcile` condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GateCondition {
    /// Names the condition in status and events.
    pub name: String,
    /// Template that must render true.
    pub when: String,
    /// Shown while the CR waits on this condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One `validation` rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidationRule {
    /// Template that must render true for the CR to be valid.
    pub rule: String,
    /// Shown when the rule fails; the rule itself when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `emit`: what the host writes on the CR itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmitSpec {
    /// Status field → template (any JSON value; strings are rendered).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub status: Map<String, Value>,
    /// Conditions to set on the CR, each `{type, status, reason, message}` (strings are
    /// rendered; a rendered `status` of `true`/`false` reads as True/False). Merged by
    /// type with the reconciler's; `Ready` and `Reconciled` are the host's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::any_list")]
    pub conditions: Vec<Value>,
}

/// `serve`: CRs pick one of several reconcile blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServeSpec {
    /// Where a CR names its target.
    #[serde(default)]
    pub selector: TargetSelector,
    /// The targets, each with its own reconcile block.
    #[serde(default)]
    pub targets: Vec<ServeTarget>,
}

impl ServeSpec {
    /// The target called `name`.
    pub fn target(&self, name: &str) -> Option<&ServeTarget> {
        self.targets.iter().find(|t| t.name == name)
    }
}

/// `serve.selector`: exactly one of `annotation` and `field`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetSelector {
    /// The CR annotation holding the target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
    /// A path into the CR holding the target name, e.g. `.spec.target`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<FieldPath>,
}

impl Default for TargetSelector {
    fn default() -> Self {
        TargetSelector {
            annotation: Some(DEFAULT_TARGET_ANNOTATION.to_string()),
            field: None,
        }
    }
}

/// One `serve.targets` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServeTarget {
    /// Unique within the CRD; a DNS label.
    pub name: String,
    /// How CRs through this target are reconciled.
    #[serde(default)]
    pub reconcile: ReconcileSpec,
}

impl CrdSpec {
    /// Whether a CR of this CRD may be reconciled by a package: its default block, or a
    /// serve target's, is one.
    pub fn serves_a_package(&self) -> bool {
        self.reconcile.package.is_some()
            || self
                .serve
                .iter()
                .flat_map(|s| &s.targets)
                .any(|t| t.reconcile.package.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(yaml: &str) -> CrdSpec {
        serde_yaml_ng::from_str(yaml).expect("crd")
    }

    #[test]
    fn the_plural_defaults_to_the_lowercase_kind_plus_s() {
        let c = crd("{ group: demo.inrun.dev, version: v1, kind: WebApp }");
        assert_eq!(c.plural(), "webapps");
        let c = crd("{ group: demo.inrun.dev, version: v1, kind: Proxy, plural: proxies }");
        assert_eq!(c.plural(), "proxies");
        assert_eq!(c.api_version(), "demo.inrun.dev/v1");
    }

    #[test]
    fn workers_fall_back_to_the_runtime_default() {
        let rt = RuntimeSpec::default();
        assert_eq!(crd("{ group: a.b, version: v1, kind: A }").workers(&rt), 2);
        assert_eq!(
            crd("{ group: a.b, version: v1, kind: A, workers: 7 }").workers(&rt),
            7
        );
    }

    #[test]
    fn namespace_filters_include_then_exclude() {
        let all = NamespaceFilter::default();
        assert!(all.allows("anything"));
        let f = NamespaceFilter {
            include: vec!["a".into(), "b".into()],
            exclude: vec!["b".into()],
        };
        assert!(f.allows("a"));
        assert!(!f.allows("b"));
        assert!(!f.allows("c"));
    }

    #[test]
    fn a_serve_target_picks_its_own_reconcile_block() {
        let c = crd(
            "{ group: a.b, version: v1, kind: A, serve: { targets: [ { name: fast, reconcile: { default: false } } ] } }",
        );
        assert!(c.reconcile_for(None).is_some_and(|r| r.default));
        assert!(c.reconcile_for(Some("fast")).is_some_and(|r| !r.default));
        assert!(c.reconcile_for(Some("slow")).is_none());
        let serve = c.serve.as_ref().expect("serve");
        assert_eq!(
            serve.selector.annotation.as_deref(),
            Some(DEFAULT_TARGET_ANNOTATION)
        );
    }

    #[test]
    fn relative_locations_resolve_against_the_blueprint_directory() {
        let source = CrdSource {
            file: PathBuf::from("blueprints/web.yaml"),
            index: 2,
        };
        assert_eq!(source.base_dir(), Path::new("blueprints"));
        assert_eq!(source.field(), "spec.crds[2]");
    }
}
