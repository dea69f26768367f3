//! The `reconcile` block: which kind of reconciler, its inputs, and the writes it may make.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::capabilities::Capabilities;
use super::external::ExternalCall;
use super::fieldpath::FieldPath;
use super::quantity::Quantity;
use super::refs::{PullSecretRef, SecretRef};

/// The five ways a CR can be reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReconcilerKind {
    /// Templates only, rendered by the host.
    Declarative,
    /// Templates, then Wasm functions that adjust what they produced.
    Hooks,
    /// A full reconciler in a Wasm component.
    Constructor,
    /// An HTTP endpoint.
    Remote,
    /// An infrastructure package: a component that observes and converges something
    /// outside Kubernetes (`inrun:reconciler@0.2.0`, world `package`).
    Package,
}

impl ReconcilerKind {
    /// The lowercase name, as in logs and `/blueprint`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcilerKind::Declarative => "declarative",
            ReconcilerKind::Hooks => "hooks",
            ReconcilerKind::Constructor => "constructor",
            ReconcilerKind::Remote => "remote",
            ReconcilerKind::Package => "package",
        }
    }
}

impl fmt::Display for ReconcilerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `reconcile`: the same shape for a CRD and for each serve target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReconcileSpec {
    /// `true` (default): templates, plus optional hooks; `false`: constructor or remote.
    #[serde(default = "default_true")]
    pub default: bool,
    /// Reconciler input name → template (any JSON value; strings are rendered).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub args: Map<String, Value>,
    /// Resources rendered when the CR is first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::any_list")]
    pub on_create: Vec<Value>,
    /// Resources rendered on every reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::any_list")]
    pub on_reconcile: Vec<Value>,
    /// Resources rendered while the CR is being deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::any_list")]
    pub on_delete: Vec<Value>,
    /// Functions that adjust the rendered outcome, called in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookSpec>,
    /// A full Wasm reconciler (with `default: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constructor: Option<PluginSpec>,
    /// An HTTP reconciler (with `default: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteSpec>,
    /// An infrastructure package (with `default: false`): observes and converges
    /// something outside Kubernetes; it writes no Kubernetes objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PluginSpec>,
    /// What the Request carries beyond the defaults.
    #[serde(default)]
    pub request: RequestSpec,
    /// The only kinds the reconciler may write, and where.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<ManagedResource>,
    /// Types whose instances a workload creates at run time (its CRDs are not in the
    /// Result): their foreign instances hold the CR's deletion like those of a CRD child.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_types: Vec<ManagedType>,
    /// Deleting children that are no longer returned.
    #[serde(default)]
    pub prune: PruneSpec,
    /// Reconciling again on a timer or a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<RequeueSpec>,
    /// Calls made before the reconciler, visible as `.external.<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external: Vec<ExternalCall>,
    /// How a change of this block (its templates, hooks, plugins, endpoint) reaches the
    /// CRs: step by step, judged against the version it replaces. Without it, a change
    /// reaches every CR at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

fn default_true() -> bool {
    true
}

impl Default for ReconcileSpec {
    fn default() -> Self {
        ReconcileSpec {
            default: true,
            args: Map::new(),
            on_create: Vec::new(),
            on_reconcile: Vec::new(),
            on_delete: Vec::new(),
            hooks: Vec::new(),
            constructor: None,
            remote: None,
            package: None,
            request: RequestSpec::default(),
            managed_resources: Vec::new(),
            managed_types: Vec::new(),
            prune: PruneSpec::default(),
            requeue: None,
            external: Vec::new(),
            rollout: None,
        }
    }
}

impl ReconcileSpec {
    /// Where a `rollout` is written in this block: the block's own, its constructor's,
    /// package's, remote endpoint's or a hook's (field path under the block, and the
    /// rollout).
    pub fn rollouts(&self) -> Vec<(String, &crate::rollout::RolloutSpec)> {
        let mut out = Vec::new();
        if let Some(r) = &self.rollout {
            out.push(("rollout".to_string(), r));
        }
        for (field, r) in [
            (
                "constructor",
                self.constructor.as_ref().and_then(|c| c.rollout.as_ref()),
            ),
            (
                "package",
                self.package.as_ref().and_then(|c| c.rollout.as_ref()),
            ),
            (
                "remote",
                self.remote.as_ref().and_then(|c| c.rollout.as_ref()),
            ),
        ] {
            if let Some(r) = r {
                out.push((format!("{field}.rollout"), r));
            }
        }
        for (i, hook) in self.hooks.iter().enumerate() {
            if let Some(r) = &hook.rollout {
                out.push((format!("hooks[{i}].rollout"), r));
            }
        }
        out
    }

