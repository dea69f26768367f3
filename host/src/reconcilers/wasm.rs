//! Reconcilers backed by Wasm components: a constructor (the `reconciler` world) and
//! hooks (templates first, then each hook function in Blueprint order).

use async_trait::async_trait;

use super::{ReconcileError, Reconciler, ReconcilerKind, declarative::Declarative, finish};
use crate::contract::{Outcome, Request};
use crate::wasm::{Limits, Plugin};

/// A full reconciler in a component.
#[derive(Debug)]
pub struct Constructor {
    plugin: Plugin,
    limits: Limits,
}

impl Constructor {
    /// Wraps a loaded `reconciler`-world plugin.
    ///
    /// # Errors
    /// [`crate::wasm::LoadError::WrongWorld`] when the plugin is a hooks component.
    pub fn new(plugin: Plugin, limits: Limits) -> Result<Self, crate::wasm::LoadError> {
        plugin.expect_world(crate::wasm::World::Reconciler)?;
        Ok(Constructor { plugin, limits })
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }
}

#[async_trait]
impl Reconciler for Constructor {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Constructor
    }

    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        let outcome = self.plugin.reconcile(req, &self.limits).await?;
        finish(outcome, req)
    }
}

/// One hook function of one component, with its limits.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The hooks component.
    pub plugin: Plugin,
    /// The function to call.
    pub function: String,
    /// Limits for each call.
    pub limits: Limits,
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
    /// [`crate::wasm::LoadError::MissingFunction`] or `WrongWorld` for the first bad hook.
    pub fn new(templates: Declarative, hooks: Vec<Hook>) -> Result<Self, crate::wasm::LoadError> {
        for hook in &hooks {
            hook.plugin.expect_functions([hook.function.as_str()])?;
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
            outcome = hook
                .plugin
                .call_hook(&hook.function, req, &outcome, &hook.limits)
                .await?;
        }
        finish(outcome, req)
    }
}
