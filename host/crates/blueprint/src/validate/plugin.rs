//! Rules on a reconcile block's plugins (hooks, constructor, package): where each comes
//! from, its limits, and which may read credentials.

use std::path::Path;
use std::time::Duration;

use super::names;
use super::{MAX_CALL_TIME, Report};
use crate::location::{Location, LocationError};
use crate::quantity::Quantity;
use crate::reconcile::{HookSpec, PluginLimits, PluginSpec};
use crate::refs::PullSecretRef;

/// One hook (at `f`): where it comes from, a function name, its limits and capabilities.
pub(super) fn hook(r: &mut Report<'_>, hook: &HookSpec, f: &str) {
    location(
        r,
        &hook.location,
        hook.digest.as_deref(),
        hook.pull_secret.as_ref(),
        f,
    );
    r.check(
        !hook.function.trim().is_empty(),
        format!("{f}.function"),
        "must not be empty",
    );
    limits(r, &hook.limits, &format!("{f}.limits"));
    super::capabilities::check(r, &hook.capabilities, &format!("{f}.capabilities"));
    only_packages_read_credentials(r, &hook.capabilities, f);
}

/// The constructor (at `f`): where it comes from, its limits and capabilities.
pub(super) fn constructor(r: &mut Report<'_>, constructor: &PluginSpec, f: &str) {
    location(
        r,
        &constructor.location,
        constructor.digest.as_deref(),
        constructor.pull_secret.as_ref(),
        f,
    );
    limits(r, &constructor.limits, &format!("{f}.limits"));
    super::capabilities::check(r, &constructor.capabilities, &format!("{f}.capabilities"));
    only_packages_read_credentials(r, &constructor.capabilities, f);
}

/// The package (at `f`): where it comes from, its limits and capabilities, which reach
/// outside the cluster only.
pub(super) fn package(r: &mut Report<'_>, package: &PluginSpec, f: &str) {
    location(
        r,
        &package.location,
        package.digest.as_deref(),
        package.pull_secret.as_ref(),
        f,
    );
    // Callbacks own their timeouts: a package may wait on its backend for hours.
    limits_up_to(
        r,
        &package.limits,
        &format!("{f}.limits"),
        MAX_PACKAGE_CALL_TIME,
    );
    super::capabilities::check(r, &package.capabilities, &format!("{f}.capabilities"));
    if package.capabilities.cluster.is_some() {
        r.add(
            format!("{f}.capabilities.cluster"),
            "a package manages infrastructure outside Kubernetes and reads no cluster objects; grant http instead",
        );
    }
}

/// `credentials` are a package's: a hook or constructor reads what it needs through
/// `capabilities.cluster` and the reconcile block's `external` inputs.
fn only_packages_read_credentials(
    r: &mut Report<'_>,
    caps: &crate::capabilities::Capabilities,
    at: &str,
) {
    if !caps.credentials.is_empty() {
        r.add(
            format!("{at}.capabilities.credentials"),
            "only a package reads credentials; a hook or constructor gets Secret values through the reconcile block's external inputs",
        );
    }
}

/// `location`, `digest` and `pullSecret` of a plugin: a path, an `https://` URL pinned by
/// a digest, or an `oci://` reference (the only kind with a pull secret).
fn location(
    r: &mut Report<'_>,
    location: &str,
    digest: Option<&str>,
    pull_secret: Option<&PullSecretRef>,
    at: &str,
) {
    if location.trim().is_empty() {
        r.add(format!("{at}.location"), "must not be empty");
        return;
    }
    // Paths are only checked for shape here; the base directory does not matter.
    match Location::parse(location, digest, Path::new(".")) {
        Ok(parsed) => {
            if pull_secret.is_some() && !matches!(parsed, Location::Oci { .. }) {
                r.add(
                    format!("{at}.pullSecret"),
                    "only an oci:// location is pulled with a pull secret",
                );
            }
        }
        Err(e) => {
            let field = match &e {
                LocationError::MissingDigest { .. }
                | LocationError::DigestOnFile { .. }
                | LocationError::ConflictingDigest { .. } => "digest",
                LocationError::BadDigest { digest: bad } if Some(bad.as_str()) == digest => {
                    "digest"
                }
                _ => "location",
            };
            r.add(format!("{at}.{field}"), e.to_string());
        }
    }
    if let Some(secret) = pull_secret {
        r.check(
            names::is_dns_label(&secret.namespace),
            format!("{at}.pullSecret.namespace"),
            "must be a lowercase DNS label",
        );
        r.check(
            names::is_dns_subdomain(&secret.name),
            format!("{at}.pullSecret.name"),
            "must be a Secret name (a lowercase DNS subdomain)",
        );
    }
}

/// A hook's or constructor's `limits`: the deadline up to the longest call.
fn limits(r: &mut Report<'_>, limits: &PluginLimits, at: &str) {
    limits_up_to(r, limits, at, MAX_CALL_TIME);
}

/// The longest a package call may be given: a day.
const MAX_PACKAGE_CALL_TIME: Duration = Duration::from_secs(24 * 3600);