    /// Moves a `rollout` written on the block's constructor, package, remote endpoint or
    /// a hook to the block's own `rollout` (what the host reads); validation made sure
    /// there is one at most.
    pub(crate) fn hoist_rollout(&mut self) {
        let nested = [
            self.constructor.as_mut().and_then(|c| c.rollout.take()),
            self.package.as_mut().and_then(|c| c.rollout.take()),
            self.remote.as_mut().and_then(|c| c.rollout.take()),
        ]
        .into_iter()
        .chain(self.hooks.iter_mut().map(|h| h.rollout.take()))
        .flatten()
        .next();
        if self.rollout.is_none() {
            self.rollout = nested;
        }
    }

    /// Which reconciler runs. Meaningful on a validated Blueprint, where `default: false`
    /// has exactly one of `constructor`, `remote` and `package`.
    pub fn kind(&self) -> ReconcilerKind {
        if self.default {
            if self.hooks.is_empty() {
                ReconcilerKind::Declarative
            } else {
                ReconcilerKind::Hooks
            }
        } else if self.package.is_some() {
            ReconcilerKind::Package
        } else if self.remote.is_some() && self.constructor.is_none() {
            ReconcilerKind::Remote
        } else {
            ReconcilerKind::Constructor
        }
    }

    /// Whether some `managedResources` entry lets the reconciler write this object.
    /// See [`ManagedResource::allows`].
    pub fn allows(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        cr_namespace: &str,
    ) -> bool {
        self.managed_resources
            .iter()
            .any(|m| m.allows(api_version, kind, namespace, cr_namespace))
    }
}

/// A `managedTypes` entry: an API group and kind, either of which may be a wildcard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedType {
    /// A group (`""` for core), `*` for any, or `*.example.com` for one or more DNS labels
    /// before `example.com` (not `example.com` itself).
    pub group: String,
    /// A kind, or `*` for any.
    pub kind: String,
}

impl ManagedType {
    /// Whether the type `group`/`kind` is one this entry names.
    pub fn matches(&self, group: &str, kind: &str) -> bool {
        let kind_ok = self.kind == "*" || self.kind == kind;
        let group_ok = match self.group.as_str() {
            "*" => true,
            pattern => match pattern.strip_prefix("*.") {
                // One or more labels before the suffix: `x.example.com`, `a.b.example.com`.
                Some(suffix) => group
                    .strip_suffix(suffix)
                    .and_then(|head| head.strip_suffix('.'))
                    .is_some_and(|head| !head.is_empty()),
                None => pattern == group,
            },
        };
        kind_ok && group_ok
    }

    /// Whether the group is a pattern rather than one group.
    pub fn is_pattern(&self) -> bool {
        self.group.starts_with('*')
    }
}

/// The resource name Kubernetes gives a kind by default (lower case, English plural);
/// exact for built-in kinds, which the API server's discovery confirms at startup.
pub fn default_plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.as_str() {
        "endpoints" => return lower,
        "podsecuritypolicy" => return "podsecuritypolicies".into(),
        _ => {}
    }
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// The kinds that define types at run time: a child of one of these makes the CR's
/// deletion safeguard list the instances of the types it defines.
pub const TYPE_DEFINING: [(&str, &str); 2] = [
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("apiregistration.k8s.io/v1", "APIService"),
];

impl ReconcileSpec {
    /// Whether `managedResources` lists a kind that defines types (a CRD or an APIService).
    pub fn defines_types(&self) -> bool {
        self.managed_resources.iter().any(|m| {
            TYPE_DEFINING
                .iter()
                .any(|(v, k)| m.api_version == *v && m.kind == *k)
        })
    }

