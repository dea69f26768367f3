//! Builds one CRD's plan from its Blueprint entry: templates compiled, each reconcile
//! block's reconciler made from its kind, every failure told as a problem naming the field.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Policy, Services, grants, limits_within};
use crate::declarative::Declarative;
use crate::external::{Clients, ExternalCalls};
use crate::infrastructure::Package;
use crate::plan::{CrdPlan, Gate, ReadyWhen, ReconcilePlan, RequeuePlan, Rule};
use crate::plugins::PluginSlot;
use crate::remote::Remote;
use crate::wasm::{Constructor, Hook, Hooks};
use crate::{Reconciler, ReconcilerKind};
use inrun_blueprint::{
    CrdSpec, HookSpec, PluginLimits, PluginSpec, Problem, ReconcileSpec, RemoteSpec, RequeueSpec,
};
use inrun_template::{CompiledCondition, CompiledValue, Engine as Templates};
use inrun_wasm::{Grants, Limits, World};

/// What one CRD's plan is built with; problems are collected, not returned, so one
/// Blueprint's every mistake is told at once.
pub(super) struct Builder<'a> {
    pub(super) spec: &'a CrdSpec,
    pub(super) templates: &'a Templates,
    /// The fetched plugins, by the field that names them.
    pub(super) slots: &'a HashMap<String, Arc<PluginSlot>>,
    pub(super) services: &'a Services,
    pub(super) policy: &'a Policy,
    pub(super) problems: &'a mut Vec<Problem>,
}

/// A reconcile block's reconciler, with the plugins it calls and, for a package, the
/// package the pass drives.
struct Made {
    reconciler: Arc<dyn Reconciler>,
    plugins: Vec<Arc<PluginSlot>>,
    package: Option<Arc<Package>>,
}

impl Made {
    /// A reconciler that calls no plugin.
    fn alone(reconciler: Arc<dyn Reconciler>) -> Self {
        Made {
            reconciler,
            plugins: Vec::new(),
            package: None,
        }
    }
}

/// A block whose plugin did not load (told while fetching): it is not built further, so
/// its other fields are not compiled and told about.
struct Unloaded;

