//! A Blueprint made ready to run: every template compiled, every plugin loaded and checked,
//! one reconciler per CRD (and per serve target). Errors name the file, CRD and field.

mod pass;
mod services;

pub use pass::{DEFAULT_REQUEUE, Next, PassError};
pub use services::Services;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::blueprint::{
    self, Blueprint, BlueprintError, CrdSpec, PluginLimits, Problem, ReconcileSpec,
};
use crate::external::ExternalCalls;
use crate::reconcilers::declarative::Declarative;
use crate::reconcilers::remote::Remote;
use crate::reconcilers::wasm::{Constructor, Hook, Hooks};
use crate::reconcilers::{Reconciler, ReconcilerKind};
use crate::template::{CompiledCondition, CompiledValue, Engine as Templates};
use crate::wasm::{Engine, Limits, Plugin, PluginInfo};

/// A loaded, checked Blueprint.
pub struct Assembly {
    /// The Blueprint as written.
    pub blueprint: Blueprint,
    crds: Vec<CrdPlan>,
}

/// Everything needed to reconcile one CRD's CRs.
pub struct CrdPlan {
    /// The CRD's Blueprint entry.
    pub spec: CrdSpec,
    /// The CRD's own reconcile block.
    pub default: ReconcilePlan,
    /// Serve targets, each with its own reconcile block.
    pub targets: Vec<(String, ReconcilePlan)>,
    gates: Vec<Gate>,
    rules: Vec<Rule>,
    emit_status: CompiledValue,
}

/// One reconcile block made ready: its reconciler, args and requeue rule.
pub struct ReconcilePlan {
    /// The reconcile block as written.
    pub spec: ReconcileSpec,
    /// The reconciler.
    pub reconciler: Arc<dyn Reconciler>,
    /// Plugins it calls (for `/blueprint` and `validate`).
    pub plugins: Vec<PluginInfo>,
    args: CompiledValue,
    requeue: Option<RequeuePlan>,
    external: ExternalCalls,
}

struct Gate {
    name: String,
    when: CompiledCondition,
    message: Option<String>,
}

struct Rule {
    rule: CompiledCondition,
    text: String,
    message: Option<String>,
}

struct RequeuePlan {
    after: Option<Duration>,
    conditions: Vec<CompiledCondition>,
}

impl Assembly {
    /// Loads the Blueprint at `path` (file or directory) and assembles it with
    /// [`Services::offline`] (no secret values).
    ///
    /// # Errors
    /// [`BlueprintError`] listing every problem found, each naming file, CRD and field.
    pub fn load(path: &Path, engine: &Engine) -> Result<Self, BlueprintError> {
        Self::load_with(path, engine, &Services::offline())
    }

    /// Loads the Blueprint at `path` and assembles it; remote reconcilers and external
    /// calls reach out through `services`.
    ///
    /// # Errors
    /// [`BlueprintError`] listing every problem found, each naming file, CRD and field.
    pub fn load_with(
        path: &Path,
        engine: &Engine,
        services: &Services,
    ) -> Result<Self, BlueprintError> {
        Self::from_blueprint_with(blueprint::load(path)?, engine, services)
    }

    /// Assembles a parsed Blueprint with [`Services::offline`].
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template or plugin that failed.
    pub fn from_blueprint(blueprint: Blueprint, engine: &Engine) -> Result<Self, BlueprintError> {
        Self::from_blueprint_with(blueprint, engine, &Services::offline())
    }

    /// Assembles a parsed Blueprint: compiles templates, loads plugins, and builds remote
    /// reconcilers and external calls on `services`.
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template or plugin that failed.
    pub fn from_blueprint_with(
        blueprint: Blueprint,
        engine: &Engine,
        services: &Services,
    ) -> Result<Self, BlueprintError> {
        let templates = Templates::new();
        let mut problems = Vec::new();
        let mut crds = Vec::new();
        for spec in &blueprint.spec.crds {
            let mut b = Builder {
                spec,
                templates: &templates,
                engine,
                services,
                problems: &mut problems,
            };
            if let Some(plan) = b.crd() {
                crds.push(plan);
            }
        }
        if !problems.is_empty() {
            return Err(BlueprintError::Invalid { problems });
        }
        Ok(Assembly { blueprint, crds })
    }

    /// The CRDs, in Blueprint order.
    pub fn crds(&self) -> &[CrdPlan] {
        &self.crds
    }

    /// The CRD whose CRs have this apiVersion and kind.
    pub fn crd_for(&self, api_version: &str, kind: &str) -> Option<&CrdPlan> {
        self.crds
            .iter()
            .find(|c| c.spec.kind == kind && c.spec.api_version() == api_version)
    }

    /// One line per CRD and serve target: name, reconciler kind, plugins.
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        for crd in &self.crds {
            let name = crd.spec.crd_name();
            out.push(format!("{name}: {}", describe(&crd.default)));
            for (target, plan) in &crd.targets {
                out.push(format!("{name} (target {target}): {}", describe(plan)));
            }
        }
        out
    }
}

fn describe(plan: &ReconcilePlan) -> String {
    let mut s = plan.reconciler.kind().as_str().to_string();
    for p in &plan.plugins {
        s.push_str(&format!(" {}@{} ({} bytes)", p.name, p.sha256, p.size));
    }
    s
}

