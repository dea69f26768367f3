//! A Blueprint made ready to run: every template compiled, every plugin loaded and checked,
//! one reconciler per CRD (and per serve target). Errors name the file, CRD and field.

mod grants;
mod pass;
mod services;

pub use grants::grants;
pub use pass::{DEFAULT_REQUEUE, Next, PassError};
pub use services::Services;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::declarative::Declarative;
use crate::external::ExternalCalls;
use crate::package::Package;
use crate::plugins::{PluginSet, PluginSlot};
use crate::remote::Remote;
use crate::sources::{Location, PullSecret};
use crate::wasm::{Constructor, Hook, Hooks};
use crate::{Reconciler, ReconcilerKind};
use inrun_blueprint::{
    self as blueprint, Blueprint, BlueprintError, CrdSpec, PluginLimits, Problem, ReconcileSpec,
};
use inrun_template::{CompiledCondition, CompiledValue, Engine as Templates};
use inrun_wasm::{Engine, Grants, Limits, PluginInfo, World};

/// One distinct plugin a Blueprint names: where it is, its pull secret, and each field
/// naming it with the problem a failed load becomes there.
type Wanted = (Location, Option<PullSecret>, Vec<(String, Problem)>);

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
    emit_conditions: CompiledValue,
}

/// One reconcile block made ready: its reconciler, args and requeue rule.
pub struct ReconcilePlan {
    /// The reconcile block as written.
    pub spec: ReconcileSpec,
    /// The reconciler.
    pub reconciler: Arc<dyn Reconciler>,
    /// Slots of the plugins it calls, in Blueprint order.
    pub slots: Vec<Arc<PluginSlot>>,
    /// The infrastructure package, for a `package` block: the pass drives it instead of
    /// asking `reconciler` for a Result.
    pub package: Option<Arc<Package>>,
    args: CompiledValue,
    requeue: Option<RequeuePlan>,
    external: ExternalCalls,
    ready_when: Vec<ReadyWhen>,
}

/// A `managedResources[].readyWhen`: when a child of that kind counts as ready.
struct ReadyWhen {
    api_version: String,
    kind: String,
    when: CompiledCondition,
    text: String,
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

/// What an assembly is built against: where plugins come from, the clients remote
/// reconcilers and external calls use, and the operator's limits policy.
#[derive(Clone, Copy)]
pub struct BuildContext<'a> {
    /// The tenant's plugin slots (fetched and compiled on first use).
    pub plugins: &'a PluginSet,
    /// Clients and secrets.
    pub services: &'a Services,
    /// Defaults and ceilings for plugin limits, and whether local files may be named.
    pub policy: &'a Policy,
}

/// How large a tenant's Blueprint may be: each CRD is a cluster-wide watch of its CRs and
/// one per child kind, each worker a task, each plugin a compile and a cache entry, each
/// external call up to minutes of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantSize {
    /// CRDs.
    pub crds: usize,
    /// Distinct plugin locations.
    pub plugins: usize,
    /// Workers, summed over its CRDs.
    pub workers: usize,
    /// External calls in one reconcile block.
    pub external_calls: usize,
    /// Plugin module sizes and bytes loaded an hour.
    pub compile: crate::plugins::CompileLimits,
}

impl Default for TenantSize {
    fn default() -> Self {
        TenantSize {
            crds: 20,
            plugins: 20,
            workers: 100,
            external_calls: 8,
            compile: crate::plugins::CompileLimits::default(),
        }
    }
}

/// [`Policy::package_deadline`]'s default: six hours.
pub const DEFAULT_PACKAGE_CEILING: Duration = Duration::from_secs(6 * 3600);