impl Builder<'_> {
    /// Tells a problem with this CRD's `field`.
    fn problem(&mut self, field: String, message: String) {
        self.problems.push(Problem::new(
            &self.spec.source.file,
            Some(&self.spec.kind),
            field,
            message,
        ));
    }

    /// The field `rest` of this CRD, e.g. `spec.crds[0].reconcile`.
    fn field(&self, rest: &str) -> String {
        format!("{}.{rest}", self.spec.source.field())
    }

    /// A condition compiled, or `None` with the problem told.
    fn condition(&mut self, field: String, text: &str) -> Option<CompiledCondition> {
        self.templates
            .compile_condition(text)
            .map_err(|e| self.problem(field, inrun_contract::errors::chain(&e)))
            .ok()
    }

    /// A value template compiled, or `None` with the problem told.
    fn value(&mut self, field: String, value: &serde_json::Value) -> Option<CompiledValue> {
        self.templates
            .compile_value(value)
            .map_err(|e| self.problem(field, inrun_contract::errors::chain(&e)))
            .ok()
    }

    /// The CRD's plan, or `None` when any part of it failed (each failure told).
    pub(super) fn crd(&mut self) -> Option<CrdPlan> {
        let spec = self.spec;
        let gates: Vec<_> = spec
            .pre_reconcile
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                let when =
                    self.condition(self.field(&format!("preReconcile[{i}].when")), &g.when)?;
                Some(Gate {
                    name: g.name.clone(),
                    when,
                    message: g.message.clone(),
                })
            })
            .collect();
        let rules: Vec<_> = spec
            .validation
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let rule = self.condition(self.field(&format!("validation[{i}].rule")), &r.rule)?;
                Some(Rule {
                    rule,
                    text: r.rule.clone(),
                    message: r.message.clone(),
                })
            })
            .collect();
        let emit_status = self.value(
            self.field("emit.status"),
            &serde_json::Value::Object(spec.emit.status.clone()),
        );
        let emit_conditions = self.value(
            self.field("emit.conditions"),
            &serde_json::Value::Array(spec.emit.conditions.clone()),
        );
        let default = self.plan_block(&spec.reconcile, &self.field("reconcile"));
        let mut targets = Vec::new();
        for (i, t) in spec.serve.iter().flat_map(|s| s.targets.iter()).enumerate() {
            if let Some(plan) = self.plan_block(
                &t.reconcile,
                &self.field(&format!("serve.targets[{i}].reconcile")),
            ) {
                targets.push((t.name.clone(), plan));
            }
        }
        Some(CrdPlan {
            spec: spec.clone(),
            default: default?,
            targets,
            gates,
            rules,
            emit_status: emit_status?,
            emit_conditions: emit_conditions?,
        })
    }

    /// The slot fetched for the plugin written at `field` (a missing one was reported
    /// while fetching).
    fn slot(&self, field: &str) -> Option<Arc<PluginSlot>> {
        self.slots.get(field).cloned()
    }

    /// The grants written at `field.capabilities`, if the policy lets this Blueprint grant
    /// any (a problem otherwise).
    fn plugin_grants(&mut self, field: &str, caps: &inrun_blueprint::Capabilities) -> Grants {
        // Credentials are the CR's own namespace's Secrets, read as the Blueprint's
        // identity (its RBAC decides): not a capability the operator must allow.
        let gated = inrun_blueprint::Capabilities {
            credentials: Vec::new(),
            ..caps.clone()
        };
        if !self.policy.capabilities && !gated.is_empty() {
            self.problem(
                format!("{field}.capabilities"),
                "this Blueprint may not grant capabilities to its plugins: the operator allows it for Blueprint resources with `inrun run --allow-resource-capabilities`".into(),
            );
            return Grants::default();
        }
        if let (Some(egress), Some(http)) = (&self.policy.egress, &caps.http) {
            for (i, host) in http.hosts.iter().enumerate() {
                if let Err(e) = egress.check_grant(host) {
                    self.problem(
                        format!("{field}.capabilities.http.hosts[{i}]"),
                        e.to_string(),
                    );
                }
            }
            let mut services = self.services.clone();
            match egress.plugin_http() {
                Ok(client) => services.plugin_http = client,
                Err(e) => {
                    self.problem(format!("{field}.capabilities.http"), e.to_string());
                    return Grants::default();
                }
            }
            return grants(caps, &services);
        }
        grants(caps, self.services)
    }

    /// The limits written at `field.limits`, each checked against the host's ceilings.
    fn plugin_limits(&mut self, field: &str, spec: &PluginLimits) -> Limits {
        let (limits, over) = limits_within(spec, self.policy);
        for (name, why) in over {
            self.problem(format!("{field}.limits.{name}"), why);
        }
        limits
    }

    /// One reconcile block (written at `at`) made ready: its reconciler from its kind, its
    /// args, requeue rule, external calls and `readyWhen` conditions compiled. `None` when
    /// any of them failed, each failure told.
    fn plan_block(&mut self, r: &ReconcileSpec, at: &str) -> Option<ReconcilePlan> {
        if !self.policy.foreign_secrets {
            self.refuse_foreign_secrets(r, at);
        }
        self.refuse_adoption(r, at);
        let args = self.value(
            format!("{at}.args"),
            &serde_json::Value::Object(r.args.clone()),
        );
        let requeue = match &r.requeue {
            None => Some(None),
            Some(q) => self.requeue(q, at).map(Some),
        };
        let made = match r.kind() {
            ReconcilerKind::Declarative | ReconcilerKind::Hooks => self.declarative_or_hooks(r, at),
            ReconcilerKind::Constructor => self.constructor(r.constructor.as_ref()?, at).ok()?,
            ReconcilerKind::Package => self.package(r.package.as_ref()?, at).ok()?,
            ReconcilerKind::Remote => r.remote.as_ref().and_then(|spec| self.remote(spec, at)),
        };
        let external = self.external(r, at);
        let ready_when = self.ready_when(r, at);
        let made = made?;
        Some(ReconcilePlan {
            ready_when,
            block: block_digest(r),
            spec: r.clone(),
            reconciler: made.reconciler,
            slots: made.plugins,
            package: made.package,
            args: args?,
            requeue: requeue?,
            external: external?,
        })
    }

    /// Tells every `secretRef` of the block that names a namespace: under this policy a
    /// Blueprint reads Secrets only in the CR's own.
    fn refuse_foreign_secrets(&mut self, r: &ReconcileSpec, at: &str) {
        let remote = r.remote.iter().filter_map(|m| m.auth.as_ref()).map(|a| {
            (
                format!("{at}.remote.auth.secretRef.namespace"),
                &a.secret_ref,
            )
        });
        let external = r.external.iter().enumerate().flat_map(|(i, c)| {
            let refs = [
                ("http", c.http.as_ref().and_then(|h| h.secret_ref.as_ref())),
                (
                    "postgres",
                    c.postgres.as_ref().and_then(|p| p.secret_ref.as_ref()),
                ),
                (
                    "redis",
                    c.redis.as_ref().and_then(|p| p.secret_ref.as_ref()),
                ),
            ];
            refs.into_iter().filter_map(move |(kind, s)| {
                s.map(|s| (format!("{at}.external[{i}].{kind}.secretRef.namespace"), s))
            })
        });
        let named: Vec<_> = remote
            .chain(external)
            .filter(|(_, s)| s.namespace.is_some())
            .map(|(field, _)| field)
            .collect();
        for field in named {
            self.problem(
                field,
                "a Blueprint resource reads Secrets only in the CR's own namespace: leave the namespace out".into(),
            );
        }
    }

    /// Tells every `managedResources[].adopt` the policy does not allow.
    fn refuse_adoption(&mut self, r: &ReconcileSpec, at: &str) {
        for (i, m) in r.managed_resources.iter().enumerate() {
            if m.adopt && !self.policy.capabilities {
                self.problem(
                    format!("{at}.managedResources[{i}].adopt"),
                    "this Blueprint may not adopt objects it did not create: the operator allows it for Blueprint resources with `inrun run --allow-resource-capabilities`".into(),
                );
            }
        }
    }

    /// The `requeue` rule compiled: `when`, then each `or`.
    fn requeue(&mut self, q: &RequeueSpec, at: &str) -> Option<RequeuePlan> {
        let mut conditions = Vec::new();
        let texts = q.when.iter().chain(q.or_when.iter());
        let mut ok = true;
        for (i, text) in texts.enumerate() {
            let field = if i == 0 {
                format!("{at}.requeue.when")
            } else {
                format!("{at}.requeue.or[{}]", i - 1)
            };
            match self.condition(field, text) {
                Some(c) => conditions.push(c),
                None => ok = false,
            }
        }
        ok.then_some(RequeuePlan {
            after: q.after,
            conditions,
        })
    }

    /// Templates (`onCreate`, `onReconcile`, `onDelete`), with the Wasm hooks they call
    /// when the block has any.
    fn declarative_or_hooks(&mut self, r: &ReconcileSpec, at: &str) -> Option<Made> {
        let declarative = Declarative::compile(
            self.templates,
            at,
            &r.on_create,
            &r.on_reconcile,
            &r.on_delete,
        )
        .map_err(|e| self.problem(e.field.clone(), inrun_contract::errors::chain(&e.source)))
        .ok();
        let mut plugins = Vec::new();
        let mut hooks = Vec::new();
        for (i, h) in r.hooks.iter().enumerate() {
            if let Some(hook) = self.hook(h, &format!("{at}.hooks[{i}]")) {
                if !plugins.iter().any(|p| Arc::ptr_eq(p, &hook.slot)) {
                    plugins.push(hook.slot.clone());
                }
                hooks.push(hook);
            }
        }
        let reconciler: Arc<dyn Reconciler> = match (declarative, hooks.len() == r.hooks.len()) {
            (Some(d), _) if r.hooks.is_empty() => Arc::new(d),
            (Some(d), true) => match Hooks::new(d, hooks) {
                Ok(h) => Arc::new(h),
                Err(e) => {
                    self.problem(format!("{at}.hooks"), inrun_contract::errors::chain(&e));
                    return None;
                }
            },
            _ => return None,
        };
        Some(Made {
            plugins,
            ..Made::alone(reconciler)
        })
    }

    /// One hook (written at `field`): its plugin's slot, checked to export the function.
    fn hook(&mut self, h: &HookSpec, field: &str) -> Option<Hook> {
        let limits = self.plugin_limits(field, &h.limits);
        let grants = self.plugin_grants(field, &h.capabilities);
        let slot = self.slot(field)?;
        if let Err(e) = slot.require(World::Hooks, Some(h.function.as_str())) {
            self.problem(
                format!("{field}.function"),
                inrun_contract::errors::chain(&e),
            );
            return None;
        }
        Some(Hook {
            slot,
            function: h.function.clone(),
            limits,
            grants,
        })
    }

    /// A Wasm constructor: the plugin is the whole reconciler.
    ///
    /// # Errors
    /// [`Unloaded`] when its plugin did not load.
    fn constructor(&mut self, c: &PluginSpec, at: &str) -> Result<Option<Made>, Unloaded> {
        let at_constructor = format!("{at}.constructor");
        let limits = self.plugin_limits(&at_constructor, &c.limits);
        let grants = self.plugin_grants(&at_constructor, &c.capabilities);
        let slot = self.slot(&at_constructor).ok_or(Unloaded)?;
        Ok(match Constructor::new(slot.clone(), limits, grants) {
            Ok(c) => Some(Made {
                plugins: vec![slot],
                ..Made::alone(Arc::new(c))
            }),
            Err(e) => {
                self.problem(
                    format!("{at_constructor}.location"),
                    inrun_contract::errors::chain(&e),
                );
                None
            }
        })
    }

    /// An infrastructure package: the pass drives it through observe and converge.
    ///
    /// # Errors
    /// [`Unloaded`] when its plugin did not load.
    fn package(&mut self, spec: &PluginSpec, at: &str) -> Result<Option<Made>, Unloaded> {
        let at_package = format!("{at}.package");
        let limits = self.package_limits(&at_package, &spec.limits);
        let grants = self.plugin_grants(&at_package, &spec.capabilities);
        let slot = self.slot(&at_package).ok_or(Unloaded)?;
        Ok(match Package::new(slot.clone(), limits, grants) {
            Ok(p) => {
                let p = Arc::new(p);
                Some(Made {
                    reconciler: p.clone(),
                    plugins: vec![slot],
                    package: Some(p),
                })
            }
            Err(e) => {
                self.problem(
                    format!("{at_package}.location"),
                    inrun_contract::errors::chain(&e),
                );
                None
            }
        })
    }

    /// A package's limits (written at `field.limits`): its deadline has a ceiling of its
    /// own (hours: callbacks own their timeouts), and a longer default than a plugin's.
    fn package_limits(&mut self, field: &str, spec: &PluginLimits) -> Limits {
        let mut policy = self.policy.clone();
        policy.ceilings.deadline = self.policy.package_deadline;
        let (mut limits, over) = limits_within(spec, &policy);
        for (name, why) in over {
            self.problem(format!("{field}.limits.{name}"), why);
        }
        if spec.deadline.is_none() {
            limits.deadline =
                crate::infrastructure::DEFAULT_DEADLINE.min(self.policy.package_deadline);
        }
        limits
    }

    /// A remote reconciler, its endpoint checked against the egress policy.
    fn remote(&mut self, spec: &RemoteSpec, at: &str) -> Option<Made> {
        let http = match &self.policy.egress {
            Some(egress) => match egress.check_url(&spec.endpoint).and(egress.http()) {
                Ok(client) => client,
                Err(e) => {
                    self.problem(format!("{at}.remote.endpoint"), e.to_string());
                    return None;
                }
            },
            None => self.services.http.clone(),
        };
        Some(Made::alone(Arc::new(Remote::new(
            spec,
            http,
            self.services.secrets.clone(),
        ))))
    }

    /// The block's `external` calls compiled, with clients held to the egress policy.
    fn external(&mut self, r: &ReconcileSpec, at: &str) -> Option<ExternalCalls> {
        let clients = self.external_clients(r, at);
        ExternalCalls::compile(self.templates, &r.external, at, clients)
            .map_err(|errors| {
                for e in errors {
                    self.problem(e.field.clone(), inrun_contract::errors::chain(&e.source));
                }
            })
            .ok()
    }

    /// The clients external calls use: under an egress policy, its HTTP client and the
    /// policy itself.
    fn external_clients(&mut self, r: &ReconcileSpec, at: &str) -> Clients {
        let mut clients = self.services.clients();
        if let Some(egress) = &self.policy.egress {
            match egress.http() {
                Ok(client) => clients.http = client,
                Err(e) if !r.external.is_empty() => {
                    self.problem(format!("{at}.external"), e.to_string());
                }
                // No external call will use it.
                Err(_) => {}
            }
            clients.egress = Some(egress.clone());
        }
        clients
    }

    /// The `managedResources[].readyWhen` conditions compiled.
    fn ready_when(&mut self, r: &ReconcileSpec, at: &str) -> Vec<ReadyWhen> {
        r.managed_resources
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let text = m.ready_when.as_deref()?;
                let when = self.condition(format!("{at}.managedResources[{i}].readyWhen"), text)?;
                Some(ReadyWhen {
                    api_version: m.api_version.clone(),
                    kind: m.kind.clone(),
                    when,
                    text: text.to_string(),
                })
            })
            .collect()
    }
}

