//! Test guest: version "v1" of the stamp reconciler (see `plugins/stamp/stamp.rs`).

/// The version this build stamps.
const VERSION: &str = "v1";

include!("../../stamp/stamp.rs");
