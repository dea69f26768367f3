//! Rules on a `reconcile` block, a CRD's or a serve target's.

use std::collections::HashMap;

use super::managed::{managed_resources, managed_types, resource_template};
use super::names;
use super::plugin;
use super::refs::secret_ref;
use super::{MAX_CALL_TIME, Report, first_seen};
use crate::reconcile::{PruneSpec, ReconcileSpec, RemoteSpec, RequestSpec, RequeueSpec};

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
    let rollouts = spec.rollouts();
    for (field, rollout) in &rollouts {
        self::rollout(r, rollout, &format!("{at}.{field}"));
    }
    if rollouts.len() > 1 {
        let fields: Vec<&str> = rollouts.iter().map(|(f, _)| f.as_str()).collect();
        r.add(
            at,
            format!(
                "a rollout is written once a block; found {}",
                fields.join(" and ")
            ),
        );
    }
}

/// Most steps a rollout may take.
const MAX_STEPS: usize = 20;

/// `rollout`: steps increasing to 100, a window of a second to an hour, rates within 0..1.
fn rollout(r: &mut Report<'_>, rollout: &crate::RolloutSpec, at: &str) {
    r.check(
        !rollout.steps.is_empty() && rollout.steps.len() <= MAX_STEPS,
        format!("{at}.steps"),
        format!("1 to {MAX_STEPS} steps"),
    );
    let mut before = 0;
    for (i, step) in rollout.steps.iter().enumerate() {
        let f = format!("{at}.steps[{i}].percent");
        if !(1..=100).contains(&step.percent) {
            r.add(f, "must be 1 to 100");
        } else if step.percent <= before {
            r.add(f, format!("must be more than the step before ({before})"));
        }
        before = before.max(step.percent);
        if let Some(pause) = step.pause {
            r.check(
                pause <= std::time::Duration::from_secs(24 * 3600),
                format!("{at}.steps[{i}].pause"),
                "at most 24h",
            );
        }
    }
    r.check(
        rollout.steps.last().is_none_or(|s| s.percent == 100),
        format!("{at}.steps"),
        "the last step must be 100",
    );
    let analysis = &rollout.analysis;
    r.check(
        analysis.window >= std::time::Duration::from_secs(1)
            && analysis.window <= std::time::Duration::from_secs(3600),
        format!("{at}.analysis.window"),
        "1s to 1h",
    );
    for (name, value) in [
        ("maxFailureRate", analysis.max_failure_rate),
        ("minReadyRatio", analysis.min_ready_ratio),
    ] {
        r.check(
            (0.0..=1.0).contains(&value),
            format!("{at}.analysis.{name}"),
            "must be 0 to 1",
        );
    }
    if let Some(select) = &rollout.select {
        for (i, ns) in select.namespaces.iter().enumerate() {
            let name = ns.strip_suffix('*').unwrap_or(ns);
            let prefix_ok = name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            r.check(
                !ns.is_empty() && prefix_ok,
                format!("{at}.select.namespaces[{i}]"),
                "a namespace, or a prefix ending in `*`",
            );
        }
    }
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
        plugin::hook(r, hook, &format!("{at}.hooks[{i}]"));
    }
    if let Some(constructor) = &spec.constructor {
        plugin::constructor(r, constructor, &format!("{at}.constructor"));
    }
    if let Some(remote) = &spec.remote {
        self::remote(r, remote, &format!("{at}.remote"));
    }
    if let Some(package) = &spec.package {
        plugin::package(r, package, &format!("{at}.package"));
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

    #[test]
    fn a_rollout_steps_up_to_100_and_keeps_its_thresholds_in_range() {
        let good = super::super::tests::with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: { rollout: { steps: [ { percent: 5, pause: 2m }, { percent: 100 } ], select: { namespaces: [ canary-*, web ] }, analysis: { window: 1m, maxFailureRate: 0.02, minReadyRatio: 0.95 }, onFailure: pause } } }",
        ]);
        let bp = crate::from_str(&good, "web.yaml").expect("a good rollout");
        let rollout = bp.spec.crds[0].reconcile.rollout.clone().expect("rollout");
        assert_eq!(rollout.on_failure, crate::OnFailure::Pause);
        assert!(rollout.select.is_some_and(|s| s.selects(Some("canary-eu"))
            && s.selects(Some("web"))
            && !s.selects(Some("webs"))
            && !s.selects(None)));
        assert_eq!(
            reconcile(
                "{ rollout: { steps: [ { percent: 50 }, { percent: 20 }, { percent: 0 } ], select: { namespaces: [ 'Bad_NS' ] }, analysis: { window: 500ms, maxFailureRate: 2 } } }"
            ),
            [
                format!("{AT}.rollout.steps[1].percent: must be more than the step before (50)"),
                format!("{AT}.rollout.steps[2].percent: must be 1 to 100"),
                format!("{AT}.rollout.steps: the last step must be 100"),
                format!("{AT}.rollout.analysis.window: 1s to 1h"),
                format!("{AT}.rollout.analysis.maxFailureRate: must be 0 to 1"),
                format!(
                    "{AT}.rollout.select.namespaces[0]: a namespace, or a prefix ending in `*`"
                ),
            ]
        );
        assert_eq!(
            reconcile("{ rollout: { steps: [] } }"),
            [format!("{AT}.rollout.steps: 1 to 20 steps"),]
        );
    }

    #[test]
    fn a_rollout_written_on_the_plugin_it_governs_is_the_blocks_and_written_once() {
        let on_plugin = super::super::tests::with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: { default: false, constructor: { location: ./c.wasm, rollout: { steps: [ { percent: 100 } ] } } } }",
        ]);
        let bp = crate::from_str(&on_plugin, "web.yaml").expect("a rollout on the constructor");
        let block = &bp.spec.crds[0].reconcile;
        assert!(block.rollout.is_some(), "hoisted to the block");
        assert!(
            block
                .constructor
                .as_ref()
                .is_some_and(|c| c.rollout.is_none())
        );
        assert_eq!(
            reconcile(
                "{ default: false, remote: { endpoint: 'https://r.example.com', rollout: { steps: [ { percent: 100 } ] } }, rollout: { steps: [ { percent: 100 } ] } }"
            ),
            [format!(
                "{AT}: a rollout is written once a block; found rollout and remote.rollout"
            )]
        );
    }
}
