//! One plugin location's slot: the component serving calls now, what the Blueprint
//! expects of it, and where its reloads stand.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde::Serialize;

use super::lock;
use crate::egress::Egress;
use crate::sources::{Location, PullSecret};
use inrun_wasm::{LoadError, Plugin, World};

/// What a Blueprint needs a plugin to be: its world and, for hooks, the functions it calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// The world every reference agrees on (the first reference decides).
    pub world: Option<World>,
    /// Hook functions some reference calls.
    pub functions: BTreeSet<String>,
}

impl Expect {
    /// Fails unless `plugin` meets every expectation.
    ///
    /// # Errors
    /// The plugin's [`LoadError`] for the wrong world or a missing function.
    pub fn check(&self, plugin: &Plugin) -> Result<(), LoadError> {
        if let Some(world) = self.world {
            plugin.expect_world(world)?;
        }
        if !self.functions.is_empty() {
            plugin.expect_functions(self.functions.iter().map(String::as_str))?;
        }
        Ok(())
    }
}

/// Where a slot stands, for the console, `/state` and tests.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SlotStatus {
    /// The location as written (absolute for files).
    pub location: String,
    /// The plugin's name.
    pub name: String,
    /// `sha256:<hex>` of the component that serves calls now.
    pub digest: String,
    /// The source's version of the serving component (a manifest digest for OCI).
    pub version: String,
    /// Seconds since the epoch when the serving version was swapped in.
    pub loaded_at: u64,
    /// Versions swapped in after the first.
    pub reloads: u64,
    /// Why the newest version could not replace the serving one, while that is so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The source version that failed, so it is not retried until the source changes again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
}

/// One plugin location and the component that serves it now.
pub struct PluginSlot {
    pub(super) location: Location,
    pub(super) pull: Option<PullSecret>,
    /// The egress rules its fetches are held to, reloads included.
    pub(super) egress: Option<Egress>,
    current: RwLock<Plugin>,
    status: Mutex<SlotStatus>,
    expect: Mutex<Expect>,
}

impl std::fmt::Debug for PluginSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PluginSlot({})", self.location)
    }
}

/// Seconds since the Unix epoch, for [`SlotStatus::loaded_at`].
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl PluginSlot {
    /// A slot serving `plugin`, fetched from `location` at `version`.
    pub fn new(
        location: Location,
        pull: Option<PullSecret>,
        plugin: Plugin,
        version: String,
    ) -> Arc<Self> {
        Self::fetched(location, pull, None, plugin, version)
    }

    /// The same, its reloads fetched under `egress`.
    pub(super) fn fetched(
        location: Location,
        pull: Option<PullSecret>,
        egress: Option<Egress>,
        plugin: Plugin,
        version: String,
    ) -> Arc<Self> {
        let status = SlotStatus {
            location: location.to_string(),
            name: plugin.id().name.clone(),
            digest: plugin.id().digest_ref(),
            version,
            loaded_at: now_secs(),
            reloads: 0,
            last_error: None,
            failed_version: None,
        };
        Arc::new(PluginSlot {
            location,
            pull,
            egress,
            current: RwLock::new(plugin),
            status: Mutex::new(status),
            expect: Mutex::new(Expect::default()),
        })
    }

    /// A slot for a component already in hand (tests, benchmarks, `render` of one file).
    pub fn fixed(plugin: Plugin) -> Arc<Self> {
        let version = plugin.id().digest_ref();
        let location = Location::File(std::path::PathBuf::from(format!(
            "{}.wasm",
            plugin.id().name
        )));
        Self::new(location, None, plugin, version)
    }

    /// A slot serving this one's component as it is now, never reloaded: the version a
    /// rollout keeps for the CRs it has not moved, once this slot takes a new one.
    pub fn frozen(&self) -> Arc<PluginSlot> {
        Arc::new(PluginSlot {
            location: self.location.clone(),
            pull: self.pull.clone(),
            egress: self.egress.clone(),
            current: RwLock::new(self.current()),
            status: Mutex::new(self.status()),
            expect: Mutex::new(lock(&self.expect).clone()),
        })
    }

    /// The component calls use now. Take it once per call and keep it for the whole call.
    pub fn current(&self) -> Plugin {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where the component comes from.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Where the slot stands.
    pub fn status(&self) -> SlotStatus {
        lock(&self.status).clone()
    }

    /// Adds what one Blueprint reference needs of this plugin, checking the serving
    /// component meets it.
    ///
    /// # Errors
    /// [`LoadError`] when the serving component is the wrong world or lacks the function.
    pub fn require(&self, world: World, function: Option<&str>) -> Result<(), LoadError> {
        let plugin = self.current();
        plugin.expect_world(world)?;
        if let Some(f) = function {
            plugin.expect_functions([f])?;
        }
        let mut expect = lock(&self.expect);
        expect.world.get_or_insert(world);
        if let Some(f) = function {
            expect.functions.insert(f.to_string());
        }
        Ok(())
    }

    /// Swaps in `plugin` if it meets the slot's expectations; else records why not and
    /// keeps the serving component. Returns whether it was swapped in.
    pub fn offer(&self, plugin: Plugin, version: String) -> bool {
        let checked = lock(&self.expect).check(&plugin);
        match checked {
            Ok(()) => {
                let mut status = lock(&self.status);
                status.name = plugin.id().name.clone();
                status.digest = plugin.id().digest_ref();
                status.version = version;
                status.loaded_at = now_secs();
                status.reloads += 1;
                status.last_error = None;
                status.failed_version = None;
                let old = std::mem::replace(
                    &mut *self.current.write().unwrap_or_else(|p| p.into_inner()),
                    plugin,
                );
                drop(status);
                // Calls in flight keep the old version alive; the engine need not.
                if old.id().digest != self.current().id().digest {
                    old.engine().forget_digest(&old.id().digest);
                }
                true
            }
            Err(e) => {
                self.refuse(version, inrun_contract::errors::chain(&e));
                false
            }
        }
    }

    /// Records that `version` could not replace the serving component.
    pub fn refuse(&self, version: String, error: String) {
        let mut status = lock(&self.status);
        status.failed_version = Some(version);
        status.last_error = Some(error);
    }
}
