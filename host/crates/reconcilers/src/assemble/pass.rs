//! The steps of one pass that need no cluster: target selection, validation, the gate,
//! the request, status and the next requeue. `inrun render` and the runtime share them.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{CrdPlan, ReconcilePlan};
use inrun_contract::{Outcome, Request};
use inrun_template::{Context, TemplateError};

/// The delay for a Result that asks to requeue without saying when.
pub const DEFAULT_REQUEUE: Duration = Duration::from_secs(5);

/// The annotation that picks a serve target when the Blueprint names no selector.
pub const TARGET_ANNOTATION: &str = "inrun.dev/target";

/// A CR that this pass cannot reconcile as it is. Each becomes a status condition and an
/// event on the CR, never a crash.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The CR names a serve target the CRD does not have.
    #[error("unknown serve target {target:?}; this CRD serves: {known}")]
    UnknownTarget {
        /// What the CR asked for.
        target: String,
        /// The targets there are, comma separated.
        known: String,
    },
    /// The CR breaks the Blueprint's validation rules.
    #[error("validation failed: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A CRD or APIService child would define a type whose instances the host may not
    /// list (its deletion safeguard needs to): neither `managedTypes` nor
    /// `managedResources` names it.
    #[error(
        "resources[{index}] ({kind} {name}) defines {defines}, which neither managedTypes nor managedResources names: the host could not check for its instances before deleting it"
    )]
    UndeclaredType {
        /// Position in the Result's resources.
        index: usize,
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The type it defines (`kind.group`, or `group` for an APIService).
        defines: String,
    },
    /// The Result asks to write an object the Blueprint's `managedResources` do not allow.
    #[error("resources[{index}]: {kind} {name:?} ({api_version}{}) is not allowed by reconcile.managedResources", namespace.as_ref().map(|n| format!(" in namespace {n}")).unwrap_or_default())]
    Forbidden {
        /// Position in the Result's resources.
        index: usize,
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The object's namespace, if it names one.
        namespace: Option<String>,
    },
    /// A `reconcile.external` call failed (and its `onError` is `fail`). Boxed: the
    /// clients' errors are large and this path is rare.
    #[error(transparent)]
    External(Box<crate::external::ExternalError>),
    /// A template failed while rendering.
    #[error("rendering {what}")]
    Template {
        /// Which one, e.g. `reconcile.args`.
        what: &'static str,
        /// Why.
        #[source]
        source: TemplateError,
    },
}

/// When to reconcile again after a successful pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    /// Reconcile again after this long (`None`: only on the next change).
    pub after: Option<Duration>,
    /// Whether the requeue was asked for (by the Result or a conditional rule), which holds
    /// a deleting CR; a plain periodic refresh does not.
    pub holds: bool,
}

fn template(what: &'static str) -> impl FnOnce(TemplateError) -> PassError {
    move |source| PassError::Template { what, source }
}

