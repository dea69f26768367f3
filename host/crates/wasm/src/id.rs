//! How logs and errors name a plugin: its name and the sha256 of its bytes ([`PluginId`]).

use std::fmt;

/// A plugin's name and the sha256 of its bytes, as it appears in logs and errors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginId {
    /// A short name, usually the file stem (`webapp`).
    pub name: String,
    /// Lowercase hex sha256 of the component's bytes.
    pub digest: String,
}

impl PluginId {
    /// `sha256:<hex>`.
    pub fn digest_ref(&self) -> String {
        format!("sha256:{}", self.digest)
    }
}

impl fmt::Display for PluginId {
    /// `webapp@sha256:ab12cd34ef56…`: enough of the digest to tell versions apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.digest.get(..12).unwrap_or(&self.digest);
        write!(f, "{}@sha256:{short}…", self.name)
    }
}
