//! Checks of a `secretRef`: the Secret's name, key and namespace.

use super::{Report, names};
use crate::refs::SecretRef;

/// Checks `secret`, reported at `at`.
pub(super) fn secret_ref(r: &mut Report<'_>, secret: &SecretRef, at: &str) {
    r.check(
        names::is_dns_subdomain(&secret.name),
        format!("{at}.name"),
        "must be a Secret name (a lowercase DNS subdomain)",
    );
    r.check(
        names::is_secret_key(&secret.key),
        format!("{at}.key"),
        "must be a Secret key (letters, digits, '-', '_', '.')",
    );
    if let Some(ns) = &secret.namespace {
        r.check(
            names::is_dns_label(ns),
            format!("{at}.namespace"),
            "must be a lowercase DNS label",
        );
    }
}