impl CrdPlan {
    /// The serve target a CR selects: `explicit` if given, else the selector's annotation or
    /// field (default annotation `inrun.dev/target`); `None` when the CRD has no targets or
    /// the CR names none.
    pub fn target_of(&self, object: &Value, explicit: Option<&str>) -> Option<String> {
        if let Some(t) = explicit {
            return Some(t.to_string());
        }
        let serve = self.spec.serve.as_ref()?;
        let picked = match (&serve.selector.field, &serve.selector.annotation) {
            (Some(field), _) => field.get(object),
            (None, annotation) => {
                let key = annotation.as_deref().unwrap_or(TARGET_ANNOTATION);
                object
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(key))
            }
        };
        picked.and_then(Value::as_str).map(str::to_string)
    }

    /// The reconcile block for `target` (the CRD's own for `None`).
    ///
    /// # Errors
    /// [`PassError::UnknownTarget`].
    pub fn plan_for(&self, target: Option<&str>) -> Result<&ReconcilePlan, PassError> {
        let Some(target) = target else {
            return Ok(&self.default);
        };
        self.targets
            .iter()
            .find(|(n, _)| n == target)
            .map(|(_, p)| p)
            .ok_or_else(|| PassError::UnknownTarget {
                target: target.to_string(),
                known: self
                    .targets
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Checks the CR against the validation rules and namespace rules.
    ///
    /// # Errors
    /// [`PassError::Invalid`] with every broken rule's message.
    pub fn validate(&self, object: &Value, ctx: &Context) -> Result<(), PassError> {
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
            Err(PassError::Invalid(failed))
        }
    }

    /// The first `preReconcile` condition that does not hold, as a message; `None` lets the
    /// CR through. Never call it for a CR being deleted.
    ///
    /// # Errors
    /// [`PassError::Template`] when a condition fails to render.
    pub fn gate(&self, ctx: &Context) -> Result<Option<String>, PassError> {
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

    /// `emit.status` rendered, then the Result's status merged over it (the Result wins).
    ///
    /// # Errors
    /// [`PassError::Template`] when `emit.status` fails to render.
    pub fn status(
        &self,
        ctx: &Context,
        outcome: Option<&Outcome>,
    ) -> Result<Map<String, Value>, PassError> {
        let mut status = match self
            .emit_status
            .render(ctx)
            .map_err(template("emit.status"))?
        {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(extra) = outcome.and_then(|o| o.status.as_ref()) {
            merge(&mut status, extra);
        }
        // The reconciler's conditions, first come first kept by type: the Result's own,
        // then its status's (over `emit.status`'s), then `emit.conditions`.
        let mut conditions: Vec<Value> = outcome
            .into_iter()
            .flat_map(|o| &o.conditions)
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        if let Some(Value::Array(given)) = status.remove("conditions") {
            conditions.extend(given);
        }
        if let Value::Array(emitted) = self
            .emit_conditions
            .render(ctx)
            .map_err(template("emit.conditions"))?
        {
            conditions.extend(emitted);
        }
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        Ok(status)
    }
}

impl ReconcilePlan {
    /// Whether a finalizing Result's resources are applied: the block has `onDelete`
    /// templates, which exist to write something while the CR goes away. Other kinds'
    /// finalizing writes are ignored.
    pub fn applies_on_delete(&self) -> bool {
        !self.spec.on_delete.is_empty()
    }

    /// The prepare step's calls and the Request: `reconcile.external` calls run (their
    /// results are `.external.<name>` in args), then [`ReconcilePlan::request`].
    ///
    /// # Errors
    /// [`PassError::External`] naming the call that failed; [`PassError::Template`] when
    /// `reconcile.args` fail to render.
    pub async fn prepare(
        &self,
        object: &Value,
        target: Option<&str>,
        finalizing: bool,
    ) -> Result<Request, PassError> {
        let external = if self.external.is_empty() {
            None
        } else {
            let ctx = Context::new(object).with_target(target);
            let namespace = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let results = self.external.run(&ctx, namespace).await;
            Some(results.map_err(|e| PassError::External(Box::new(e)))?)
        };
        self.request(object, target, finalizing, external)
    }

    /// The Request for a CR: args rendered, excluded paths stripped.
    ///
    /// # Errors
    /// [`PassError::Template`] when `reconcile.args` fail to render.
    pub fn request(
        &self,
        object: &Value,
        target: Option<&str>,
        finalizing: bool,
        external: Option<Value>,
    ) -> Result<Request, PassError> {
        let mut ctx = Context::new(object).with_target(target);
        if let Some(ext) = &external {
            ctx = ctx.with_external(ext.clone());
        }
        let args = self.args.render(&ctx).map_err(template("reconcile.args"))?;
        let mut visible = object.clone();
        inrun_blueprint::FieldPath::remove_all(&self.spec.request.object.exclude, &mut visible);
        let mut req = Request::for_object(visible, args);
        req.finalizing = finalizing;
        req.target = target.map(str::to_string);
        req.external = external;
        Ok(req)
    }

    /// Checks every resource against `managedResources` before anything is written. An
    /// object without a namespace is allowed if its kind may be cluster-scoped or live in
    /// the CR's own namespace.
    ///
    /// # Errors
    /// [`PassError::Forbidden`] for the first object not allowed.
    pub fn fence(&self, outcome: &Outcome, cr_namespace: &str) -> Result<(), PassError> {
        for (index, r) in outcome.resources.iter().enumerate() {
            let text = |p: &str| {
                r.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (api_version, kind) = (text("/apiVersion"), text("/kind"));
            let namespace = r.pointer("/metadata/namespace").and_then(Value::as_str);
            let allowed = match namespace {
                Some(ns) => self
                    .spec
                    .allows(&api_version, &kind, Some(ns), cr_namespace),
                None => {
                    self.spec.allows(&api_version, &kind, None, cr_namespace)
                        || self
                            .spec
                            .allows(&api_version, &kind, Some(cr_namespace), cr_namespace)
                }
            };
            if !allowed {
                return Err(PassError::Forbidden {
                    index,
                    api_version,
                    kind,
                    name: text("/metadata/name"),
                    namespace: namespace.map(str::to_string),
                });
            }
            let defined = match (api_version.as_str(), kind.as_str()) {
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
                return Err(PassError::UndeclaredType {
                    index,
                    kind,
                    name: text("/metadata/name"),
                    defines: match defined_kind {
                        Some((k, p)) => format!("{k}.{group} (resource {p})"),
                        None => format!("the group {group}"),
                    },
                });
            }
        }
        Ok(())
    }

    /// When to run again after `outcome` succeeded; `ctx` sees the CR with its new status.
    ///
    /// # Errors
    /// [`PassError::Template`] when a `requeue` condition fails to render.
    pub fn next(&self, outcome: &Outcome, ctx: &Context) -> Result<Next, PassError> {
        // The Result: `requeue` asks (and holds a deleting CR); `requeueAfter` alone is a
        // refresh, like a conditional rule's `after` alone.
        let mut next = Next {
            after: outcome
                .requeue_after
                .or(outcome.requeue.then_some(DEFAULT_REQUEUE)),
            holds: outcome.requeue,
        };
        if let Some(rule) = &self.requeue {
            let asked = if rule.conditions.is_empty() {
                None
            } else {
                let mut any = false;
                for c in &rule.conditions {
                    if c.eval(ctx).map_err(template("reconcile.requeue"))? {
                        any = true;
                        break;
                    }
                }
                Some(any)
            };
            let after = match asked {
                None => rule.after,
                Some(true) => Some(rule.after.unwrap_or(DEFAULT_REQUEUE)),
                Some(false) => None,
            };
            next.holds |= asked == Some(true);
            next.after = [next.after, after].into_iter().flatten().min();
        }
        Ok(next)
    }
}

/// Deep merge: objects merge key by key, anything else in `extra` replaces.
fn merge(base: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (k, v) in extra {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(e)) => merge(b, e),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(requeue: &str) -> crate::assemble::Assembly {
        let text = format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: v1\n      kind: Thing\n      reconcile:\n        onReconcile: []\n{requeue}"
        );
        let bp = inrun_blueprint::from_str(&text, "t.yaml").expect("blueprint");
        let engine = inrun_wasm::Engine::new(inrun_wasm::EngineSettings {
            pooling: false,
            ..Default::default()
        })
        .expect("engine");
        futures::executor::block_on(crate::assemble::Assembly::from_blueprint(bp, &engine))
            .expect("assembly")
    }

    #[test]
    fn only_a_requested_requeue_holds_a_deleting_cr() {
        let a = plan("");
        let p = &a.crds()[0].default;
        let ctx = Context::new(&json!({"spec": {}}));
        let refresh = Outcome {
            requeue_after: Some(Duration::from_secs(3)),
            ..Outcome::default()
        };
        assert_eq!(
            p.next(&refresh, &ctx).unwrap(),
            Next {
                after: Some(Duration::from_secs(3)),
                holds: false
            }
        );
        let asked = Outcome {
            requeue: true,
            ..Outcome::default()
        };
        assert_eq!(
            p.next(&asked, &ctx).unwrap(),
            Next {
                after: Some(DEFAULT_REQUEUE),
                holds: true
            }
        );
        assert_eq!(
            p.next(&Outcome::default(), &ctx).unwrap(),
            Next {
                after: None,
                holds: false
            }
        );
    }

    #[test]
    fn a_conditional_rule_holds_only_while_its_condition_is_true() {
        let a = plan("        requeue: {after: 2s, when: \"{{ .spec.hold }}\"}\n");
        let p = &a.crds()[0].default;
        let held = p
            .next(
                &Outcome::default(),
                &Context::new(&json!({"spec": {"hold": true}})),
            )
            .unwrap();
        assert_eq!(
            held,
            Next {
                after: Some(Duration::from_secs(2)),
                holds: true
            }
        );
        let free = p
            .next(
                &Outcome::default(),
                &Context::new(&json!({"spec": {"hold": false}})),
            )
            .unwrap();
        assert_eq!(
            free,
            Next {
                after: None,
                holds: false
            }
        );
        let periodic = plan("        requeue: {after: 30s}\n");
        let n = periodic.crds()[0]
            .default
            .next(&Outcome::default(), &Context::new(&json!({})))
            .unwrap();
        assert_eq!(
            n,
            Next {
                after: Some(Duration::from_secs(30)),
                holds: false
            }
        );
    }

    #[test]
    fn the_request_leaves_out_excluded_paths_even_keys_with_dots() {
        let a = plan(
            "        request:\n          object:\n            exclude:\n              - .metadata.managedFields\n              - .status\n              - .spec.nothing\n              - .metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\"\n",
        );
        let cr = json!({
            "apiVersion": "t.inrun.dev/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "n", "managedFields": [1], "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "x"}},
            "spec": {"size": 1},
            "status": {"x": 1},
        });
        let req = a.crds()[0]
            .default
            .request(&cr, None, false, None)
            .expect("request");
        assert_eq!(
            req.object,
            json!({
                "apiVersion": "t.inrun.dev/v1", "kind": "Thing",
                "metadata": {"name": "a", "namespace": "n", "annotations": {"team": "x"}},
                "spec": {"size": 1},
            })
        );
    }

    #[test]
    fn merge_lets_the_result_win_key_by_key() {
        let mut base = json!({"phase": "Pending", "url": {"host": "a", "port": 80}});
        let extra = json!({"phase": "Ready", "url": {"port": 8080}});
        merge(base.as_object_mut().unwrap(), extra.as_object().unwrap());
        assert_eq!(
            base,
            json!({"phase": "Ready", "url": {"host": "a", "port": 8080}})
        );
    }
}