/// The operator's rules every Blueprint is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Limits for fields a Blueprint leaves out.
    pub defaults: Limits,
    /// Limits no Blueprint may exceed (`inrun run --max-plugin-*`).
    pub ceilings: Limits,
    /// The ceilings of Blueprint resources (tenants): [`Limits::tenant_ceilings`], or the
    /// operator's `--max-plugin-*` where set.
    pub tenant_ceilings: Limits,
    /// The longest deadline a package call may be given (`inrun run
    /// --max-package-deadline`): packages wait on backends, so hours, not the seconds of
    /// a Request/Result call.
    pub package_deadline: Duration,
    /// Writes a second a tenant (a `--tenants` file or a Blueprint resource, not the
    /// operator's `--blueprint`) may make to the API server; `0`: no limit.
    pub tenant_api_writes: u32,
    /// How large a tenant's Blueprint may be (the operator's `--blueprint` is not held to
    /// it).
    pub tenant_size: TenantSize,
    /// Whether plugin locations may be local paths. Off for Blueprints that arrive as
    /// custom resources: a tenant must not make the host read its files.
    pub local_plugins: bool,
    /// Whether the Blueprint may grant its plugins capabilities (cluster reads, HTTP) and
    /// adopt objects it did not create (`managedResources[].adopt`). Off by default for
    /// Blueprints that arrive as custom resources: whoever can create one could otherwise
    /// read, or take over, anything the host's identity can.
    pub capabilities: bool,
    /// Where the Blueprint's calls may go (remote, external, plugin HTTP); `None`: the
    /// Blueprint is the operator's own and may call anywhere.
    pub egress: Option<crate::egress::Egress>,
    /// Whether a `secretRef` may name a namespace other than the CR's. Off for Blueprint
    /// resources: whoever can create one could otherwise send any Secret the host can
    /// read, as a bearer token or a connection URL, to an endpoint of its choosing.
    pub foreign_secrets: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            defaults: Limits::default(),
            ceilings: Limits::ceilings(),
            tenant_ceilings: Limits::tenant_ceilings(),
            package_deadline: DEFAULT_PACKAGE_CEILING,
            tenant_api_writes: 0,
            tenant_size: TenantSize::default(),
            local_plugins: true,
            capabilities: true,
            egress: None,
            foreign_secrets: true,
        }
    }
}

impl Assembly {
    /// Loads the Blueprint at `path` (file or directory) and assembles it offline: no
    /// secret values, the default limits policy.
    ///
    /// # Errors
    /// [`BlueprintError`] listing every problem found, each naming file, CRD and field.
    pub async fn load(path: &Path, engine: &Engine) -> Result<Self, BlueprintError> {
        Self::load_with(path, engine, &Services::offline()).await
    }

    /// Loads the Blueprint at `path` and assembles it; plugins are fetched through
    /// `services`' secrets (pull secrets), remote reconcilers and external calls reach out
    /// through `services`.
    ///
    /// # Errors
    /// [`BlueprintError`] listing every problem found, each naming file, CRD and field.
    pub async fn load_with(
        path: &Path,
        engine: &Engine,
        services: &Services,
    ) -> Result<Self, BlueprintError> {
        let blueprint = blueprint::load(path)?;
        let plugins = PluginSet::new(engine.clone(), services.sources.clone());
        let policy = Policy::default();
        Self::build(
            blueprint,
            BuildContext {
                plugins: &plugins,
                services,
                policy: &policy,
            },
        )
        .await
    }

    /// Assembles a parsed Blueprint with [`Services::offline`]. For Blueprints without
    /// plugins it needs no async runtime.
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template or plugin that failed.
    pub async fn from_blueprint(
        blueprint: Blueprint,
        engine: &Engine,
    ) -> Result<Self, BlueprintError> {
        let services = Services::offline();
        let plugins = PluginSet::new(engine.clone(), services.sources.clone());
        let policy = Policy::default();
        Self::build(
            blueprint,
            BuildContext {
                plugins: &plugins,
                services: &services,
                policy: &policy,
            },
        )
        .await
    }

