//! An infrastructure package: a `package`-world component the host drives through
//! validate, identity, observe, converge and delete (`inrun_pass::infrastructure` decides when).

use std::sync::Arc;

use async_trait::async_trait;

use super::{ReconcileError, Reconciler, ReconcilerKind};
use crate::plugins::PluginSlot;
use inrun_contract::package::{Change, Identity, Observation, Options, Workflow};
use inrun_contract::{Outcome, Request};
use inrun_wasm::{CallError, Grants, Limits, Plugin, World};

/// How long one package call may take when the Blueprint sets no deadline: packages talk
/// to backends over the network, so the Request/Result default (2 s) is too short.
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// A package component with its limits and grants. Each call uses the version serving
/// then, so a hot reload takes effect at the next call.
#[derive(Debug)]
pub struct Package {
    slot: Arc<PluginSlot>,
    limits: Limits,
    grants: Grants,
}

impl Package {
    /// Wraps the slot of a `package`-world plugin.
    ///
    /// # Errors
    /// [`inrun_wasm::LoadError::WrongWorld`] when the plugin is another world's.
    pub fn new(
        slot: Arc<PluginSlot>,
        limits: Limits,
        grants: Grants,
    ) -> Result<Self, inrun_wasm::LoadError> {
        slot.require(World::Package, None)?;
        Ok(Package {
            slot,
            limits,
            grants,
        })
    }

    /// The plugin serving calls now.
    pub fn plugin(&self) -> Plugin {
        self.slot.current()
    }

    /// `validate`.
    ///
    /// # Errors
    /// [`CallError`] when the call failed.
    pub async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallError> {
        self.plugin()
            .package_validate(opts, &self.limits, &self.grants)
            .await
    }

    /// `identity`.
    ///
    /// # Errors
    /// [`CallError`] when the call failed or the package returned an error.
    pub async fn identity(&self, opts: &Options) -> Result<Identity, CallError> {
        self.plugin()
            .package_identity(opts, &self.limits, &self.grants)
            .await
    }

    /// `observe`.
    ///
    /// # Errors
    /// [`CallError`] when the call failed or the package returned an error.
    pub async fn observe(&self, opts: &Options) -> Result<Observation, CallError> {
        self.plugin()
            .package_observe(opts, &self.limits, &self.grants)
            .await
    }

    /// `converge` or `delete`, as `change` says.
    ///
    /// # Errors
    /// [`CallError`] when the call failed or the package returned an error.
    pub async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallError> {
        self.plugin()
            .package_workflow(change, opts, &self.limits, &self.grants)
            .await
    }
}

/// A package answers no Request: the pass drives it through its own steps. This keeps one
/// reconciler per block for what reports the kind (spans, metrics, `/blueprint`).
#[async_trait]
impl Reconciler for Package {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Package
    }

    async fn reconcile(&self, _req: &Request) -> Result<Outcome, ReconcileError> {
        Err(ReconcileError::Aborted(
            "a package is driven through observe and converge, not Request/Result".into(),
        ))
    }
}
