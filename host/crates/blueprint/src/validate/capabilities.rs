//! Rules on a plugin's `capabilities`: kinds named properly, hosts without scheme or
//! path, limits in range.

use std::collections::HashMap;

use super::names;
use super::{Report, first_seen};
use crate::capabilities::{Capabilities, HttpCapability};
use crate::quantity::Quantity;

/// Checks `caps`, whose field path is `at` (e.g. `spec.crds[0].reconcile.constructor.capabilities`).
pub(super) fn check(r: &mut Report<'_>, caps: &Capabilities, at: &str) {
    cluster_reads(r, caps, at);
    if let Some(http) = &caps.http {
        self::http(r, http, &format!("{at}.http"));
    }
    credentials(r, caps, at);
}

/// `cluster.read`: each kind named properly, once, with namespaces only when it has them.
fn cluster_reads(r: &mut Report<'_>, caps: &Capabilities, at: &str) {
    let mut seen = HashMap::new();
    for (i, read) in caps.reads().iter().enumerate() {
        let f = format!("{at}.cluster.read[{i}]");
        r.check(
            names::is_api_version(&read.api_version),
            format!("{f}.apiVersion"),
            format!("{:?} must be v1 or group/version", read.api_version),
        );
        r.check(
            names::is_kind(&read.kind),
            format!("{f}.kind"),
            format!("{:?} must be an UpperCamelCase kind", read.kind),
        );
        let key = (read.api_version.as_str(), read.kind.as_str());
        if let Some(first) = first_seen(&mut seen, key, i) {
            r.add(
                &f,
                format!(
                    "{} {} is already listed at cluster.read[{first}]",
                    read.api_version, read.kind
                ),
            );
        }
        if read.cluster_scoped && !read.namespaces.is_empty() {
            r.add(
                format!("{f}.namespaces"),
                "a cluster-scoped kind has no namespaces",
            );
        }
        for (j, ns) in read.namespaces.iter().enumerate() {
            r.check(
                ns == "*" || names::is_dns_label(ns),
                format!("{f}.namespaces[{j}]"),
                format!("{ns:?} must be \"*\" or a lowercase DNS label"),
            );
        }
    }
}

/// `credentials`: each a Secret named once, with the keys the package may read.
fn credentials(r: &mut Report<'_>, caps: &Capabilities, at: &str) {
    let mut secrets = HashMap::new();
    for (i, c) in caps.credentials.iter().enumerate() {
        let f = format!("{at}.credentials[{i}]");
        r.check(
            names::is_dns_subdomain(&c.secret),
            format!("{f}.secret"),
            format!(
                "{:?} must be a Secret's name (a lowercase DNS subdomain)",
                c.secret
            ),
        );
        if let Some(first) = first_seen(&mut secrets, c.secret.as_str(), i) {
            r.add(
                format!("{f}.secret"),
                format!(
                    "Secret {} is already listed at credentials[{first}]",
                    c.secret
                ),
            );
        }
        r.check(
            !c.keys.is_empty(),
            format!("{f}.keys"),
            "list the keys the package may read",
        );
        for (j, key) in c.keys.iter().enumerate() {
            r.check(
                names::is_secret_key(key),
                format!("{f}.keys[{j}]"),
                format!("{key:?} must be a Secret key (letters, digits, '-', '_' and '.')"),
            );
        }
    }
}

fn http(r: &mut Report<'_>, http: &HttpCapability, at: &str) {
    r.check(
        !http.hosts.is_empty(),
        format!("{at}.hosts"),
        "list at least one host (or leave http out)",
    );
    for (i, host) in http.hosts.iter().enumerate() {
        if let Err(why) = host_entry(host) {
            r.add(format!("{at}.hosts[{i}]"), format!("{host:?} {why}"));
        }
    }
    if let Some(timeout) = http.timeout {
        r.check(
            !timeout.is_zero() && timeout <= HttpCapability::MAX_TIMEOUT,
            format!("{at}.timeout"),
            "must be more than 0s and at most 1m",
        );
    }
    if let Some(size) = http.max_response_size {
        let (min, max) = (Quantity::KI, HttpCapability::MAX_RESPONSE_SIZE);
        r.check(
            (min..=max).contains(&size),
            format!("{at}.maxResponseSize"),
            format!("must be between {min} and {max}"),
        );
    }
}

