//! What the engine tells the host as it loads plugins and serves their calls: the
//! [`Observer`] the host's metrics implement, and [`Unobserved`], which records nothing.

use std::fmt;
use std::time::Duration;

/// What the engine reports as it loads plugins and serves their host calls. The host's
/// metrics implement it; it is handed to [`Engine::new`](crate::Engine::new) in
/// [`EngineSettings`](crate::EngineSettings), so nothing here records into a global.
pub trait Observer: Send + Sync + fmt::Debug {
    /// A plugin was loaded: from `memory` (already compiled), the on-disk `cache`, or
    /// `compiled` anew.
    fn plugin_loaded(&self, source: &'static str);
    /// A host import answered: `capability` is `cluster` or `http`; `outcome` is `ok`,
    /// `refused` (not granted) or `error`.
    fn host_call(&self, capability: &'static str, outcome: &'static str);
    /// A changed plugin source was checked: `ok` when the new version swapped in, false when
    /// the previous version keeps serving.
    fn plugin_reloaded(&self, ok: bool);
    /// A call into `plugin` ended after `elapsed` (a fresh instance, the call, the check of
    /// its output): `outcome` is `ok` or [`CallFailure::outcome`](crate::CallFailure::outcome).
    /// Records nothing unless implemented.
    fn plugin_called(&self, plugin: &str, outcome: &'static str, elapsed: Duration) {
        let _ = (plugin, outcome, elapsed);
    }
    /// `plugin` started (`true`) or finished (`false`) loading: compiling, or reading the
    /// compile cache. What is loading is what readiness waits for. Records nothing unless
    /// implemented.
    fn plugin_loading(&self, plugin: &str, loading: bool) {
        let _ = (plugin, loading);
    }
    /// `lines` log lines of one call of `plugin` were dropped: its tenant was over its
    /// log budget. Records nothing unless implemented.
    fn plugin_logs_dropped(&self, plugin: &str, lines: u64) {
        let _ = (plugin, lines);
    }
}

/// An [`Observer`] that records nothing.
#[derive(Debug, Default)]
pub struct Unobserved;

impl Observer for Unobserved {
    fn plugin_loaded(&self, _source: &'static str) {}
    fn host_call(&self, _capability: &'static str, _outcome: &'static str) {}
    fn plugin_reloaded(&self, _ok: bool) {}
}