    /// Assembles a parsed Blueprint: fetches and compiles its plugins into the context's
    /// slots (reusing slots the set already holds), compiles templates, and builds remote
    /// reconcilers and external calls.
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template, plugin or limit that failed.
    pub async fn build(blueprint: Blueprint, cx: BuildContext<'_>) -> Result<Self, BlueprintError> {
        let mut problems = Vec::new();
        // Each distinct plugin once, several at a time (a large guest compiles for
        // seconds): the fields that name it, and where it is.
        let mut wanted: Vec<Wanted> = Vec::new();
        for r in blueprint.plugins() {
            let problem = |message: String| {
                Problem::new(
                    &r.crd.source.file,
                    Some(&r.crd.kind),
                    format!("{}.location", r.field),
                    message,
                )
            };
            let location = match Location::parse(r.location, r.digest, r.crd.source.base_dir()) {
                Ok(l) => l,
                Err(e) => {
                    problems.push(problem(inrun_contract::errors::chain(&e)));
                    continue;
                }
            };
            if matches!(location, Location::File(_)) && !cx.policy.local_plugins {
                problems.push(problem(format!(
                    "plugin location {:?} is a local path; this Blueprint may only name https:// or oci:// locations",
                    r.location
                )));
                continue;
            }
            let pull = r.pull_secret.as_ref().map(|p| PullSecret {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            });
            // The problem a failed load becomes, told against this field.
            let field = (r.field.clone(), problem(String::new()));
            match wanted
                .iter_mut()
                .find(|(l, p, _)| l.to_string() == location.to_string() && *p == pull)
            {
                Some((_, _, fields)) => fields.push(field),
                None => wanted.push((location, pull, vec![field])),
            }
        }
        let parallel = std::thread::available_parallelism().map_or(1, usize::from);
        // Collected first: a stream over a borrowing closure would not be `Send` for
        // every lifetime, which the fleet's spawned tasks need.
        let loads: Vec<_> = wanted
            .iter()
            .map(|(location, pull, _)| cx.plugins.slot(location.clone(), pull.clone()))
            .collect();
        let loaded: Vec<_> = futures::stream::iter(loads)
            .buffered(parallel)
            .collect()
            .await;
        let mut slots = HashMap::new();
        for ((_, _, fields), result) in wanted.into_iter().zip(loaded) {
            for (field, mut problem) in fields {
                match &result {
                    Ok(slot) => {
                        slots.insert(field, slot.clone());
                    }
                    Err(e) => {
                        problem.message = inrun_contract::errors::chain(e);
                        problems.push(problem);
                    }
                }
            }
        }
        let templates = Templates::new();
        let mut crds = Vec::new();
        for spec in &blueprint.spec.crds {
            let mut b = Builder {
                spec,
                templates: &templates,
                slots: &slots,
                services: cx.services,
                policy: cx.policy,
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

impl ReconcilePlan {
    /// The `readyWhen` condition (and its text) of the `managedResources` entry for
    /// `api_version` / `kind`, if it has one: it decides whether such a child is ready,
    /// rendered against the child.
    pub fn ready_when(&self, api_version: &str, kind: &str) -> Option<(&CompiledCondition, &str)> {
        self.ready_when
            .iter()
            .find(|r| r.api_version == api_version && r.kind == kind)
            .map(|r| (&r.when, r.text.as_str()))
    }

    /// The plugins it calls, as they serve now (for `/blueprint` and `validate`).
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.slots
            .iter()
            .map(|s| s.current().info().clone())
            .collect()
    }
}

fn describe(plan: &ReconcilePlan) -> String {
    let mut s = plan.reconciler.kind().as_str().to_string();
    for p in &plan.plugins() {
        s.push_str(&format!(" {}@{} ({} bytes)", p.name, p.sha256, p.size));
    }
    s
}

/// Turns a blueprint's plugin limits into the engine's, filling in the host defaults.
pub fn limits(spec: &PluginLimits) -> Limits {
    limits_within(spec, &Policy::default()).0
}

/// Turns a blueprint's plugin limits into the engine's under `policy`: defaults for fields
/// left out (never above a ceiling), and, for each field above its ceiling, the field's
/// name and why, so the assembly can refuse it.
pub fn limits_within(
    spec: &PluginLimits,
    policy: &Policy,
) -> (Limits, Vec<(&'static str, String)>) {
    let d = policy.defaults;
    let c = policy.ceilings;
    let mut over = Vec::new();
    let bytes = |q: Option<blueprint::Quantity>| {
        q.map(|q| usize::try_from(q.bytes()).unwrap_or(usize::MAX))
    };
    let mut pick = |field: &'static str,
                    given: Option<u128>,
                    default: u128,
                    ceiling: u128,
                    show: &dyn Fn(u128) -> String| {
        match given {
            Some(v) if v > ceiling => {
                over.push((
                    field,
                    format!(
                        "{} exceeds the host's ceiling of {}",
                        show(v),
                        show(ceiling)
                    ),
                ));
                ceiling
            }
            Some(v) => v,
            None => default.min(ceiling),
        }
    };
    let millis = |v: u128| {
        inrun_contract::duration::format(Duration::from_millis(
            u64::try_from(v).unwrap_or(u64::MAX),
        ))
    };
    let size =
        |v: u128| blueprint::Quantity::from_bytes(u64::try_from(v).unwrap_or(u64::MAX)).to_string();
    let count = |v: u128| v.to_string();
    let deadline = pick(
        "deadline",
        spec.deadline.map(|d| d.as_millis()),
        d.deadline.as_millis(),
        c.deadline.as_millis(),
        &millis,
    );
    let memory = pick(
        "memory",
        bytes(spec.memory).map(|b| b as u128),
        d.memory_bytes as u128,
        c.memory_bytes as u128,
        &size,
    );
    let output = pick(
        "outputSize",
        bytes(spec.output_size).map(|b| b as u128),
        d.output_bytes as u128,
        c.output_bytes as u128,
        &size,
    );
    let resources = pick(
        "resources",
        spec.resources.map(u128::from),
        d.max_resources as u128,
        c.max_resources as u128,
        &count,
    );
    let limits = Limits {
        deadline: Duration::from_millis(u64::try_from(deadline).unwrap_or(u64::MAX)),
        memory_bytes: usize::try_from(memory).unwrap_or(usize::MAX),
        output_bytes: usize::try_from(output).unwrap_or(usize::MAX),
        max_resources: usize::try_from(resources).unwrap_or(usize::MAX),
    };
    (limits, over)
}

struct Builder<'a> {
    spec: &'a CrdSpec,
    templates: &'a Templates,
    slots: &'a HashMap<String, Arc<PluginSlot>>,
    services: &'a Services,
    policy: &'a Policy,
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
            .map_err(|e| self.problem(field, inrun_contract::errors::chain(&e)))
            .ok()
    }

    fn value(&mut self, field: String, value: &serde_json::Value) -> Option<CompiledValue> {
        self.templates
            .compile_value(value)
            .map_err(|e| self.problem(field, inrun_contract::errors::chain(&e)))
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
        let emit_conditions = self.value(
            self.field("emit.conditions"),
            &serde_json::Value::Array(spec.emit.conditions.clone()),
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

    fn reconcile(&mut self, r: &ReconcileSpec, at: &str) -> Option<ReconcilePlan> {
        if !self.policy.foreign_secrets {
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
        for (i, m) in r.managed_resources.iter().enumerate() {
            if m.adopt && !self.policy.capabilities {
                self.problem(
                    format!("{at}.managedResources[{i}].adopt"),
                    "this Blueprint may not adopt objects it did not create: the operator allows it for Blueprint resources with `inrun run --allow-resource-capabilities`".into(),
                );
            }
        }
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
        let mut package = None;
        let reconciler: Option<Arc<dyn Reconciler>> = match r.kind() {
            ReconcilerKind::Declarative | ReconcilerKind::Hooks => {
                let declarative = Declarative::compile(
                    self.templates,
                    at,
                    &r.on_create,
                    &r.on_reconcile,
                    &r.on_delete,
                )
                .map_err(|e| {
                    self.problem(e.field.clone(), inrun_contract::errors::chain(&e.source))
                })
                .ok();
                let mut hooks = Vec::new();
                for (i, h) in r.hooks.iter().enumerate() {
                    let field = format!("{at}.hooks[{i}]");
                    let limits = self.plugin_limits(&field, &h.limits);
                    let grants = self.plugin_grants(&field, &h.capabilities);
                    if let Some(slot) = self.slot(&field) {
                        if let Err(e) = slot.require(World::Hooks, Some(h.function.as_str())) {
                            self.problem(
                                format!("{field}.function"),
                                inrun_contract::errors::chain(&e),
                            );
                            continue;
                        }
                        if !plugins.iter().any(|p| Arc::ptr_eq(p, &slot)) {
                            plugins.push(slot.clone());
                        }
                        hooks.push(Hook {
                            slot,
                            function: h.function.clone(),
                            limits,
                            grants,
                        });
                    }
                }
                match (declarative, hooks.len() == r.hooks.len()) {
                    (Some(d), _) if r.hooks.is_empty() => Some(Arc::new(d)),
                    (Some(d), true) => match Hooks::new(d, hooks) {
                        Ok(h) => Some(Arc::new(h)),
                        Err(e) => {
                            self.problem(format!("{at}.hooks"), inrun_contract::errors::chain(&e));
                            None
                        }
                    },
                    _ => None,
                }
            }
            ReconcilerKind::Constructor => {
                let c = r.constructor.as_ref()?;
                let at_constructor = format!("{at}.constructor");
                let limits = self.plugin_limits(&at_constructor, &c.limits);
                let grants = self.plugin_grants(&at_constructor, &c.capabilities);
                let field = format!("{at_constructor}.location");
                let slot = self.slot(&at_constructor)?;
                plugins.push(slot.clone());
                match Constructor::new(slot, limits, grants) {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) => {
                        self.problem(field, inrun_contract::errors::chain(&e));
                        None
                    }
                }
            }
            ReconcilerKind::Package => {
                let spec = r.package.as_ref()?;
                let at_package = format!("{at}.package");
                // Package calls have a ceiling of their own (hours): callbacks own their
                // timeouts.
                let mut policy = self.policy.clone();
                policy.ceilings.deadline = self.policy.package_deadline;
                let (mut limits, over) = limits_within(&spec.limits, &policy);
                for (name, why) in over {
                    self.problem(format!("{at_package}.limits.{name}"), why);
                }
                if spec.limits.deadline.is_none() {
                    limits.deadline =
                        crate::package::DEFAULT_DEADLINE.min(self.policy.package_deadline);
                }
                let grants = self.plugin_grants(&at_package, &spec.capabilities);
                let slot = self.slot(&at_package)?;
                plugins.push(slot.clone());
                match Package::new(slot, limits, grants) {
                    Ok(p) => {
                        let p = Arc::new(p);
                        package = Some(p.clone());
                        Some(p as Arc<dyn Reconciler>)
                    }
                    Err(e) => {
                        self.problem(
                            format!("{at_package}.location"),
                            inrun_contract::errors::chain(&e),
                        );
                        None
                    }
                }
            }
            ReconcilerKind::Remote => r.remote.as_ref().and_then(|spec| {
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
                Some(
                    Arc::new(Remote::new(spec, http, self.services.secrets.clone()))
                        as Arc<dyn Reconciler>,
                )
            }),
        };
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
        let external = ExternalCalls::compile(self.templates, &r.external, at, clients)
            .map_err(|errors| {
                for e in errors {
                    self.problem(e.field.clone(), inrun_contract::errors::chain(&e.source));
                }
            })
            .ok();
        let ready_when: Vec<ReadyWhen> = r
            .managed_resources
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
            .collect();
        Some(ReconcilePlan {
            ready_when,
            spec: r.clone(),
            reconciler: reconciler?,
            slots: plugins,
            package,
            args: args?,
            requeue: requeue?,
            external: external?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> PluginLimits {
        serde_yaml_ng::from_str(text).expect("limits")
    }

    #[test]
    fn limits_above_a_ceiling_are_named_and_defaults_never_exceed_one() {
        let policy = Policy {
            defaults: Limits::default(),
            ceilings: Limits {
                deadline: Duration::from_secs(1),
                memory_bytes: 32 << 20,
                output_bytes: 1 << 20,
                max_resources: 10,
            },
            tenant_ceilings: Limits::tenant_ceilings(),
            package_deadline: DEFAULT_PACKAGE_CEILING,
            tenant_api_writes: 0,
            tenant_size: TenantSize::default(),
            local_plugins: true,
            capabilities: true,
            egress: None,
            foreign_secrets: true,
        };
        let (limits, over) = limits_within(&spec("{ deadline: 5s, memory: 16Mi }"), &policy);
        assert_eq!(over.len(), 1, "{over:?}");
        assert_eq!(over[0].0, "deadline");
        assert_eq!(over[0].1, "5s exceeds the host's ceiling of 1s");
        assert_eq!(limits.memory_bytes, 16 << 20);
        // Defaults (2s, 100 resources) are lowered to the ceilings.
        let (limits, over) = limits_within(&spec("{}"), &policy);
        assert!(over.is_empty());
        assert_eq!(limits.deadline, Duration::from_secs(1));
        assert_eq!(limits.max_resources, 10);
        let (_, over) = limits_within(&spec("{ memory: 64Mi, resources: 11 }"), &policy);
        let fields: Vec<_> = over.iter().map(|o| o.0).collect();
        assert_eq!(fields, ["memory", "resources"]);
        assert_eq!(over[0].1, "64Mi exceeds the host's ceiling of 32Mi");
    }

    #[test]
    fn without_ceilings_a_blueprint_gets_what_it_asks_within_the_schema() {
        let (limits, over) =
            limits_within(&spec("{ deadline: 4m, memory: 2Gi }"), &Policy::default());
        assert!(over.is_empty());
        assert_eq!(limits.deadline, Duration::from_secs(240));
        assert_eq!(limits.memory_bytes, 2 << 30);
    }

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
