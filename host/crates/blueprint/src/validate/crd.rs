//! Rules on one CRD: its names, columns, namespace filter, gates, rules and serve targets.

use std::collections::HashMap;

use super::names::{self, is_api_group, is_dns_label, is_kind, is_version};
use super::{Report, check_workers, first_seen, reconcile};
use crate::crd::{CrdSpec, Scope, ServeSpec};
use crate::error::Problem;

/// Every rule on one CRD, apart from duplicates.
pub(super) fn check(c: &CrdSpec) -> Vec<Problem> {
    let mut r = Report::new(&c.source.file, Some(&c.kind));
    let at = c.source.field();
    identity(&mut r, c, &at);
    schema_and_columns(&mut r, c, &at);
    if let Some(workers) = c.workers {
        check_workers(&mut r, workers, &format!("{at}.workers"));
    }
    namespaces(&mut r, c, &at);
    gates(&mut r, c, &at);
    emit(&mut r, c, &at);
    reconcile::check(&mut r, &c.reconcile, &format!("{at}.reconcile"));
    if let Some(serve) = &c.serve {
        serve_targets(&mut r, serve, &format!("{at}.serve"));
    }
    r.problems
}

/// The names the API server knows the CRD by: group, version, kind, plural, short names
/// and categories.
fn identity(r: &mut Report<'_>, c: &CrdSpec, at: &str) {
    r.check(
        is_api_group(&c.group),
        format!("{at}.group"),
        format!(
            "{:?} must be a lowercase DNS subdomain with a dot, e.g. demo.example.com",
            c.group
        ),
    );
    r.check(
        is_version(&c.version),
        format!("{at}.version"),
        format!("{:?} must look like v1, v1alpha1 or v2beta3", c.version),
    );
    r.check(
        is_kind(&c.kind),
        format!("{at}.kind"),
        format!("{:?} must be UpperCamelCase, e.g. WebApp", c.kind),
    );
    if let Some(plural) = &c.plural {
        r.check(
            is_dns_label(plural),
            format!("{at}.plural"),
            format!("{plural:?} must be a lowercase DNS label, e.g. webapps"),
        );
    }
    for (list, names) in [
        ("shortNames", &c.short_names),
        ("categories", &c.categories),
    ] {
        for (i, name) in names.iter().enumerate() {
            r.check(
                is_dns_label(name),
                format!("{at}.{list}[{i}]"),
                format!("{name:?} must be a lowercase DNS label, e.g. wa"),
            );
        }
    }
    r.check(
        c.crd_name().len() <= 253,
        format!("{at}.plural"),
        "plural.group must be at most 253 characters",
    );
}

/// The schema is an object; each printer column has a name, a type Kubernetes knows and
/// a field path.
fn schema_and_columns(r: &mut Report<'_>, c: &CrdSpec, at: &str) {
    if let Some(schema) = &c.schema {
        r.check(
            schema.is_object(),
            format!("{at}.schema"),
            "must be an openAPIV3Schema object",
        );
    }
    for (i, col) in c.printer_columns.iter().enumerate() {
        let f = format!("{at}.printerColumns[{i}]");
        r.check(
            !col.name.is_empty(),
            format!("{f}.name"),
            "must not be empty",
        );
        r.check(
            matches!(
                col.type_.as_str(),
                "string" | "integer" | "number" | "boolean" | "date"
            ),
            format!("{f}.type"),
            "must be string, integer, number, boolean or date",
        );
        r.check(
            names::is_field_path(&col.json_path),
            format!("{f}.jsonPath"),
            "must be a path starting with a dot, e.g. .status.phase",
        );
    }
}

/// `emit`: status field names, and condition types the CR may carry (not the host's).
fn emit(r: &mut Report<'_>, c: &CrdSpec, at: &str) {
    for key in c.emit.status.keys().filter(|k| k.is_empty()) {
        r.add(
            format!("{at}.emit.status"),
            format!("{key:?}: field names must not be empty"),
        );
    }
    if c.emit.status.contains_key("resources") {
        r.add(
            format!("{at}.emit.status.resources"),
            "status.resources is the host's: it lists the children and their states",
        );
    }
    for (i, condition) in c.emit.conditions.iter().enumerate() {
        let f = format!("{at}.emit.conditions[{i}]");
        let text = |k: &str| condition.get(k).and_then(serde_json::Value::as_str);
        match (text("type"), condition.get("status")) {
            (Some(kind), Some(_)) => {
                // A literal type must be one Kubernetes takes; the host's are refused.
                if !kind.contains("{{") {
                    r.check(
                        inrun_contract::is_condition_type(kind),
                        format!("{f}.type"),
                        "must be a CamelCase condition type, e.g. Exposed",
                    );
                    r.check(
                        !inrun_contract::HOST_CONDITIONS.contains(&kind),
                        format!("{f}.type"),
                        "Ready and Reconciled are the host's conditions",
                    );
                }
            }
            _ => r.add(f, "needs a `type` (text) and a `status`"),
        }
    }
}

fn namespaces(r: &mut Report<'_>, c: &CrdSpec, at: &str) {
    let filter = &c.namespaces;
    if c.scope == Scope::Cluster && (!filter.include.is_empty() || !filter.exclude.is_empty()) {
        r.add(
            format!("{at}.namespaces"),
            "a Cluster-scoped CRD has no namespaces to filter",
        );
    }
    for (list, names) in [("include", &filter.include), ("exclude", &filter.exclude)] {
        for (i, ns) in names.iter().enumerate() {
            r.check(
                is_dns_label(ns),
                format!("{at}.namespaces.{list}[{i}]"),
                format!("{ns:?} must be a lowercase DNS label"),
            );
        }
    }
}