/// Turns a blueprint's plugin limits into the engine's, filling in defaults.
pub fn limits(spec: &PluginLimits) -> Limits {
    let d = Limits::default();
    let bytes = |q: Option<blueprint::Quantity>, default: usize| {
        q.map_or(default, |q| {
            usize::try_from(q.bytes()).unwrap_or(usize::MAX)
        })
    };
    Limits {
        deadline: spec.deadline.unwrap_or(d.deadline),
        memory_bytes: bytes(spec.memory, d.memory_bytes),
        output_bytes: bytes(spec.output_size, d.output_bytes),
        max_resources: spec.resources.map_or(d.max_resources, |n| n as usize),
    }
}

struct Builder<'a> {
    spec: &'a CrdSpec,
    templates: &'a Templates,
    engine: &'a Engine,
    services: &'a Services,
    problems: &'a mut Vec<Problem>,
}

impl Builder<'_> {
    fn problem(&mut self, field: String, message: String) {
        self.problems.push(Problem::new(
            &self.spec.source.file,
            Some(&self.spec.kind),
            field,
            message,
        ));
    }

    fn field(&self, rest: &str) -> String {
        format!("{}.{rest}", self.spec.source.field())
    }

    fn condition(&mut self, field: String, text: &str) -> Option<CompiledCondition> {
        self.templates
            .compile_condition(text)
            .map_err(|e| self.problem(field, crate::errors::chain(&e)))
            .ok()
    }

    fn value(&mut self, field: String, value: &serde_json::Value) -> Option<CompiledValue> {
        self.templates
            .compile_value(value)
            .map_err(|e| self.problem(field, crate::errors::chain(&e)))
            .ok()
    }

    fn crd(&mut self) -> Option<CrdPlan> {
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
        let default = self.reconcile(&spec.reconcile, &self.field("reconcile"));
        let mut targets = Vec::new();
        for (i, t) in spec.serve.iter().flat_map(|s| s.targets.iter()).enumerate() {
            if let Some(plan) = self.reconcile(
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
        })
    }

    fn load_plugin(&mut self, field: String, location: &str) -> Option<Plugin> {
        if location.contains("://") {
            self.problem(
                field,
                format!(
                    "plugin location {location:?}: only file paths are supported by this build"
                ),
            );
            return None;
        }
        let path = self.spec.source.base_dir().join(location);
        self.engine
            .load_file(&path)
            .map_err(|e| self.problem(field, crate::errors::chain(&e)))
            .ok()
    }

    fn reconcile(&mut self, r: &ReconcileSpec, at: &str) -> Option<ReconcilePlan> {
        let args = self.value(
            format!("{at}.args"),
            &serde_json::Value::Object(r.args.clone()),
        );
        let requeue = match &r.requeue {
            None => Some(None),
            Some(q) => {
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
                ok.then_some(Some(RequeuePlan {
                    after: q.after,
                    conditions,
                }))
            }
        };
        let mut plugins = Vec::new();
        let reconciler: Option<Arc<dyn Reconciler>> = match r.kind() {
            ReconcilerKind::Declarative | ReconcilerKind::Hooks => {
                let declarative = Declarative::compile(
                    self.templates,
                    at,
                    &r.on_create,
                    &r.on_reconcile,
                    &r.on_delete,
                )
                .map_err(|e| self.problem(e.field.clone(), crate::errors::chain(&e.source)))
                .ok();
                let mut hooks = Vec::new();
                for (i, h) in r.hooks.iter().enumerate() {
                    let field = format!("{at}.hooks[{i}]");
                    if let Some(plugin) = self.load_plugin(format!("{field}.location"), &h.location)
                    {
                        if let Err(e) = plugin.expect_functions([h.function.as_str()]) {
                            self.problem(format!("{field}.function"), crate::errors::chain(&e));
                            continue;
                        }
                        if !plugins
                            .iter()
                            .any(|p: &PluginInfo| p.sha256 == plugin.info().sha256)
                        {
                            plugins.push(plugin.info().clone());
                        }
                        hooks.push(Hook {
                            plugin,
                            function: h.function.clone(),
                            limits: limits(&h.limits),
                        });
                    }
                }
                match (declarative, hooks.len() == r.hooks.len()) {
                    (Some(d), _) if r.hooks.is_empty() => Some(Arc::new(d)),
                    (Some(d), true) => match Hooks::new(d, hooks) {
                        Ok(h) => Some(Arc::new(h)),
                        Err(e) => {
                            self.problem(format!("{at}.hooks"), crate::errors::chain(&e));
                            None
                        }
                    },
                    _ => None,
                }
            }
            ReconcilerKind::Constructor => {
                let c = r.constructor.as_ref()?;
                let field = format!("{at}.constructor.location");
                let plugin = self.load_plugin(field.clone(), &c.location)?;
                plugins.push(plugin.info().clone());
                match Constructor::new(plugin, limits(&c.limits)) {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) => {
                        self.problem(field, crate::errors::chain(&e));
                        None
                    }
                }
            }
            ReconcilerKind::Remote => r.remote.as_ref().map(|spec| {
                Arc::new(Remote::new(
                    spec,
                    self.services.http.clone(),
                    self.services.secrets.clone(),
                )) as Arc<dyn Reconciler>
            }),
        };
        let external =
            ExternalCalls::compile(self.templates, &r.external, at, self.services.clients())
                .map_err(|errors| {
                    for e in errors {
                        self.problem(e.field.clone(), crate::errors::chain(&e.source));
                    }
                })
                .ok();
        Some(ReconcilePlan {
            spec: r.clone(),
            reconciler: reconciler?,
            plugins,
            args: args?,
            requeue: requeue?,
            external: external?,
        })
    }
}
