//! Test guest: version "v2" of the stamp reconciler (see `plugins/stamp/stamp.rs`).

/// The version this build stamps.
const VERSION: &str = "v2";

include!("../../stamp/stamp.rs");