fn gates(r: &mut Report<'_>, c: &CrdSpec, at: &str) {
    let mut seen = HashMap::new();
    for (i, gate) in c.pre_reconcile.iter().enumerate() {
        let f = format!("{at}.preReconcile[{i}]");
        r.check(
            !gate.name.is_empty(),
            format!("{f}.name"),
            "must not be empty",
        );
        if let Some(first) = first_seen(&mut seen, gate.name.as_str(), i) {
            r.add(
                format!("{f}.name"),
                format!("{:?} is already used by preReconcile[{first}]", gate.name),
            );
        }
        r.check(
            !gate.when.trim().is_empty(),
            format!("{f}.when"),
            "must not be empty",
        );
    }
    for (i, rule) in c.validation.iter().enumerate() {
        r.check(
            !rule.rule.trim().is_empty(),
            format!("{at}.validation[{i}].rule"),
            "must not be empty",
        );
    }
}

fn serve_targets(r: &mut Report<'_>, serve: &ServeSpec, at: &str) {
    match (&serve.selector.annotation, &serve.selector.field) {
        (Some(a), None) => r.check(
            names::is_qualified_name(a),
            format!("{at}.selector.annotation"),
            format!("{a:?} must be an annotation key such as inrun.dev/target"),
        ),
        (None, Some(f)) => r.check(
            f.is_single(),
            format!("{at}.selector.field"),
            format!("{:?} must name one field, without [*]", f.as_str()),
        ),
        _ => r.add(
            format!("{at}.selector"),
            "set exactly one of annotation and field",
        ),
    }
    r.check(
        !serve.targets.is_empty(),
        format!("{at}.targets"),
        "must list at least one target",
    );
    let mut seen = HashMap::new();
    for (i, target) in serve.targets.iter().enumerate() {
        let f = format!("{at}.targets[{i}]");
        r.check(
            is_dns_label(&target.name),
            format!("{f}.name"),
            format!("{:?} must be a lowercase DNS label", target.name),
        );
        if let Some(first) = first_seen(&mut seen, target.name.as_str(), i) {
            r.add(
                format!("{f}.name"),
                format!(
                    "target {:?} is already declared at targets[{first}]",
                    target.name
                ),
            );
        }
        reconcile::check(r, &target.reconcile, &format!("{f}.reconcile"));
        r.check(
            target.reconcile.rollouts().is_empty(),
            format!("{f}.reconcile.rollout"),
            "a rollout governs every reconcile block of its CRD: set it on the CRD's own reconcile",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{lines, with_crds};

    #[test]
    fn crd_names_follow_kubernetes_rules() {
        let text = with_crds(&["{ group: demo, version: v01, kind: webApp, plural: Web_Apps }"]);
        let got = lines(&text);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got[0].starts_with("web.yaml: crd webApp: spec.crds[0].group: \"demo\" must be"));
        assert!(got[1].starts_with("web.yaml: crd webApp: spec.crds[0].version: "));
        assert!(got[2].starts_with("web.yaml: crd webApp: spec.crds[0].kind: "));
        assert!(got[3].starts_with("web.yaml: crd webApp: spec.crds[0].plural: "));
    }

    #[test]
    fn short_names_and_categories_are_dns_labels_and_a_short_name_names_one_type() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, shortNames: [wa, W_A], categories: [Apps] }",
            "{ group: other.inrun.dev, version: v1, kind: Widget, shortNames: [wa] }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd WebApp: spec.crds[0].shortNames[1]: \"W_A\" must be a lowercase DNS label, e.g. wa",
                "web.yaml: crd WebApp: spec.crds[0].categories[0]: \"Apps\" must be a lowercase DNS label, e.g. wa",
                "web.yaml: crd Widget: spec.crds[1].shortNames[0]: the short name \"wa\" is already taken by crd WebApp (web.yaml spec.crds[0])",
            ]
        );
    }

    #[test]
    fn serve_targets_need_unique_names() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, serve: { targets: [ { name: fast }, { name: fast } ] } }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd WebApp: spec.crds[0].serve.targets[1].name: target \"fast\" is already declared at targets[0]"
            ]
        );
    }

    #[test]
    fn serve_targets_are_validated_like_crds() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, serve: { selector: { annotation: a/b, field: .spec.t }, targets: [ { name: slow, reconcile: { default: false } } ] } }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd WebApp: spec.crds[0].serve.selector: set exactly one of annotation and field",
                "web.yaml: crd WebApp: spec.crds[0].serve.targets[0].reconcile: default: false needs a constructor, a remote or a package",
            ]
        );
    }

    #[test]
    fn cluster_scoped_crds_have_no_namespace_filter() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: Tenant, scope: Cluster, namespaces: { include: [Default] } }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd Tenant: spec.crds[0].namespaces: a Cluster-scoped CRD has no namespaces to filter",
                "web.yaml: crd Tenant: spec.crds[0].namespaces.include[0]: \"Default\" must be a lowercase DNS label",
            ]
        );
    }

    #[test]
    fn gates_and_rules_need_content() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, preReconcile: [ { name: ready, when: x }, { name: ready, when: '' } ], validation: [ { rule: ' ' } ] }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd WebApp: spec.crds[0].preReconcile[1].name: \"ready\" is already used by preReconcile[0]",
                "web.yaml: crd WebApp: spec.crds[0].preReconcile[1].when: must not be empty",
                "web.yaml: crd WebApp: spec.crds[0].validation[0].rule: must not be empty",
            ]
        );
    }
}
