//! A loaded component ([`Plugin`]): which world it implements, what it imports and
//! exports, and a pre-linked instance template that each call instantiates afresh, with
//! the instances it keeps for later calls. `load.rs` makes one; `call.rs` calls it.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::ahead::Ahead;
use super::engine::Engine;
use super::error::LoadError;
use super::guest::Pre;
use super::id::PluginId;
use super::reuse::Instances;

/// The WIT world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    /// `reconciler`: one `reconcile` function (Inrun's constructor kind).
    Reconciler,
    /// `hooks`: named functions that adjust an outcome.
    Hooks,
    /// `package` (`inrun:reconciler@0.2.0`): an observe/converge reconciler for
    /// infrastructure outside Kubernetes.
    Package,
}

impl World {
    /// The world's name in the WIT package.
    pub fn name(self) -> &'static str {
        match self {
            World::Reconciler => "reconciler",
            World::Hooks => "hooks",
            World::Package => "package",
        }
    }
}

/// What `inrun plugin inspect` shows.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    /// The plugin's name.
    pub name: String,
    /// `sha256:<hex>` of its bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: usize,
    /// Size of its compiled form (code and memory images), in bytes.
    pub compiled_size: usize,
    /// The world it implements.
    pub world: World,
    /// The version of `inrun:reconciler` its world is from: `0.1.0` or `0.2.0`.
    pub contract: &'static str,
    /// Exported functions (for hooks, also the function names it serves).
    pub exports: Vec<String>,
    /// Hook functions, for a hooks component.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
    /// Imported interfaces.
    pub imports: Vec<String>,
}

/// A component ready to be called. Cheap to clone; calls may run concurrently.
#[derive(Clone)]
pub struct Plugin {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) engine: Engine,
    pub(super) id: Arc<PluginId>,
    pub(super) pre: Pre,
    pub(super) info: PluginInfo,
    /// Idle instances kept for reuse ([`super::reuse`]); they go with the plugin.
    pub(super) kept: Instances,
    /// The instance made ahead for the next call ([`super::ahead`]); it goes with the
    /// plugin.
    pub(super) ahead: Ahead,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plugin({})", self.inner.id)
    }
}

impl Plugin {
    /// The engine it was compiled by.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(super) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The plugin's name and digest.
    pub fn id(&self) -> &PluginId {
        &self.inner.id
    }

    /// The tenant whose budget its calls use; `None`: the host's own.
    pub fn tenant(&self) -> Option<&str> {
        self.inner.engine.tenant_name()
    }

    /// Idle instances kept for reuse ([`super::limits::Limits::reuse_calls`]).
    pub fn idle_instances(&self) -> usize {
        self.inner.kept.len()
    }

    /// Whether an instance made ahead waits for this plugin's next call.
    pub fn ready_ahead(&self) -> bool {
        self.inner.ahead.ready()
    }

    /// How long the plugin's last instantiation took, on a call's path or made ahead.
    pub fn instantiation_time(&self) -> Duration {
        self.inner.ahead.instantiation_time()
    }

    /// Whether the next instance is being made now.
    pub fn making_ahead(&self) -> bool {
        self.inner.ahead.making()
    }

    /// Calls of this plugin an instance made ahead has served.
    pub fn calls_made_ahead(&self) -> u64 {
        self.inner.ahead.calls_served()
    }

    /// The world it implements.
    pub fn world(&self) -> World {
        self.inner.info.world
    }

    /// What it imports, exports and is.
    pub fn info(&self) -> &PluginInfo {
        &self.inner.info
    }

    /// Fails unless the plugin implements `world`.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`].
    pub fn expect_world(&self, world: World) -> Result<(), LoadError> {
        if self.world() == world {
            return Ok(());
        }
        Err(LoadError::WrongWorld {
            plugin: self.id().clone(),
            wanted: world.name(),
            found: self.world().name(),
        })
    }

    /// Fails unless this hooks component exports every function in `names`.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`] for a reconciler component, [`LoadError::MissingFunction`]
    /// for the first name it lacks.
    pub fn expect_functions<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), LoadError> {
        self.expect_world(World::Hooks)?;
        let have = &self.inner.info.functions;
        for name in names {
            if !have.iter().any(|f| f == name) {
                return Err(LoadError::MissingFunction {
                    plugin: self.id().clone(),
                    function: name.to_string(),
                    available: have.join(", "),
                });
            }
        }
        Ok(())
    }
}
