//! Whether a CR, and what its reconciler returned, may go further: validation rules, the
//! `preReconcile` gate, and the `managedResources` fence before anything is written.

use serde_json::Value;

use super::{CrdPlan, ReconcilePlan, StepError, template};
use inrun_contract::Outcome;
use inrun_template::Context;

impl CrdPlan {
    /// Checks the CR against the validation rules and namespace rules.
    ///
    /// # Errors
    /// [`StepError::Invalid`] with every broken rule's message.
    pub fn validate(&self, object: &Value, ctx: &Context) -> Result<(), StepError> {
        let mut failed = Vec::new();
        if let Some(ns) = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            && !self.spec.namespaces.allows(ns)
        {
            failed.push(format!("namespace {ns:?} is not served by this CRD"));
        }
        for rule in &self.rules {
            match rule.rule.eval(ctx) {
                Ok(true) => {}
                Ok(false) => failed.push(
                    rule.message
                        .clone()
                        .unwrap_or_else(|| format!("rule {} is false", rule.text)),
                ),
                Err(e) => failed.push(format!(
                    "rule {} failed: {}",
                    rule.text,
                    inrun_contract::errors::chain(&e)
                )),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(StepError::Invalid(failed))
        }
    }

    /// The first `preReconcile` condition that does not hold, as a message; `None` lets the
    /// CR through. Never call it for a CR being deleted.
    ///
    /// # Errors
    /// [`StepError::Template`] when a condition fails to render.
    pub fn gate(&self, ctx: &Context) -> Result<Option<String>, StepError> {
        for gate in &self.gates {
            if !gate.when.eval(ctx).map_err(template("preReconcile"))? {
                return Ok(Some(
                    gate.message
                        .clone()
                        .unwrap_or_else(|| format!("waiting for {}", gate.name)),
                ));
            }
        }
        Ok(None)
    }
}

impl ReconcilePlan {
    /// Checks every resource against `managedResources` before anything is written. An
    /// object without a namespace is allowed if its kind may be cluster-scoped or live in
    /// the CR's own namespace.
    ///
    /// # Errors
    /// [`StepError::Forbidden`] for the first object not allowed;
    /// [`StepError::UndeclaredType`] for a type-defining object whose instances the host
    /// may not list.
    pub fn fence(&self, outcome: &Outcome, cr_namespace: &str) -> Result<(), StepError> {
        for (index, r) in outcome.resources.iter().enumerate() {
            let text = |p: &str| text_at(r, p);
            let (api_version, kind) = (text("/apiVersion"), text("/kind"));
            let namespace = r.pointer("/metadata/namespace").and_then(Value::as_str);
            if !self.allows(&api_version, &kind, namespace, cr_namespace) {
                return Err(StepError::Forbidden {
                    index,
                    api_version,
                    kind,
                    name: text("/metadata/name"),
                    namespace: namespace.map(str::to_string),
                });
            }
            self.lists_what_it_defines(index, r, &api_version, &kind)?;
        }
        Ok(())
    }

    /// Whether `managedResources` allow an object of this kind in `namespace`; one without
    /// a namespace may be cluster-scoped or land in the CR's own.
    fn allows(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        cr_namespace: &str,
    ) -> bool {
        match namespace {
            Some(ns) => self.spec.allows(api_version, kind, Some(ns), cr_namespace),
            None => {
                self.spec.allows(api_version, kind, None, cr_namespace)
                    || self
                        .spec
                        .allows(api_version, kind, Some(cr_namespace), cr_namespace)
            }
        }
    }

    /// For a CRD or APIService child, whether the host may list the instances of the type
    /// it defines (its deletion safeguard needs to).
    ///
    /// # Errors
    /// [`StepError::UndeclaredType`] when neither `managedTypes` nor `managedResources`
    /// names the type.
    fn lists_what_it_defines(
        &self,
        index: usize,
        r: &Value,
        api_version: &str,
        kind: &str,
    ) -> Result<(), StepError> {
        let text = |p: &str| text_at(r, p);
        let defined = match (api_version, kind) {
            (v, k) if (v, k) == inrun_blueprint::TYPE_DEFINING[0] => Some((
                text("/spec/group"),
                Some((text("/spec/names/kind"), text("/spec/names/plural"))),
            )),
            (v, k) if (v, k) == inrun_blueprint::TYPE_DEFINING[1] => {
                Some((text("/spec/group"), None))
            }
            _ => None,
        };
        if let Some((group, defined_kind)) = defined
            && !self.spec.lists_instances_of(
                &group,
                defined_kind.as_ref().map(|(k, p)| (k.as_str(), p.as_str())),
            )
        {
            return Err(StepError::UndeclaredType {
                index,
                kind: kind.to_string(),
                name: text("/metadata/name"),
                defines: match defined_kind {
                    Some((k, p)) => format!("{k}.{group} (resource {p})"),
                    None => format!("the group {group}"),
                },
            });
        }
        Ok(())
    }
}

/// The string at `pointer` in `object`, or empty.
fn text_at(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::testing::assembly;
    use serde_json::json;

    fn outcome(resources: Vec<Value>) -> Outcome {
        Outcome {
            resources,
            ..Outcome::default()
        }
    }

    #[test]
    fn the_fence_refuses_kinds_not_managed_and_types_whose_instances_it_cannot_list() {
        let a = assembly(
            "        managedResources:\n          - {apiVersion: v1, kind: ConfigMap}\n          - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition}\n        managedTypes:\n          - {group: y.dev, kind: \"*\"}\n",
        );
        let plan = &a.crds()[0].default;
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(plan.fence(&outcome(vec![config.clone()]), "n").is_ok());
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "n"}});
        let err = plan
            .fence(&outcome(vec![config.clone(), secret]), "n")
            .unwrap_err();
        assert!(
            matches!(&err, StepError::Forbidden { index: 1, kind, namespace: Some(ns), .. }
                if kind == "Secret" && ns == "n"),
            "{err}"
        );
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.x.dev"},
            "spec": {"group": "x.dev", "names": {"kind": "Widget", "plural": "widgets"}}});
        let err = plan.fence(&outcome(vec![crd]), "n").unwrap_err();
        assert!(
            matches!(&err, StepError::UndeclaredType { index: 0, defines, .. }
                if defines == "Widget.x.dev (resource widgets)"),
            "{err}"
        );
    }
}
