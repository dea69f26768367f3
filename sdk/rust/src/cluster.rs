//! Reading Kubernetes objects through the host, for a plugin whose Blueprint entry grants
//! `capabilities.cluster.read` for the kind:
//!
//! ```yaml
//! constructor:
//!   location: ./my-plugin.wasm
//!   capabilities:
//!     cluster:
//!       read:
//!         - { apiVersion: v1, kind: ConfigMap, namespaces: [shared] }
//! ```
//!
//! Objects come from the host's watch cache as [`Value`]s. A kind or namespace the grant
//! does not cover is an `Err` saying so (it is "not granted"), which a reconciler can
//! return as its own error:
//!
//! ```no_run
//! use inrun_sdk::cluster;
//!
//! # fn f() -> Result<(), String> {
//! // The CR's own namespace:
//! let settings = cluster::get("v1", "ConfigMap", None, "settings")?;
//! let color = settings
//!     .as_ref()
//!     .and_then(|cm| cm["data"]["color"].as_str())
//!     .unwrap_or("blue");
//! // Another namespace, with a label selector:
//! let shared = cluster::list("v1", "ConfigMap", Some("shared"), Some("app=web"))?;
//! # Ok(()) }
//! ```
//!
//! Compiled for a native target (a plugin's unit tests), every read fails: there is no host.

use serde_json::Value;

/// The object `name` of `kind` in `api_version` (`"v1"`, `"apps/v1"`, ...), or `None`
/// when it does not exist.
///
/// `namespace`: `None` is the CR's own namespace (and the only choice for a kind granted as
/// cluster-scoped).
///
/// # Errors
/// The read is not granted, the host cannot serve it, or its answer is not JSON.
pub fn get(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    match imp::get(api_version, kind, namespace, name)? {
        None => Ok(None),
        Some(text) => parse(&text).map(Some),
    }
}

/// Every object of `kind` in `api_version` in `namespace` whose labels match
/// `label_selector` (equality terms only: `"app=web,tier=front"`).
///
/// `namespace`: `None` is the CR's own namespace (or, for a kind granted as
/// cluster-scoped, the whole cluster); `Some("*")` is every namespace, when the grant says
/// `namespaces: ["*"]`.
///
/// # Errors
/// As [`get`]; also a selector that is not a list of `key=value` terms.
pub fn list(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, String> {
    imp::list(api_version, kind, namespace, label_selector)?
        .iter()
        .map(|text| parse(text))
        .collect()
}

fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("the host sent an object that is not JSON: {e}"))
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use crate::bindings::reconciler::inrun::reconciler0_1_0::cluster;

    pub fn get(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String> {
        cluster::get(api_version, kind, namespace, name)
    }

    pub fn list(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        cluster::list(api_version, kind, namespace, label_selector)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    const NO_HOST: &str = "no host: cluster reads work only inside the Inrun host";

    pub fn get(
        _api_version: &str,
        _kind: &str,
        _namespace: Option<&str>,
        _name: &str,
    ) -> Result<Option<String>, String> {
        Err(NO_HOST.into())
    }

    pub fn list(
        _api_version: &str,
        _kind: &str,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        Err(NO_HOST.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fail_clearly_without_a_host() {
        let err = get("v1", "ConfigMap", None, "a").unwrap_err();
        assert!(err.starts_with("no host"), "{err}");
        assert!(list("v1", "ConfigMap", None, None).is_err());
    }
}