    /// Whether the host, under the RBAC generated for this block, may list instances of
    /// `group`/`kind` (`kind` `None`: every kind of the group, as an APIService serves):
    /// a `managedTypes` entry names it, or (one kind) `managedResources` lists it.
    ///
    /// # Guarantees
    /// The deletion safeguard lists instances only of types a child defines; a child that
    /// would define a type this answers `false` for is refused before it is applied, so a
    /// CR can never be held by a list the host is not allowed to make.
    /// `plural` is the type's resource name: `managedResources` grants its kind's default
    /// plural ([`default_plural`]), so a type named otherwise must be in `managedTypes`.
    pub fn lists_instances_of(&self, group: &str, kind: Option<(&str, &str)>) -> bool {
        let declared = self.managed_types.iter().any(|t| match kind {
            Some((kind, _)) => t.matches(group, kind),
            None => t.kind == "*" && t.matches(group, "*"),
        });
        let managed = kind.is_some_and(|(kind, plural)| {
            plural == default_plural(kind)
                && self.managed_resources.iter().any(|m| {
                    m.kind == kind && m.api_version.rsplit_once('/').map(|(g, _)| g) == Some(group)
                })
        });
        declared || managed
    }
}

/// One `hooks` entry: a function exported by a hooks component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookSpec {
    /// The component: a path (relative to the Blueprint file), an HTTPS URL or an OCI reference.
    pub location: String,
    /// `sha256:<64 hex>` pinning the bytes (for `oci://`, the manifest); required for `https://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret with credentials for an `oci://` registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<PullSecretRef>,
    /// The function the component exports.
    pub function: String,
    /// Per-call limits; host defaults for fields left out.
    #[serde(default)]
    pub limits: PluginLimits,
    /// What the plugin may reach beyond its sandbox; nothing when left out.
    #[serde(default, skip_serializing_if = "Capabilities::is_empty")]
    pub capabilities: Capabilities,
    /// How a new version of this component reaches the CRs: the same as the block's
    /// `rollout`, written where the change is (one place per block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

/// `constructor`: a component exporting a full reconciler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// The component: a path (relative to the Blueprint file), an HTTPS URL or an OCI reference.
    pub location: String,
    /// `sha256:<64 hex>` pinning the bytes (for `oci://`, the manifest); required for `https://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret with credentials for an `oci://` registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<PullSecretRef>,
    /// Per-call limits; host defaults for fields left out.
    #[serde(default)]
    pub limits: PluginLimits,
    /// What the plugin may reach beyond its sandbox; nothing when left out.
    #[serde(default, skip_serializing_if = "Capabilities::is_empty")]
    pub capabilities: Capabilities,
    /// How a new version of this component reaches the CRs: the same as the block's
    /// `rollout`, written where the change is (one place per block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

/// Limits of one plugin call. Each field overrides the host default only when set.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginLimits {
    /// Wall-clock time for one call (at most 5m).
    #[serde(
        default,
        with = "inrun_contract::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub deadline: Option<Duration>,
    /// Linear memory the plugin may grow to (1Mi to 4Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Size of the JSON the plugin returns (1Ki to 64Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_size: Option<Quantity>,
    /// How many resources one outcome may hold (1 to 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<u32>,
    /// Let one instance of the plugin serve several calls (off: a fresh instance for
    /// every call). Faster for interpreted and Go guests, but what the plugin keeps in
    /// its globals is seen by the next CR it serves (of the same tenant, and of the same
    /// namespace when the plugin reads the cluster or credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Reuse>,
}

/// `limits.reuse`: how long one instance of a plugin lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reuse {
    /// Calls one instance serves before it is discarded (2 to 10000). It is discarded
    /// sooner after any failed call.
    pub calls: u32,
}

/// `remote`: an HTTP endpoint that answers the Request with a Result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteSpec {
    /// `http://` or `https://` URL the Request is POSTed to.
    pub endpoint: String,
    /// A bearer token to send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<RemoteAuth>,
    /// Cap on one call (default 10s, at most 5m).
    #[serde(
        default = "default_remote_timeout",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// How a new endpoint reaches the CRs: the same as the block's `rollout`, written
    /// where the change is (one place per block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

