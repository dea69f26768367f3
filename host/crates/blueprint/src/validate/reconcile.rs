//! Rules on a `reconcile` block, a CRD's or a serve target's.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::names;
use super::refs::secret_ref;
use super::{MAX_CALL_TIME, Report, first_seen};
use crate::location::{Location, LocationError};
use crate::quantity::Quantity;
use crate::reconcile::{
    HookSpec, PluginLimits, PluginSpec, PruneSpec, ReconcileSpec, RemoteSpec, RequestSpec,
    RequeueSpec,
};
use crate::refs::PullSecretRef;

/// Checks `spec`, whose field path is `at` (e.g. `spec.crds[0].reconcile`).
pub(super) fn check(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    reconciler(r, spec, at);
    for (list, templates) in [
        ("onCreate", &spec.on_create),
        ("onReconcile", &spec.on_reconcile),
        ("onDelete", &spec.on_delete),
    ] {
        for (i, template) in templates.iter().enumerate() {
            resource_template(r, spec, template, &format!("{at}.{list}[{i}]"));
        }
    }
    for key in spec.args.keys().filter(|k| k.is_empty()) {
        r.add(
            format!("{at}.args"),
            format!("{key:?}: argument names must not be empty"),
        );
    }
    managed_resources(r, spec, at);
    managed_types(r, spec, at);
    prune_keep(r, &spec.prune, at);
    if let Some(requeue) = &spec.requeue {
        self::requeue(r, requeue, &format!("{at}.requeue"));
    }
    external_calls(r, spec, at);
}

/// `prune.keep`: each entry a Kind or group/Kind.
fn prune_keep(r: &mut Report<'_>, prune: &PruneSpec, at: &str) {
    for (i, entry) in prune.keep.iter().enumerate() {
        let ok = match entry.split_once('/') {
            Some((group, kind)) => names::is_dns_subdomain(group) && names::is_kind(kind),
            None => names::is_kind(entry),
        };
        r.check(
            ok,
            format!("{at}.prune.keep[{i}]"),
            format!("{entry:?} must be Kind or group/Kind, e.g. PersistentVolumeClaim or apps/StatefulSet"),
        );
    }
}

/// `requeue` (at `f`): something to wait for, `or` only beside `when`, no empty condition.
fn requeue(r: &mut Report<'_>, requeue: &RequeueSpec, f: &str) {
    if requeue.after.is_none() && requeue.when.is_none() && requeue.or_when.is_empty() {
        r.add(f, "set after, when, or both");
    }
    if !requeue.or_when.is_empty() && requeue.when.is_none() {
        r.add(
            format!("{f}.or"),
            "or adds alternatives to when, so it needs when",
        );
    }
    if requeue.when.as_ref().is_some_and(|w| w.trim().is_empty()) {
        r.add(format!("{f}.when"), "must not be empty");
    }
    for (i, alt) in requeue.or_when.iter().enumerate() {
        r.check(
            !alt.trim().is_empty(),
            format!("{f}.or[{i}]"),
            "must not be empty",
        );
    }
}

/// `external`: each call named once, and each valid.
fn external_calls(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    let mut seen = HashMap::new();
    for (i, call) in spec.external.iter().enumerate() {
        let f = format!("{at}.external[{i}]");
        if let Some(first) = first_seen(&mut seen, call.name.as_str(), i) {
            r.add(
                format!("{f}.name"),
                format!("{:?} is already used by external[{first}]", call.name),
            );
        }
        super::external::check(r, call, &f);
    }
}

/// Which reconciler: `default` decides between templates (+ hooks) and constructor / remote.
fn reconciler(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    if spec.default {
        templates_only(r, spec, at);
    } else {
        one_reconciler(r, spec, at);
    }
    for (i, hook) in spec.hooks.iter().enumerate() {
        self::hook(r, hook, &format!("{at}.hooks[{i}]"));
    }
    if let Some(constructor) = &spec.constructor {
        self::constructor(r, constructor, &format!("{at}.constructor"));
    }
    if let Some(remote) = &spec.remote {
        self::remote(r, remote, &format!("{at}.remote"));
    }
    if let Some(package) = &spec.package {
        self::package(r, package, &format!("{at}.package"));
        package_only(r, spec, at);
    }
}

