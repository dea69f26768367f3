//! Every Wasm plugin a Blueprint names, so the host can fetch and compile them up front.

use super::crd::CrdSpec;
use super::model::Blueprint;
use super::reconcile::{PluginLimits, ReconcileSpec};
use super::refs::PullSecretRef;

/// What a plugin is expected to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginRole<'a> {
    /// A full reconciler (`reconcile.constructor`).
    Constructor,
    /// An infrastructure package (`reconcile.package`).
    Package,
    /// A hooks component, called for `function` (`reconcile.hooks[i]`).
    Hook {
        /// The function name.
        function: &'a str,
    },
}

/// One plugin reference in a Blueprint.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginRef<'a> {
    /// The CRD that names it (its `source` says which file, for relative locations).
    pub crd: &'a CrdSpec,
    /// The serve target whose reconcile block names it, if any.
    pub target: Option<&'a str>,
    /// Constructor or hook.
    pub role: PluginRole<'a>,
    /// Path, URL or OCI reference, as written.
    pub location: &'a str,
    /// The `digest` pin written next to it.
    pub digest: Option<&'a str>,
    /// The `pullSecret` written next to it.
    pub pull_secret: Option<&'a PullSecretRef>,
    /// The limits written next to it.
    pub limits: &'a PluginLimits,
    /// Where it is written, e.g. `spec.crds[0].serve.targets[1].reconcile.constructor`.
    pub field: String,
}

impl Blueprint {
    /// Every plugin named by a CRD's reconcile block or a serve target's, in document order.
    pub fn plugins(&self) -> impl Iterator<Item = PluginRef<'_>> {
        self.spec.crds.iter().flat_map(crd_plugins)
    }
}

fn crd_plugins(crd: &CrdSpec) -> Vec<PluginRef<'_>> {
    let at = crd.source.field();
    let mut out = Vec::new();
    block_plugins(
        crd,
        None,
        &crd.reconcile,
        &format!("{at}.reconcile"),
        &mut out,
    );
    if let Some(serve) = &crd.serve {
        for (i, target) in serve.targets.iter().enumerate() {
            let field = format!("{at}.serve.targets[{i}].reconcile");
            block_plugins(crd, Some(&target.name), &target.reconcile, &field, &mut out);
        }
    }
    out
}

fn block_plugins<'a>(
    crd: &'a CrdSpec,
    target: Option<&'a str>,
    spec: &'a ReconcileSpec,
    at: &str,
    out: &mut Vec<PluginRef<'a>>,
) {
    for (i, hook) in spec.hooks.iter().enumerate() {
        out.push(PluginRef {
            crd,
            target,
            role: PluginRole::Hook {
                function: &hook.function,
            },
            location: &hook.location,
            digest: hook.digest.as_deref(),
            pull_secret: hook.pull_secret.as_ref(),
            limits: &hook.limits,
            field: format!("{at}.hooks[{i}]"),
        });
    }
    if let Some(constructor) = &spec.constructor {
        out.push(PluginRef {
            crd,
            target,
            role: PluginRole::Constructor,
            location: &constructor.location,
            digest: constructor.digest.as_deref(),
            pull_secret: constructor.pull_secret.as_ref(),
            limits: &constructor.limits,
            field: format!("{at}.constructor"),
        });
    }
    if let Some(package) = &spec.package {
        out.push(PluginRef {
            crd,
            target,
            role: PluginRole::Package,
            location: &package.location,
            digest: package.digest.as_deref(),
            pull_secret: package.pull_secret.as_ref(),
            limits: &package.limits,
            field: format!("{at}.package"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::from_str;

    #[test]
    fn plugins_lists_hooks_constructors_and_serve_targets_with_their_fields() {
        let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\nspec:\n  crds:\n    - { group: a.b, version: v1, kind: A }\n    - group: a.b\n      version: v1\n      kind: B\n      reconcile:\n        hooks: [ { location: ./h.wasm, function: f, limits: { resources: 5 } } ]\n      serve:\n        targets:\n          - { name: t, reconcile: { default: false, constructor: { location: ./c.wasm } } }\n";
        let bp = from_str(text, "web.yaml").expect("valid");
        let plugins: Vec<_> = bp.plugins().collect();
        assert_eq!(plugins.len(), 2);
        assert_eq!(plugins[0].crd.kind, "B");
        assert_eq!(plugins[0].role, PluginRole::Hook { function: "f" });
        assert_eq!(plugins[0].location, "./h.wasm");
        assert_eq!(plugins[0].limits.resources, Some(5));
        assert_eq!(plugins[0].field, "spec.crds[1].reconcile.hooks[0]");
        assert_eq!(plugins[1].role, PluginRole::Constructor);
        assert_eq!(plugins[1].target, Some("t"));
        assert_eq!(
            plugins[1].field,
            "spec.crds[1].serve.targets[0].reconcile.constructor"
        );
    }
}