fn default_remote_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `remote.auth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteAuth {
    /// The Secret key holding the bearer token.
    pub secret_ref: SecretRef,
}

/// `request`: optional parts of the Request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestSpec {
    /// How the CR is trimmed.
    #[serde(default)]
    pub object: ObjectFilter,
    /// Send the observed children.
    #[serde(default)]
    pub children: bool,
}

/// `request.object`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectFilter {
    /// Paths removed from the CR, e.g. `.metadata.managedFields` or
    /// `.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<FieldPath>,
}

/// One `managedResources` entry: a kind the reconciler may write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedResource {
    /// `v1` or `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Namespaces besides the CR's own; `*` for any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// The kind is cluster-scoped; required to write objects without a namespace.
    #[serde(default)]
    pub cluster_scoped: bool,
    /// Take over an existing object of this kind that the CR does not own (no matching
    /// `inrun.dev/owner-uid`). Without it such an object is left alone and the CR fails
    /// with reason `Conflict`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// When a child of this kind is ready, as a condition rendered against the child
    /// (`"{{ .status.phase == 'Running' }}"`); replaces the host's rules for the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_when: Option<String>,
}

impl ManagedResource {
    /// Whether an object of `api_version`/`kind` in `namespace` (`None`: cluster-scoped)
    /// may be written for a CR in `cr_namespace`.
    ///
    /// # Guarantees
    /// The CR's own namespace is always allowed; another only when listed or with `*`;
    /// a cluster-scoped object only when the entry says `clusterScoped: true`.
    pub fn allows(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        cr_namespace: &str,
    ) -> bool {
        if self.api_version != api_version || self.kind != kind {
            return false;
        }
        match namespace {
            None => self.cluster_scoped,
            Some(_) if self.cluster_scoped => false,
            Some(ns) => ns == cr_namespace || self.namespaces.iter().any(|n| n == "*" || n == ns),
        }
    }
}

/// `prune`: deleting children a reconcile no longer returns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PruneSpec {
    /// Off by default.
    #[serde(default)]
    pub enabled: bool,
    /// Kinds never deleted: `Kind` (any group) or `group/Kind`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// Prune even when the Result holds no resources at all.
    #[serde(default)]
    pub allow_empty: bool,
}

impl PruneSpec {
    /// Whether objects of `api_version`/`kind` are in `keep`. The core group is `""`.
    pub fn keeps(&self, api_version: &str, kind: &str) -> bool {
        let group = inrun_contract::api_version::group_of(api_version);
        self.keep.iter().any(|entry| match entry.split_once('/') {
            Some((g, k)) => g == group && k == kind,
            None => entry == kind,
        })
    }
}

/// `requeue`: `after` alone is a periodic refresh; `when` (and `or`) make it conditional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeueSpec {
    /// The delay.
    #[serde(
        default,
        with = "inrun_contract::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub after: Option<Duration>,
    /// Template: requeue only when it renders true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Templates: alternatives to `when` (requeue when any renders true).
    #[serde(rename = "or", default, skip_serializing_if = "Vec::is_empty")]
    pub or_when: Vec<String>,
}