/// `default: true`: templates (and hooks) reconcile, so no constructor, remote or package.
fn templates_only(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    if spec.constructor.is_some() {
        r.add(
            format!("{at}.constructor"),
            "a constructor needs default: false",
        );
    }
    if spec.remote.is_some() {
        r.add(
            format!("{at}.remote"),
            "a remote reconciler needs default: false",
        );
    }
    if spec.package.is_some() {
        r.add(format!("{at}.package"), "a package needs default: false");
    }
}

/// `default: false`: exactly one of constructor, remote and package, and no templates or
/// hooks for it to ignore.
fn one_reconciler(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    let chosen = [
        spec.constructor.is_some(),
        spec.remote.is_some(),
        spec.package.is_some(),
    ];
    match chosen.iter().filter(|c| **c).count() {
        0 => r.add(
            at,
            "default: false needs a constructor, a remote or a package",
        ),
        1 => {}
        _ if spec.package.is_none() => {
            r.add(at, "set only one of constructor and remote");
        }
        _ => r.add(at, "set only one of constructor, remote and package"),
    }
    if !spec.hooks.is_empty() {
        r.add(
            format!("{at}.hooks"),
            "hooks adjust what templates render, so they need default: true",
        );
    }
    for (list, templates) in [
        ("onCreate", &spec.on_create),
        ("onReconcile", &spec.on_reconcile),
        ("onDelete", &spec.on_delete),
    ] {
        if !templates.is_empty() {
            r.add(
                format!("{at}.{list}"),
                "templates need default: true; with default: false the reconciler returns the resources",
            );
        }
    }
}

/// One hook (at `f`): where it comes from, a function name, its limits and capabilities.
fn hook(r: &mut Report<'_>, hook: &HookSpec, f: &str) {
    location(
        r,
        &hook.location,
        hook.digest.as_deref(),
        hook.pull_secret.as_ref(),
        f,
    );
    r.check(
        !hook.function.trim().is_empty(),
        format!("{f}.function"),
        "must not be empty",
    );
    limits(r, &hook.limits, &format!("{f}.limits"));
    super::capabilities::check(r, &hook.capabilities, &format!("{f}.capabilities"));
    only_packages_read_credentials(r, &hook.capabilities, f);
}

/// The constructor (at `f`): where it comes from, its limits and capabilities.
fn constructor(r: &mut Report<'_>, constructor: &PluginSpec, f: &str) {
    location(
        r,
        &constructor.location,
        constructor.digest.as_deref(),
        constructor.pull_secret.as_ref(),
        f,
    );
    limits(r, &constructor.limits, &format!("{f}.limits"));
    super::capabilities::check(r, &constructor.capabilities, &format!("{f}.capabilities"));
    only_packages_read_credentials(r, &constructor.capabilities, f);
}

/// The package (at `f`): where it comes from, its limits and capabilities, which reach
/// outside the cluster only.
fn package(r: &mut Report<'_>, package: &PluginSpec, f: &str) {
    location(
        r,
        &package.location,
        package.digest.as_deref(),
        package.pull_secret.as_ref(),
        f,
    );
    // Callbacks own their timeouts: a package may wait on its backend for hours.
    limits_up_to(
        r,
        &package.limits,
        &format!("{f}.limits"),
        MAX_PACKAGE_CALL_TIME,
    );
    super::capabilities::check(r, &package.capabilities, &format!("{f}.capabilities"));
    if package.capabilities.cluster.is_some() {
        r.add(
            format!("{f}.capabilities.cluster"),
            "a package manages infrastructure outside Kubernetes and reads no cluster objects; grant http instead",
        );
    }
}

/// `credentials` are a package's: a hook or constructor reads what it needs through
/// `capabilities.cluster` and the reconcile block's `external` inputs.
fn only_packages_read_credentials(
    r: &mut Report<'_>,
    caps: &crate::capabilities::Capabilities,
    at: &str,
) {
    if !caps.credentials.is_empty() {
        r.add(
            format!("{at}.capabilities.credentials"),
            "only a package reads credentials; a hook or constructor gets Secret values through the reconcile block's external inputs",
        );
    }
}

/// A package writes no Kubernetes objects and takes its inputs from `spec.config`, so the
/// fields that shape children or a Request mean nothing for it.
fn package_only(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
    let unused = [
        ("args", !spec.args.is_empty()),
        ("managedResources", !spec.managed_resources.is_empty()),
        ("managedTypes", !spec.managed_types.is_empty()),
        ("external", !spec.external.is_empty()),
        ("requeue", spec.requeue.is_some()),
        ("request", spec.request != RequestSpec::default()),
        ("prune", spec.prune != PruneSpec::default()),
    ];
    for (field, set) in unused {
        if set {
            r.add(
                format!("{at}.{field}"),
                "a package writes no Kubernetes objects and reads its inputs from spec.config; leave this out (spec.reconcileInterval on the CR sets how often it is checked)",
            );
        }
    }
}

