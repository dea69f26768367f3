//! Logging through the host: each line lands in the host's log, tagged with the plugin.
//!
//! Plain functions take a message; the macros of the same names format one:
//!
//! ```
//! use inrun_sdk::log;
//!
//! log::info("reconciling");
//! log::warn!("{} replicas requested, capping at {}", 50, 10);
//! ```
//!
//! Compiled for a native target (a plugin's unit tests, a native benchmark), the lines
//! go to standard error instead, since there is no host to receive them.

use std::fmt;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Information useful when debugging a plugin.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin worked around.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// The level's lowercase name, as the host prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Level> for crate::bindings::types::Level {
    fn from(level: Level) -> Self {
        use crate::bindings::types::Level as Wit;
        match level {
            Level::Trace => Wit::Trace,
            Level::Debug => Wit::Debug,
            Level::Info => Wit::Info,
            Level::Warn => Wit::Warn,
            Level::Error => Wit::Error,
        }
    }
}

/// Writes `message` to the host's log at `level`. The host truncates long messages.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::reconciler::inrun::reconciler0_1_0::host::log(level.into(), message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level}] {message}");
}

/// Writes `message` to the host's log at [`Level::Trace`].
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Writes `message` to the host's log at [`Level::Debug`].
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Writes `message` to the host's log at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Writes `message` to the host's log at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Writes `message` to the host's log at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message);
}

/// Formats a message and writes it to the host's log at [`Level::Trace`].
#[doc(inline)]
pub use crate::__inrun_log_trace as trace;

/// Formats a message and writes it to the host's log at [`Level::Debug`].
#[doc(inline)]
pub use crate::__inrun_log_debug as debug;

/// Formats a message and writes it to the host's log at [`Level::Info`].
#[doc(inline)]
pub use crate::__inrun_log_info as info;

/// Formats a message and writes it to the host's log at [`Level::Warn`].
#[doc(inline)]
pub use crate::__inrun_log_warn as warn;

/// Formats a message and writes it to the host's log at [`Level::Error`].
#[doc(inline)]
pub use crate::__inrun_log_error as error;

/// Formats a message and writes it to the host's log at [`Level::Trace`].
#[doc(hidden)]
#[macro_export]
macro_rules! __inrun_log_trace {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Formats a message and writes it to the host's log at [`Level::Debug`].
#[doc(hidden)]
#[macro_export]
macro_rules! __inrun_log_debug {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Formats a message and writes it to the host's log at [`Level::Info`].
#[doc(hidden)]
#[macro_export]
macro_rules! __inrun_log_info {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Formats a message and writes it to the host's log at [`Level::Warn`].
#[doc(hidden)]
#[macro_export]
macro_rules! __inrun_log_warn {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Formats a message and writes it to the host's log at [`Level::Error`].
#[doc(hidden)]
#[macro_export]
macro_rules! __inrun_log_error {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Error, &::std::format!($($arg)+)) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::types::Level as Wit;

    #[test]
    fn levels_map_one_to_one_onto_the_wit_enum() {
        let pairs = [
            (Level::Trace, Wit::Trace),
            (Level::Debug, Wit::Debug),
            (Level::Info, Wit::Info),
            (Level::Warn, Wit::Warn),
            (Level::Error, Wit::Error),
        ];
        for (level, wit) in pairs {
            assert_eq!(Wit::from(level), wit, "{level}");
        }
    }

    #[test]
    fn the_function_and_the_macro_of_a_level_both_compile_natively() {
        info("plain");
        crate::log::info!("formatted {}", 1);
    }
}