/// [`limits`], the deadline up to `max_deadline`.
fn limits_up_to(r: &mut Report<'_>, limits: &PluginLimits, at: &str, max_deadline: Duration) {
    if let Some(deadline) = limits.deadline {
        r.check(
            deadline <= max_deadline,
            format!("{at}.deadline"),
            format!(
                "must be at most {}",
                inrun_contract::duration::format(max_deadline)
            ),
        );
    }
    let sizes = [
        (
            "memory",
            limits.memory,
            Quantity::MI,
            Quantity::from_bytes(4 << 30),
        ),
        (
            "outputSize",
            limits.output_size,
            Quantity::KI,
            Quantity::from_bytes(64 << 20),
        ),
    ];
    for (name, value, min, max) in sizes {
        if let Some(value) = value {
            r.check(
                (min..=max).contains(&value),
                format!("{at}.{name}"),
                format!("must be between {min} and {max}"),
            );
        }
    }
    if let Some(resources) = limits.resources {
        r.check(
            (1..=10_000).contains(&resources),
            format!("{at}.resources"),
            "must be between 1 and 10000",
        );
    }
    if let Some(reuse) = limits.reuse {
        r.check(
            (2..=10_000).contains(&reuse.calls),
            format!("{at}.reuse.calls"),
            "must be between 2 and 10000 (leave `reuse` out for a fresh instance every call)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{AT, reconcile};

    #[test]
    fn hooks_need_default_true_a_location_and_a_function() {
        assert_eq!(
            reconcile(
                "{ default: false, remote: { endpoint: 'http://x' }, hooks: [ { location: '', function: ' ' } ] }"
            ),
            [
                format!(
                    "{AT}.hooks: hooks adjust what templates render, so they need default: true"
                ),
                format!("{AT}.hooks[0].location: must not be empty"),
                format!("{AT}.hooks[0].function: must not be empty"),
            ]
        );
    }

    #[test]
    fn plugin_locations_are_pinned_well_formed_and_pulled_with_secrets_only_from_oci() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            reconcile(&format!(
                "{{ hooks: [ \
                 {{ location: 'https://p.example.com/h.wasm', function: f }}, \
                 {{ location: 'http://p.example.com/h.wasm', digest: '{d}', function: f }}, \
                 {{ location: 'oci://127.0.0.1:5000/h:1', digest: 'sha256:XYZ', function: f }}, \
                 {{ location: 'oci://h:1', function: f }}, \
                 {{ location: ./h.wasm, pullSecret: {{ namespace: ns, name: creds }}, function: f }}, \
                 {{ location: 'oci://r.example.com/team/h:1', digest: '{d}', pullSecret: {{ namespace: Bad, name: creds }}, function: f }}, \
                 {{ location: 'https://p.example.com/h.wasm', digest: '{d}', function: f }} ] }}"
            )),
            [
                format!(
                    "{AT}.hooks[0].digest: https://p.example.com/h.wasm needs a digest (sha256:<64 hex digits>): an https:// location must be pinned"
                ),
                format!(
                    "{AT}.hooks[1].location: location \"http://p.example.com/h.wasm\" uses plain http://; use https:// with a digest, or an oci:// reference"
                ),
                format!(
                    "{AT}.hooks[2].digest: digest \"sha256:XYZ\" is not sha256: followed by 64 lowercase hex digits"
                ),
                format!(
                    "{AT}.hooks[3].location: location \"oci://h:1\" must be oci://registry/repository:tag"
                ),
                format!(
                    "{AT}.hooks[4].pullSecret: only an oci:// location is pulled with a pull secret"
                ),
                format!("{AT}.hooks[5].pullSecret.namespace: must be a lowercase DNS label"),
            ]
        );
    }

    #[test]
    fn plugin_limits_must_be_sane() {
        assert_eq!(
            reconcile(
                "{ default: false, constructor: { location: ./a.wasm, limits: { deadline: 10m, memory: 512Ki, outputSize: 1Gi, resources: 0, reuse: { calls: 1 } } } }"
            ),
            [
                format!("{AT}.constructor.limits.deadline: must be at most 5m"),
                format!("{AT}.constructor.limits.memory: must be between 1Mi and 4Gi"),
                format!("{AT}.constructor.limits.outputSize: must be between 1Ki and 64Mi"),
                format!("{AT}.constructor.limits.resources: must be between 1 and 10000"),
                format!(
                    "{AT}.constructor.limits.reuse.calls: must be between 2 and 10000 (leave `reuse` out for a fresh instance every call)"
                ),
            ]
        );
        // A package may wait on its backend for hours, not days.
        let hours = super::super::tests::with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: { default: false, package: { location: ./p.wasm, limits: { deadline: 2h } } } }",
        ]);
        assert!(crate::from_str(&hours, "web.yaml").is_ok(), "{hours}");
        assert_eq!(
            reconcile(
                "{ default: false, package: { location: ./p.wasm, limits: { deadline: 25h } } }"
            ),
            [format!("{AT}.package.limits.deadline: must be at most 24h")]
        );
    }

    #[test]
    fn credentials_are_a_packages_and_name_secrets_and_keys_well() {
        let mut got = reconcile(
            "{ default: false, package: { location: ./p.wasm, capabilities: { credentials: [ { secret: Bad_Name, keys: [] }, { secret: ok, keys: ['a/b'] }, { secret: ok, keys: [x] } ] } } }",
        );
        got.sort();
        let f = format!("{AT}.package.capabilities.credentials");
        let mut want = vec![
            format!(
                "{f}[0].secret: \"Bad_Name\" must be a Secret's name (a lowercase DNS subdomain)"
            ),
            format!("{f}[0].keys: list the keys the package may read"),
            format!(
                "{f}[1].keys[0]: \"a/b\" must be a Secret key (letters, digits, '-', '_' and '.')"
            ),
            format!("{f}[2].secret: Secret ok is already listed at credentials[1]"),
        ];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(
            reconcile(
                "{ default: false, constructor: { location: ./c.wasm, capabilities: { credentials: [ { secret: s, keys: [k] } ] } } }"
            ),
            [format!(
                "{AT}.constructor.capabilities.credentials: only a package reads credentials; a hook or constructor gets Secret values through the reconcile block's external inputs"
            )]
        );
    }
}