/// `location`, `digest` and `pullSecret` of a plugin: a path, an `https://` URL pinned by
/// a digest, or an `oci://` reference (the only kind with a pull secret).
fn location(
    r: &mut Report<'_>,
    location: &str,
    digest: Option<&str>,
    pull_secret: Option<&PullSecretRef>,
    at: &str,
) {
    if location.trim().is_empty() {
        r.add(format!("{at}.location"), "must not be empty");
        return;
    }
    // Paths are only checked for shape here; the base directory does not matter.
    match Location::parse(location, digest, Path::new(".")) {
        Ok(parsed) => {
            if pull_secret.is_some() && !matches!(parsed, Location::Oci { .. }) {
                r.add(
                    format!("{at}.pullSecret"),
                    "only an oci:// location is pulled with a pull secret",
                );
            }
        }
        Err(e) => {
            let field = match &e {
                LocationError::MissingDigest { .. }
                | LocationError::DigestOnFile { .. }
                | LocationError::ConflictingDigest { .. } => "digest",
                LocationError::BadDigest { digest: bad } if Some(bad.as_str()) == digest => {
                    "digest"
                }
                _ => "location",
            };
            r.add(format!("{at}.{field}"), e.to_string());
        }
    }
    if let Some(secret) = pull_secret {
        r.check(
            names::is_dns_label(&secret.namespace),
            format!("{at}.pullSecret.namespace"),
            "must be a lowercase DNS label",
        );
        r.check(
            names::is_dns_subdomain(&secret.name),
            format!("{at}.pullSecret.name"),
            "must be a Secret name (a lowercase DNS subdomain)",
        );
    }
}

fn limits(r: &mut Report<'_>, limits: &PluginLimits, at: &str) {
    limits_up_to(r, limits, at, MAX_CALL_TIME);
}

/// The longest a package call may be given: a day.
const MAX_PACKAGE_CALL_TIME: Duration = Duration::from_secs(24 * 3600);

/// [`limits`], the deadline up to `max_deadline`.
fn limits_up_to(r: &mut Report<'_>, limits: &PluginLimits, at: &str, max_deadline: Duration) {
    if let Some(deadline) = limits.deadline {
        r.check(
            deadline <= max_deadline,
            format!("{at}.deadline"),
            format!(
                "must be at most {}",
                inrun_contract::duration::format(max_deadline)
            ),
        );
    }
    let sizes = [
        (
            "memory",
            limits.memory,
            Quantity::MI,
            Quantity::from_bytes(4 << 30),
        ),
        (
            "outputSize",
            limits.output_size,
            Quantity::KI,
            Quantity::from_bytes(64 << 20),
        ),
    ];
    for (name, value, min, max) in sizes {
        if let Some(value) = value {
            r.check(
                (min..=max).contains(&value),
                format!("{at}.{name}"),
                format!("must be between {min} and {max}"),
            );
        }
    }
    if let Some(resources) = limits.resources {
        r.check(
            (1..=10_000).contains(&resources),
            format!("{at}.resources"),
            "must be between 1 and 10000",
        );
    }
}

fn remote(r: &mut Report<'_>, remote: &RemoteSpec, at: &str) {
    r.check(
        is_http_url(&remote.endpoint),
        format!("{at}.endpoint"),
        "must be an http:// or https:// URL",
    );
    // The endpoint is told in every error, which CR authors read in status and events:
    // credentials written into it would be told with it.
    r.check(
        !has_userinfo(&remote.endpoint),
        format!("{at}.endpoint"),
        "must not carry credentials (user:password@): put a token in a Secret and name it in auth.secretRef",
    );
    if let Some(auth) = &remote.auth {
        secret_ref(r, &auth.secret_ref, &format!("{at}.auth.secretRef"));
    }
    r.check(
        remote.timeout <= MAX_CALL_TIME,
        format!("{at}.timeout"),
        "must be at most 5m",
    );
}

/// Whether a URL's authority carries `user[:password]@`.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.contains('@')
}

fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    })
}