/// A short digest of the block as written, its `rollout` left out (the first 8 bytes of
/// the sha256 of its JSON, in hex): what `status.reconciledBy` records for a block no plugin serves, computed once
/// when the block is built rather than at every status step.
fn block_digest(block: &ReconcileSpec) -> String {
    use sha2::Digest as _;
    // How a change rolls out is not what reconciles: a rollout edited alone is no new
    // version.
    let what = ReconcileSpec {
        rollout: None,
        ..block.clone()
    };
    let text = serde_json::to_vec(&what).unwrap_or_default();
    sha2::Sha256::digest(&text)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Assembly, BuildContext};
    use super::*;
    use crate::plugins::PluginSet;
    use inrun_wasm::Engine;

    /// Why the Blueprint `text` is refused under `policy`, assembled offline.
    fn refusal(text: &str, policy: &Policy) -> String {
        let bp = inrun_blueprint::from_str(text, "t.yaml").expect("blueprint");
        let engine = Engine::new(inrun_wasm::EngineSettings {
            pooling: false,
            ..Default::default()
        })
        .expect("engine");
        let services = Services::offline();
        let plugins = PluginSet::new(engine, services.sources.clone());
        let cx = BuildContext {
            plugins: &plugins,
            services: &services,
            policy,
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(Assembly::build(bp, cx))
            .err()
            .expect("refused")
            .to_string()
    }

    #[test]
    fn a_blueprint_over_a_ceiling_is_refused_with_the_field_named() {
        let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: t }\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: v1\n      kind: Thing\n      reconcile:\n        default: false\n        constructor: { location: ./missing.wasm, limits: { deadline: 30s } }\n";
        let mut policy = Policy::default();
        policy.ceilings.deadline = Duration::from_secs(5);
        let err = refusal(text, &policy);
        assert!(
            err.contains("spec.crds[0].reconcile.constructor.limits.deadline: 30s exceeds the host's ceiling of 5s"),
            "{err}"
        );
        assert!(err.contains("t.yaml"), "{err}");
    }

    #[test]
    fn a_package_call_may_be_given_hours_up_to_the_package_ceiling() {
        let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: t }\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: v1\n      kind: Thing\n      reconcile:\n        default: false\n        package: { location: ./missing.wasm, limits: { deadline: 2h } }\n";
        // Far past the plugins' 5m ceiling, within the packages' 6h: only the missing file.
        let err = refusal(text, &Policy::default());
        assert!(!err.contains("deadline"), "{err}");
        let err = refusal(
            text,
            &Policy {
                package_deadline: Duration::from_secs(3600),
                ..Policy::default()
            },
        );
        assert!(
            err.contains("spec.crds[0].reconcile.package.limits.deadline: 2h exceeds the host's ceiling of 1h"),
            "{err}"
        );
    }
}