/// A `host` or `host:port` entry (IPv6 in brackets); the reason it is not one otherwise.
fn host_entry(entry: &str) -> Result<(), &'static str> {
    if entry.contains("://") {
        return Err("must be a host or host:port, without a scheme");
    }
    if entry.is_empty() || entry.contains(['/', '?', '#', '@', ' ', '\t']) {
        return Err("must be a host or host:port, without a path, query or user name");
    }
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, "")) => (ip, None),
            Some((ip, port)) => match port.strip_prefix(':') {
                Some(p) => (ip, Some(p)),
                None => return Err("must be [ipv6] or [ipv6]:port"),
            },
            None => return Err("must be [ipv6] or [ipv6]:port"),
        }
    } else {
        match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if host.is_empty() {
        return Err("must name a host");
    }
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err("has a port that is not a number from 1 to 65535");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{lines, with_crds};
    use super::host_entry;

    fn constructor(caps: &str) -> Vec<String> {
        lines(&with_crds(&[&format!(
            "{{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: {{ default: false, constructor: {{ location: ./a.wasm, capabilities: {caps} }} }} }}"
        )]))
    }

    const AT: &str = "web.yaml: crd WebApp: spec.crds[0].reconcile.constructor.capabilities";

    #[test]
    fn a_well_formed_grant_passes() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: { default: false, constructor: { location: ./a.wasm, capabilities: { cluster: { read: [ { apiVersion: v1, kind: ConfigMap, namespaces: [shared, '*'] }, { apiVersion: v1, kind: Namespace, clusterScoped: true } ] }, http: { hosts: ['127.0.0.1:8080', api.example.com, '[::1]:9000'], timeout: 1m, maxResponseSize: 16Mi } } } } }",
        ]);
        let parsed = crate::from_str(&text, "web.yaml");
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn read_kinds_need_an_api_version_and_a_kind_listed_once() {
        assert_eq!(
            constructor(
                "{ cluster: { read: [ { apiVersion: 'a/b/c', kind: configMap }, { apiVersion: v1, kind: Secret, namespaces: [Bad], clusterScoped: true }, { apiVersion: v1, kind: Secret } ] } }"
            ),
            [
                format!("{AT}.cluster.read[0].apiVersion: \"a/b/c\" must be v1 or group/version"),
                format!("{AT}.cluster.read[0].kind: \"configMap\" must be an UpperCamelCase kind"),
                format!("{AT}.cluster.read[1].namespaces: a cluster-scoped kind has no namespaces"),
                format!(
                    "{AT}.cluster.read[1].namespaces[0]: \"Bad\" must be \"*\" or a lowercase DNS label"
                ),
                format!("{AT}.cluster.read[2]: v1 Secret is already listed at cluster.read[1]"),
            ]
        );
    }

    #[test]
    fn hosts_carry_no_scheme_or_path_and_limits_stay_in_range() {
        assert_eq!(
            constructor(
                "{ http: { hosts: ['https://api.example.com', 'api.example.com/v1', 'h:99999'], timeout: 2m, maxResponseSize: 32Mi } }"
            ),
            [
                format!(
                    "{AT}.http.hosts[0]: \"https://api.example.com\" must be a host or host:port, without a scheme"
                ),
                format!(
                    "{AT}.http.hosts[1]: \"api.example.com/v1\" must be a host or host:port, without a path, query or user name"
                ),
                format!(
                    "{AT}.http.hosts[2]: \"h:99999\" has a port that is not a number from 1 to 65535"
                ),
                format!("{AT}.http.timeout: must be more than 0s and at most 1m"),
                format!("{AT}.http.maxResponseSize: must be between 1Ki and 16Mi"),
            ]
        );
        assert_eq!(
            constructor("{ http: { hosts: [] } }"),
            [format!(
                "{AT}.http.hosts: list at least one host (or leave http out)"
            )]
        );
    }

    #[test]
    fn host_entries_accept_names_addresses_and_ports() {
        for ok in [
            "a.example",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "LOCALHOST",
        ] {
            assert_eq!(host_entry(ok), Ok(()), "{ok}");
        }
        for bad in ["", ":80", "u@h", "h:0", "[::1", "[::1]x"] {
            assert!(host_entry(bad).is_err(), "{bad}");
        }
    }
}
