//! A Blueprint made ready to run: every template compiled, every plugin loaded and checked,
//! one plan per CRD (and per serve target). Errors name the file, CRD and field. The plans'
//! steps live in [`crate::plan`]; here is only how they are built.

mod builder;
mod fetch;
mod grants;
mod limits;
mod services;
#[cfg(test)]
pub(crate) mod testing;

pub use grants::grants;
pub use limits::{DEFAULT_PACKAGE_CEILING, Policy, TenantSize, limits, limits_within};
pub use services::Services;

use std::path::Path;

use crate::plan::{CrdPlan, ReconcilePlan};
use crate::plugins::PluginSet;
use builder::Builder;
use inrun_blueprint::{self as blueprint, Blueprint, BlueprintError};
use inrun_template::Engine as Templates;
use inrun_wasm::Engine;

/// A loaded, checked Blueprint.
pub struct Assembly {
    /// The Blueprint as written.
    pub blueprint: Blueprint,
    crds: Vec<CrdPlan>,
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
        Self::build_alone(blueprint::load(path)?, engine, services).await
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
        Self::build_alone(blueprint, engine, &Services::offline()).await
    }

    /// Assembles a parsed Blueprint with `services` (as [`Assembly::load_with`] does a
    /// file's): `inrun plan` builds the running and the new version side by side.
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template or plugin that failed.
    pub async fn from_blueprint_with(
        blueprint: Blueprint,
        engine: &Engine,
        services: &Services,
    ) -> Result<Self, BlueprintError> {
        Self::build_alone(blueprint, engine, services).await
    }

    /// Assembles `blueprint` on its own: a plugin set of its own and the default limits
    /// policy (what a tenant of a fleet shares with others is not in play).
    async fn build_alone(
        blueprint: Blueprint,
        engine: &Engine,
        services: &Services,
    ) -> Result<Self, BlueprintError> {
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

    /// Assembles a parsed Blueprint: fetches and compiles its plugins into the context's
    /// slots (reusing slots the set already holds), compiles templates, and builds remote
    /// reconcilers and external calls.
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] listing every template, plugin or limit that failed.
    pub async fn build(blueprint: Blueprint, cx: BuildContext<'_>) -> Result<Self, BlueprintError> {
        let mut problems = Vec::new();
        let slots = fetch::plugin_slots(&blueprint, cx, &mut problems).await;
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

/// One line for a reconcile block: its reconciler kind and plugins.
fn describe(plan: &ReconcilePlan) -> String {
    let mut s = plan.reconciler.kind().as_str().to_string();
    for p in &plan.plugins() {
        s.push_str(&format!(" {}@{} ({} bytes)", p.name, p.sha256, p.size));
    }
    s
}
