//! Rules on what a reconcile block writes: its resource templates, `managedResources`
//! and `managedTypes`.

use std::collections::HashMap;

use serde_json::Value;

use super::names;
use super::{Report, first_seen};
use crate::reconcile::ReconcileSpec;

/// A template is an object, or a string holding a YAML template; a literal object's kind
/// must be one the reconciler may write.
pub(super) fn resource_template(
    r: &mut Report<'_>,
    spec: &ReconcileSpec,
    template: &Value,
    at: &str,
) {
    match template {
        Value::String(text) => {
            r.check(!text.trim().is_empty(), at, "must not be empty");
        }
        Value::Object(object) => {
            let literal = |key: &str| {
                object
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.contains("{{"))
            };
            if let (Some(api_version), Some(kind)) = (literal("apiVersion"), literal("kind")) {
                let listed = spec
                    .managed_resources
                    .iter()
                    .any(|m| m.api_version == api_version && m.kind == kind);
                r.check(
                    listed,
                    at,
                    format!("{kind} ({api_version}) is not listed in managedResources"),
                );
            }
        }
        _ => r.add(
            at,
            "must be a resource object or a string holding a YAML template",
        ),
    }
}

/// `managedTypes`: a group or pattern and a kind or `*` each, present where the deletion
/// safeguard needs to list foreign instances.
pub(super) fn managed_types(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    // The generated RBAC lets the host list only the instances a Blueprint names: without
    // a name, a CRD child's deletion safeguard could never look.
    let instances_named = !spec.managed_types.is_empty()
        || spec.managed_resources.iter().any(|m| {
            let group = inrun_contract::api_version::group_of(&m.api_version);
            group.contains('.') && !group.ends_with(".k8s.io")
        });
    // An APIService serves a whole group, which only a `kind: "*"` entry names.
    let serves_api = spec
        .managed_resources
        .iter()
        .any(|m| (m.api_version.as_str(), m.kind.as_str()) == crate::reconcile::TYPE_DEFINING[1]);
    r.check(
        !serves_api || spec.managed_types.iter().any(|t| t.kind == "*"),
        format!("{at}.managedTypes"),
        "managedResources lists APIService: name each group its APIServices serve here with kind \"*\", so the host may list their instances before it deletes them",
    );
    r.check(
        !spec.defines_types() || instances_named,
        format!("{at}.managedTypes"),
        "managedResources lists CustomResourceDefinition or APIService: name the types those children define here (group and kind, \"*\" for every kind of a group), so the host may list their instances before it deletes them",
    );
    for (i, t) in spec.managed_types.iter().enumerate() {
        let f = format!("{at}.managedTypes[{i}]");
        let group_ok = match t.group.strip_prefix("*.") {
            _ if t.group == "*" || t.group.is_empty() => true,
            Some(suffix) => names::is_dns_subdomain(suffix),
            None => names::is_dns_subdomain(&t.group),
        };
        r.check(
            group_ok,
            format!("{f}.group"),
            format!(
                "{:?} must be an API group, \"*\", or \"*.\" and a group suffix",
                t.group
            ),
        );
        r.check(
            t.kind == "*" || names::is_kind(&t.kind),
            format!("{f}.kind"),
            format!("{:?} must be an UpperCamelCase kind or \"*\"", t.kind),
        );
    }
}

/// `managedResources`: each kind named properly and once.
pub(super) fn managed_resources(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    let mut seen = HashMap::new();
    for (i, m) in spec.managed_resources.iter().enumerate() {
        let f = format!("{at}.managedResources[{i}]");
        r.check(
            names::is_api_version(&m.api_version),
            format!("{f}.apiVersion"),
            format!("{:?} must be v1 or group/version", m.api_version),
        );
        r.check(
            names::is_kind(&m.kind),
            format!("{f}.kind"),
            format!("{:?} must be an UpperCamelCase kind", m.kind),
        );
        if let Some(first) = first_seen(&mut seen, (m.api_version.as_str(), m.kind.as_str()), i) {
            r.add(
                &f,
                format!(
                    "{} {} is already listed at managedResources[{first}]",
                    m.api_version, m.kind
                ),
            );
        }
        if m.cluster_scoped && !m.namespaces.is_empty() {
            r.add(
                format!("{f}.namespaces"),
                "a cluster-scoped kind has no namespaces",
            );
        }
        for (j, ns) in m.namespaces.iter().enumerate() {
            r.check(
                ns == "*" || names::is_dns_label(ns),
                format!("{f}.namespaces[{j}]"),
                format!("{ns:?} must be \"*\" or a lowercase DNS label"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{AT, reconcile};

    #[test]
    fn managed_types_name_a_group_or_pattern_and_a_kind_or_star() {
        assert_eq!(
            reconcile(
                "{ managedTypes: [ { group: '*', kind: '*' }, { group: '*.example.com', kind: Widget }, { group: apps, kind: Deployment }, { group: '', kind: ConfigMap }, { group: 'a.*.com', kind: widget }, { group: '*.', kind: X } ] }"
            ),
            [
                format!(
                    "{AT}.managedTypes[4].group: \"a.*.com\" must be an API group, \"*\", or \"*.\" and a group suffix"
                ),
                format!(
                    "{AT}.managedTypes[4].kind: \"widget\" must be an UpperCamelCase kind or \"*\""
                ),
                format!(
                    "{AT}.managedTypes[5].group: \"*.\" must be an API group, \"*\", or \"*.\" and a group suffix"
                ),
            ]
        );
    }

    #[test]
    fn managed_resources_are_well_formed_and_unique() {
        assert_eq!(
            reconcile(
                "{ managedResources: [ { apiVersion: apps/v1, kind: Deployment }, { apiVersion: apps/v1, kind: Deployment }, { apiVersion: 'apps/', kind: pod, namespaces: ['*', Shared] }, { apiVersion: v1, kind: Namespace, clusterScoped: true, namespaces: [a] } ] }"
            ),
            [
                format!(
                    "{AT}.managedResources[1]: apps/v1 Deployment is already listed at managedResources[0]"
                ),
                format!(
                    "{AT}.managedResources[2].apiVersion: \"apps/\" must be v1 or group/version"
                ),
                format!("{AT}.managedResources[2].kind: \"pod\" must be an UpperCamelCase kind"),
                format!(
                    "{AT}.managedResources[2].namespaces[1]: \"Shared\" must be \"*\" or a lowercase DNS label"
                ),
                format!(
                    "{AT}.managedResources[3].namespaces: a cluster-scoped kind has no namespaces"
                ),
            ]
        );
    }

    #[test]
    fn literal_template_kinds_must_be_managed() {
        assert_eq!(
            reconcile(
                "{ onReconcile: [ { apiVersion: apps/v1, kind: Deployment }, { apiVersion: '{{ .spec.v }}', kind: X }, 42 ] }"
            ),
            [
                format!(
                    "{AT}.onReconcile[0]: Deployment (apps/v1) is not listed in managedResources"
                ),
                format!(
                    "{AT}.onReconcile[2]: must be a resource object or a string holding a YAML template"
                ),
            ]
        );
    }
}
