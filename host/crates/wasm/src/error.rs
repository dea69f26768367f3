//! Why a plugin failed to load or a call failed. Messages name the plugin and its digest.

use std::path::PathBuf;
use std::time::Duration;

use super::compiler::CompileFailure;
use super::id::PluginId;

/// A component that could not be loaded. Other plugins are unaffected.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("reading plugin {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid component for this engine.
    #[error("compiling plugin {plugin}")]
    Compile {
        /// The plugin.
        plugin: PluginId,
        /// Wasmtime's error.
        #[source]
        source: wasmtime::Error,
    },
    /// The compile was stopped at a limit, or its process failed.
    #[error("compiling plugin {plugin}")]
    CompileStopped {
        /// The plugin.
        plugin: PluginId,
        /// Which limit, or how the process failed.
        #[source]
        source: CompileFailure,
    },
    /// The plugin's tenant had a compile stopped at a limit lately and may not compile
    /// again yet ([`crate::COMPILE_PAUSE`]).
    #[error(
        "compiling plugin {plugin}: its tenant's last compile was stopped at a limit, so it may compile again only in {} s",
        .for_secs
    )]
    CompilePaused {
        /// The plugin.
        plugin: PluginId,
        /// Seconds left until the tenant may compile.
        for_secs: u64,
    },
    /// The component exports neither world's functions.
    #[error(
        "plugin {plugin} exports no Inrun world: not `reconciler` (`reconcile`), `hooks` (`functions`, `call`) nor `package` (`validate`, `identity`, `observe`, `converge`, `delete`); it exports: {exports}"
    )]
    UnknownWorld {
        /// The plugin.
        plugin: PluginId,
        /// What it does export, comma separated.
        exports: String,
    },
    /// The component imports something the host does not grant.
    #[error("plugin {plugin} cannot be linked: it imports something this host does not grant")]
    Link {
        /// The plugin.
        plugin: PluginId,
        /// Wasmtime's error, naming the import.
        #[source]
        source: wasmtime::Error,
    },
    /// The engine itself could not be built (bad settings).
    #[error("building the Wasm engine")]
    Engine(#[source] wasmtime::Error),
    /// Asking a hooks component for its functions failed.
    #[error("asking plugin {plugin} for its hook functions")]
    Functions {
        /// The plugin.
        plugin: PluginId,
        /// Why the call failed.
        #[source]
        source: Box<CallError>,
    },
    /// A function the Blueprint names is not among those the hooks component exports.
    #[error("plugin {plugin} has no hook function {function:?}; it exports: {available}")]
    MissingFunction {
        /// The plugin.
        plugin: PluginId,
        /// The name the Blueprint asked for.
        function: String,
        /// The functions it has, comma separated.
        available: String,
    },
    /// The plugin is a component of the other world than the Blueprint needs.
    #[error("plugin {plugin} is a `{found}` component, but it is used as a `{wanted}` component")]
    WrongWorld {
        /// The plugin.
        plugin: PluginId,
        /// The world the Blueprint needs.
        wanted: &'static str,
        /// The world it implements.
        found: &'static str,
    },
}

/// A call that failed. Only this call is affected; the next call starts afresh. The
/// message names the plugin; what went wrong is its source, so
/// `inrun_contract::errors::chain` prints `plugin <id>: <failure>`.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin}")]
pub struct CallError {
    /// Which plugin.
    pub plugin: PluginId,
    /// What went wrong.
    #[source]
    pub failure: CallFailure,
}

/// What went wrong in one call.
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    /// The call ran past its deadline and was interrupted.
    #[error("exceeded its {}s deadline", .0.as_secs_f64())]
    Deadline(Duration),
    /// The plugin tried to grow its memory past the cap.
    #[error("exceeded its memory cap of {} MiB", .0 >> 20)]
    Memory(usize),
    /// The plugin trapped (a panic in Rust guests shows up here, with its message).
    #[error("trapped: {reason}{}", stderr_suffix(.stderr))]
    Trap {
        /// The trap, e.g. `wasm trap: wasm 'unreachable' instruction executed`.
        reason: String,
        /// The first line the guest wrote to stderr, which names a panic's cause.
        stderr: Option<String>,
    },
    /// The plugin returned an error of its own.
    #[error("returned an error: {0}")]
    Returned(String),
    /// The plugin's output broke the contract (bad JSON, not an object, too large, ...).
    #[error("returned a bad outcome: {0}")]
    BadOutput(String),
    /// The call would have passed a budget its tenant or the host shares with others
    /// (memory across calls in flight, calls in flight); the budget is named.
    #[error("was stopped by {0}")]
    Budget(String),
    /// The host could not run the call (e.g. instance pool exhausted).
    #[error("could not be run")]
    Host(#[source] wasmtime::Error),
}

impl CallFailure {
    /// One word for what went wrong, as the metrics label it: `deadline`, `memory`,
    /// `trap`, `returned`, `bad_output`, `budget` or `host`.
    pub fn outcome(&self) -> &'static str {
        match self {
            CallFailure::Deadline(_) => "deadline",
            CallFailure::Memory(_) => "memory",
            CallFailure::Trap { .. } => "trap",
            CallFailure::Returned(_) => "returned",
            CallFailure::BadOutput(_) => "bad_output",
            CallFailure::Budget(_) => "budget",
            CallFailure::Host(_) => "host",
        }
    }
}

fn stderr_suffix(stderr: &Option<String>) -> String {
    stderr
        .as_ref()
        .map(|s| format!(" (stderr: {s})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_errors_chain_names_the_plugin_and_the_failure_once() {
        let err = CallError {
            plugin: PluginId {
                name: "spin".into(),
                digest: "sha256:abc".into(),
            },
            failure: CallFailure::Deadline(Duration::from_millis(300)),
        };
        assert_eq!(inrun_contract::errors::repeated_cause(&err), None);
        let text = inrun_contract::errors::chain(&err);
        assert_eq!(
            text.matches("exceeded its 0.3s deadline").count(),
            1,
            "{text}"
        );
        assert!(text.starts_with("plugin spin"), "{text}");
    }
}