impl RequeueSpec {
    /// Conditional requeues hold a deleting CR; a plain refresh never does.
    pub fn is_conditional(&self) -> bool {
        self.when.is_some()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn managed_type_wildcards_match_any_kind_any_group_or_labels_before_a_suffix() {
        let t = |group: &str, kind: &str| super::ManagedType {
            group: group.into(),
            kind: kind.into(),
        };
        assert!(t("*", "*").matches("", "ConfigMap"));
        assert!(t("*", "Widget").matches("any.example.org", "Widget"));
        assert!(!t("*", "Widget").matches("any.example.org", "Gadget"));
        let suffix = t("*.example.com", "*");
        assert!(suffix.matches("a.example.com", "Widget"));
        assert!(suffix.matches("a.b.example.com", "Gadget"));
        assert!(
            !suffix.matches("example.com", "Widget"),
            "not the suffix itself"
        );
        assert!(
            !suffix.matches("aexample.com", "Widget"),
            "whole labels only"
        );
        assert!(!suffix.matches("example.com.evil", "Widget"));
        let exact = t("example.com", "Widget");
        assert!(exact.matches("example.com", "Widget"));
        assert!(!exact.matches("a.example.com", "Widget"));
        assert!(!exact.matches("example.com", "Gadget"));
        assert!(suffix.is_pattern() && !exact.is_pattern());
    }

    use super::*;

    fn managed(yaml: &str) -> ManagedResource {
        serde_yaml_ng::from_str(yaml).expect("managed resource")
    }

    #[test]
    fn managed_resources_allow_the_crs_own_namespace_only_by_default() {
        let m = managed("{ apiVersion: apps/v1, kind: Deployment }");
        assert!(m.allows("apps/v1", "Deployment", Some("team-a"), "team-a"));
        assert!(!m.allows("apps/v1", "Deployment", Some("other"), "team-a"));
        assert!(!m.allows("apps/v1", "Deployment", None, "team-a"));
        assert!(!m.allows("apps/v1", "StatefulSet", Some("team-a"), "team-a"));
        assert!(!m.allows("apps/v2", "Deployment", Some("team-a"), "team-a"));
    }

    #[test]
    fn managed_resources_allow_listed_or_any_namespace() {
        let listed = managed("{ apiVersion: v1, kind: ConfigMap, namespaces: [shared] }");
        assert!(listed.allows("v1", "ConfigMap", Some("shared"), "team-a"));
        assert!(!listed.allows("v1", "ConfigMap", Some("other"), "team-a"));
        let any = managed("{ apiVersion: v1, kind: ConfigMap, namespaces: ['*'] }");
        assert!(any.allows("v1", "ConfigMap", Some("other"), "team-a"));
    }

    #[test]
    fn cluster_scoped_objects_need_an_explicit_entry() {
        let ns = managed("{ apiVersion: v1, kind: Namespace, clusterScoped: true }");
        assert!(ns.allows("v1", "Namespace", None, "team-a"));
        assert!(!ns.allows("v1", "Namespace", Some("team-a"), "team-a"));
        let spec = ReconcileSpec {
            managed_resources: vec![ns, managed("{ apiVersion: v1, kind: Secret }")],
            ..ReconcileSpec::default()
        };
        assert!(spec.allows("v1", "Secret", Some("team-a"), "team-a"));
        assert!(!spec.allows("v1", "Secret", None, "team-a"));
    }

    #[test]
    fn prune_keeps_kinds_in_any_group_or_in_the_named_one() {
        let prune = PruneSpec {
            keep: vec!["PersistentVolumeClaim".into(), "apps/StatefulSet".into()],
            ..PruneSpec::default()
        };
        assert!(prune.keeps("v1", "PersistentVolumeClaim"));
        assert!(prune.keeps("apps/v1", "StatefulSet"));
        assert!(!prune.keeps("other.example.com/v1", "StatefulSet"));
        assert!(!prune.keeps("apps/v1", "Deployment"));
    }

    #[test]
    fn reconciler_kind_follows_default_hooks_constructor_and_remote() {
        let mut spec = ReconcileSpec::default();
        assert_eq!(spec.kind(), ReconcilerKind::Declarative);
        spec.hooks.push(HookSpec {
            location: "./h.wasm".into(),
            digest: None,
            pull_secret: None,
            function: "f".into(),
            limits: PluginLimits::default(),
            capabilities: Capabilities::default(),
            rollout: None,
        });
        assert_eq!(spec.kind(), ReconcilerKind::Hooks);
        spec = ReconcileSpec {
            default: false,
            remote: Some(RemoteSpec {
                endpoint: "http://x".into(),
                auth: None,
                timeout: Duration::from_secs(1),
                rollout: None,
            }),
            ..ReconcileSpec::default()
        };
        assert_eq!(spec.kind(), ReconcilerKind::Remote);
        assert_eq!(
            serde_json::to_value(spec.kind()).ok(),
            Some(serde_json::json!("remote"))
        );
        assert_eq!(ReconcilerKind::Hooks.to_string(), "hooks");
    }

    #[test]
    fn requeue_is_conditional_only_with_when() {
        let refresh: RequeueSpec = serde_yaml_ng::from_str("{ after: 30s }").expect("refresh");
        assert!(!refresh.is_conditional());
        let cond: RequeueSpec =
            serde_yaml_ng::from_str("{ when: x, or: [y] }").expect("conditional");
        assert!(cond.is_conditional());
        assert_eq!(cond.or_when, ["y"]);
    }
}