/// A template is an object, or a string holding a YAML template; a literal object's kind
/// must be one the reconciler may write.
fn resource_template(r: &mut Report<'_>, spec: &ReconcileSpec, template: &Value, at: &str) {
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

fn managed_types(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
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

fn managed_resources(r: &mut Report<'_>, spec: &ReconcileSpec, at: &str) {
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
    fn default_false_needs_a_constructor_or_a_remote() {
        assert_eq!(
            reconcile("{ default: false, onReconcile: [ 'kind: ConfigMap' ] }"),
            [
                format!("{AT}: default: false needs a constructor, a remote or a package"),
                format!(
                    "{AT}.onReconcile: templates need default: true; with default: false the reconciler returns the resources"
                ),
            ]
        );
    }

    #[test]
    fn a_package_needs_default_false_stands_alone_and_writes_no_kubernetes_objects() {
        assert_eq!(
            reconcile("{ package: { location: ./p.wasm } }"),
            [format!("{AT}.package: a package needs default: false")]
        );
        assert_eq!(
            reconcile(
                "{ default: false, package: { location: ./p.wasm }, constructor: { location: ./c.wasm } }"
            ),
            [format!(
                "{AT}: set only one of constructor, remote and package"
            )]
        );
        let unused = "a package writes no Kubernetes objects and reads its inputs from spec.config; leave this out (spec.reconcileInterval on the CR sets how often it is checked)";
        let mut got = reconcile(
            "{ default: false, package: { location: ./p.wasm, capabilities: { cluster: { read: [ { apiVersion: v1, kind: ConfigMap } ] } } }, args: { a: b }, managedResources: [ { apiVersion: v1, kind: ConfigMap } ], requeue: { after: 1m } }",
        );
        got.sort();
        let mut want = vec![
            format!(
                "{AT}.package.capabilities.cluster: a package manages infrastructure outside Kubernetes and reads no cluster objects; grant http instead"
            ),
            format!("{AT}.args: {unused}"),
            format!("{AT}.managedResources: {unused}"),
            format!("{AT}.requeue: {unused}"),
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn credentials_are_a_packages_and_name_secrets_and_keys_well() {
        let mut got = reconcile(
            "{ default: false, package: { location: ./p.wasm, capabilities: { credentials: [ { secret: Bad_Name, keys: [] }, { secret: ok, keys: ['a/b'] }, { secret: ok, keys: [x] } ] } } }",
        );
        got.sort();
        let f = format!("{AT}.package.capabilities.credentials");
        let mut want = vec![
            format!(
                "{f}[0].secret: \"Bad_Name\" must be a Secret's name (a lowercase DNS subdomain)"
            ),
            format!("{f}[0].keys: list the keys the package may read"),
            format!(
                "{f}[1].keys[0]: \"a/b\" must be a Secret key (letters, digits, '-', '_' and '.')"
            ),
            format!("{f}[2].secret: Secret ok is already listed at credentials[1]"),
        ];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(
            reconcile(
                "{ default: false, constructor: { location: ./c.wasm, capabilities: { credentials: [ { secret: s, keys: [k] } ] } } }"
            ),
            [format!(
                "{AT}.constructor.capabilities.credentials: only a package reads credentials; a hook or constructor gets Secret values through the reconcile block's external inputs"
            )]
        );
    }

    #[test]
    fn constructor_and_remote_are_exclusive() {
        assert_eq!(
            reconcile(
                "{ default: false, constructor: { location: ./a.wasm }, remote: { endpoint: 'http://x' } }"
            ),
            [format!("{AT}: set only one of constructor and remote")]
        );
    }

    #[test]
    fn a_remote_endpoint_carries_no_credentials() {
        assert_eq!(
            reconcile(
                "{ default: false, remote: { endpoint: 'https://robot:hunter2@reconciler.example.com/r' } }"
            ),
            [format!(
                "{AT}.remote.endpoint: must not carry credentials (user:password@): put a token in a Secret and name it in auth.secretRef"
            )]
        );
        // An `@` in the path or query is no credential.
        assert!(!super::has_userinfo(
            "https://reconciler.example.com/r?owner=a@b"
        ));
        assert!(!super::has_userinfo(
            "https://reconciler.example.com/users/@me"
        ));
        assert!(super::has_userinfo("http://token@10.0.0.1:8080/r"));
    }

    #[test]
    fn default_true_refuses_constructor_and_remote() {
        assert_eq!(
            reconcile("{ constructor: { location: ./a.wasm }, remote: { endpoint: 'ftp://x' } }"),
            [
                format!("{AT}.constructor: a constructor needs default: false"),
                format!("{AT}.remote: a remote reconciler needs default: false"),
                format!("{AT}.remote.endpoint: must be an http:// or https:// URL"),
            ]
        );
    }

    #[test]
    fn hooks_need_default_true_a_location_and_a_function() {
        assert_eq!(
            reconcile(
                "{ default: false, remote: { endpoint: 'http://x' }, hooks: [ { location: '', function: ' ' } ] }"
            ),
            [
                format!(
                    "{AT}.hooks: hooks adjust what templates render, so they need default: true"
                ),
                format!("{AT}.hooks[0].location: must not be empty"),
                format!("{AT}.hooks[0].function: must not be empty"),
            ]
        );
    }

    #[test]
    fn plugin_locations_are_pinned_well_formed_and_pulled_with_secrets_only_from_oci() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            reconcile(&format!(
                "{{ hooks: [ \
                 {{ location: 'https://p.example.com/h.wasm', function: f }}, \
                 {{ location: 'http://p.example.com/h.wasm', digest: '{d}', function: f }}, \
                 {{ location: 'oci://127.0.0.1:5000/h:1', digest: 'sha256:XYZ', function: f }}, \
                 {{ location: 'oci://h:1', function: f }}, \
                 {{ location: ./h.wasm, pullSecret: {{ namespace: ns, name: creds }}, function: f }}, \
                 {{ location: 'oci://r.example.com/team/h:1', digest: '{d}', pullSecret: {{ namespace: Bad, name: creds }}, function: f }}, \
                 {{ location: 'https://p.example.com/h.wasm', digest: '{d}', function: f }} ] }}"
            )),
            [
                format!(
                    "{AT}.hooks[0].digest: https://p.example.com/h.wasm needs a digest (sha256:<64 hex digits>): an https:// location must be pinned"
                ),
                format!(
                    "{AT}.hooks[1].location: location \"http://p.example.com/h.wasm\" uses plain http://; use https:// with a digest, or an oci:// reference"
                ),
                format!(
                    "{AT}.hooks[2].digest: digest \"sha256:XYZ\" is not sha256: followed by 64 lowercase hex digits"
                ),
                format!(
                    "{AT}.hooks[3].location: location \"oci://h:1\" must be oci://registry/repository:tag"
                ),
                format!(
                    "{AT}.hooks[4].pullSecret: only an oci:// location is pulled with a pull secret"
                ),
                format!("{AT}.hooks[5].pullSecret.namespace: must be a lowercase DNS label"),
            ]
        );
    }

    #[test]
    fn plugin_limits_must_be_sane() {
        assert_eq!(
            reconcile(
                "{ default: false, constructor: { location: ./a.wasm, limits: { deadline: 10m, memory: 512Ki, outputSize: 1Gi, resources: 0 } } }"
            ),
            [
                format!("{AT}.constructor.limits.deadline: must be at most 5m"),
                format!("{AT}.constructor.limits.memory: must be between 1Mi and 4Gi"),
                format!("{AT}.constructor.limits.outputSize: must be between 1Ki and 64Mi"),
                format!("{AT}.constructor.limits.resources: must be between 1 and 10000"),
            ]
        );
        // A package may wait on its backend for hours, not days.
        let hours = super::super::tests::with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: { default: false, package: { location: ./p.wasm, limits: { deadline: 2h } } } }",
        ]);
        assert!(crate::from_str(&hours, "web.yaml").is_ok(), "{hours}");
        assert_eq!(
            reconcile(
                "{ default: false, package: { location: ./p.wasm, limits: { deadline: 25h } } }"
            ),
            [format!("{AT}.package.limits.deadline: must be at most 24h")]
        );
    }

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

    #[test]
    fn prune_keep_and_requeue_are_checked() {
        assert_eq!(
            reconcile(
                "{ prune: { keep: [PersistentVolumeClaim, apps/StatefulSet, 'apps/v1/StatefulSet', secret] }, requeue: { or: ['{{ x }}'] } }"
            ),
            [
                format!(
                    "{AT}.prune.keep[2]: \"apps/v1/StatefulSet\" must be Kind or group/Kind, e.g. PersistentVolumeClaim or apps/StatefulSet"
                ),
                format!(
                    "{AT}.prune.keep[3]: \"secret\" must be Kind or group/Kind, e.g. PersistentVolumeClaim or apps/StatefulSet"
                ),
                format!("{AT}.requeue.or: or adds alternatives to when, so it needs when"),
            ]
        );
        assert_eq!(
            reconcile("{ requeue: {} }"),
            [format!("{AT}.requeue: set after, when, or both")]
        );
    }
}
