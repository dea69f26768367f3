//! Reconcilers backed by Wasm components: a constructor (the `reconciler` world) and
//! hooks (templates first, then each hook function in Blueprint order).

use async_trait::async_trait;
use tracing::Instrument;

use super::{ReconcileError, Reconciler, ReconcilerKind, declarative::Declarative, finish};
use std::sync::Arc;

use crate::plugins::PluginSlot;
use inrun_contract::{Outcome, Request};
use inrun_wasm::{Grants, Limits, Plugin};

/// A full reconciler in a component.
#[derive(Debug)]
pub struct Constructor {
    slot: Arc<PluginSlot>,
    limits: Limits,
    grants: Grants,
}

impl Constructor {
    /// Wraps the slot of a `reconciler`-world plugin; each call uses the version serving
    /// then, so a hot reload takes effect at the next call.
    ///
    /// # Errors
    /// [`inrun_wasm::LoadError::WrongWorld`] when the plugin is a hooks component.
    pub fn new(
        slot: Arc<PluginSlot>,
        limits: Limits,
        grants: Grants,
    ) -> Result<Self, inrun_wasm::LoadError> {
        slot.require(inrun_wasm::World::Reconciler, None)?;
        Ok(Constructor {
            slot,
            limits,
            grants,
        })
    }

    /// The plugin serving calls now.
    pub fn plugin(&self) -> Plugin {
        self.slot.current()
    }
}

#[async_trait]
impl Reconciler for Constructor {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Constructor
    }

    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        let plugin = self.slot.current();
        let span = plugin_span(&plugin, "reconcile");
        let outcome = plugin
            .reconcile(req, &self.limits, &self.grants)
            .instrument(span)
            .await?;
        finish(outcome, req)
    }
}

/// The span of one call of `plugin`'s `function`.
fn plugin_span(plugin: &Plugin, function: &str) -> tracing::Span {
    let id = plugin.id();
    tracing::debug_span!(
        "plugin.call",
        plugin.name = %id.name,
        plugin.digest = %id.digest_ref(),
        plugin.function = %function,
        inrun.tenant = %plugin.tenant().unwrap_or("-"),
    )
}

/// One hook function of one component, with its limits.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The hooks component's slot.
    pub slot: Arc<PluginSlot>,
    /// The function to call.
    pub function: String,
    /// Limits for each call.
    pub limits: Limits,
    /// What the component may reach beyond its sandbox.
    pub grants: Grants,
}

/// Templates render an outcome; each hook then transforms it, in order.
#[derive(Debug)]
pub struct Hooks {
    templates: Declarative,
    hooks: Vec<Hook>,
}

impl Hooks {
    /// Checks that every hook's function is exported by its component.
    ///
    /// # Errors
    /// [`inrun_wasm::LoadError::MissingFunction`] or `WrongWorld` for the first bad hook.
    pub fn new(templates: Declarative, hooks: Vec<Hook>) -> Result<Self, inrun_wasm::LoadError> {
        for hook in &hooks {
            hook.slot
                .require(inrun_wasm::World::Hooks, Some(hook.function.as_str()))?;
        }
        Ok(Hooks { templates, hooks })
    }

    /// The hooks, in call order.
    pub fn hooks(&self) -> &[Hook] {
        &self.hooks
    }
}

#[async_trait]
impl Reconciler for Hooks {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Hooks
    }

    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        let rendered = self.templates.reconcile(req).await?;
        let mut outcome = rendered;
        for hook in &self.hooks {
            let plugin = hook.slot.current();
            let span = plugin_span(&plugin, &hook.function);
            outcome = plugin
                .call_hook(&hook.function, req, &outcome, &hook.limits, &hook.grants)
                .instrument(span)
                .await?;
        }
        finish(outcome, req)
    }
}
