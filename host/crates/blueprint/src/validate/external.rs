//! Rules on `reconcile.external` calls: one kind per call, and a default when one is promised.

use super::refs::secret_ref;
use super::{MAX_CALL_TIME, Report, names};
use crate::external::{ExternalCall, HttpCall, HttpMethod, OnError};
use crate::refs::SecretRef;

/// Whether a URL template's scheme, host and port are literal text: the first template
/// marker (`{{` or `{%`) comes after the `/`, `?` or `#` that ends the host.
pub(super) fn host_is_fixed(url: &str) -> bool {
    let marker = [url.find("{{"), url.find("{%")].into_iter().flatten().min();
    let Some(at) = marker else {
        return true;
    };
    let prefix = &url[..at];
    prefix.find("://").is_some_and(|s| {
        let authority = &prefix[s + 3..];
        !authority.is_empty()
            && authority.contains(['/', '?', '#'])
            && !authority.starts_with(['/', '?', '#'])
    })
}

/// Checks one `external` entry at `at` (uniqueness of names is the caller's).
pub(super) fn check(r: &mut Report<'_>, call: &ExternalCall, at: &str) {
    r.check(
        names::is_identifier(&call.name),
        format!("{at}.name"),
        format!(
            "{:?} must be an identifier (letters, digits, _) so templates can use .external.{}",
            call.name, call.name
        ),
    );
    if call.kinds_set() != 1 {
        r.add(
            at,
            "set exactly one of http, prometheus, postgres and redis",
        );
    }
    r.check(
        call.timeout <= MAX_CALL_TIME,
        format!("{at}.timeout"),
        "must be at most 5m",
    );
    match (call.on_error, &call.default) {
        (OnError::Default, None) => r.add(
            format!("{at}.default"),
            "onError: default needs a default value",
        ),
        (OnError::Fail, Some(_)) => r.add(
            format!("{at}.default"),
            "a default value is used only with onError: default",
        ),
        _ => {}
    }
    if let Some(http) = &call.http {
        self::http(r, http, &format!("{at}.http"));
    }
    if let Some(prom) = &call.prometheus {
        let f = format!("{at}.prometheus");
        r.check(
            !prom.url.trim().is_empty(),
            format!("{f}.url"),
            "must not be empty",
        );
        r.check(
            !prom.query.trim().is_empty(),
            format!("{f}.query"),
            "must not be empty",
        );
    }
    if let Some(pg) = &call.postgres {
        let f = format!("{at}.postgres");
        connection(r, pg.url.as_deref(), pg.secret_ref.as_ref(), &f);
        r.check(
            !pg.query.trim().is_empty(),
            format!("{f}.query"),
            "must not be empty",
        );
    }
    if let Some(redis) = &call.redis {
        let f = format!("{at}.redis");
        connection(r, redis.url.as_deref(), redis.secret_ref.as_ref(), &f);
        r.check(
            redis.command.first().is_some_and(|c| !c.trim().is_empty()),
            format!("{f}.command"),
            "must name a command, e.g. [GET, key]",
        );
    }
}

/// An HTTP call (at `f`): a URL, a body only with POST, no header the host sets, and a
/// token only to a fixed host.
fn http(r: &mut Report<'_>, http: &HttpCall, f: &str) {
    r.check(
        !http.url.trim().is_empty(),
        format!("{f}.url"),
        "must not be empty",
    );
    if http.method == HttpMethod::Get && http.body.is_some() {
        r.add(format!("{f}.body"), "a body needs method: POST");
    }
    for name in http.headers.keys().filter(|n| n.trim().is_empty()) {
        r.add(
            format!("{f}.headers"),
            format!("{name:?}: header names must not be empty"),
        );
    }
    for name in http.headers.keys().filter(|n| {
        ["host", "content-length", "transfer-encoding", "connection"]
            .contains(&n.trim().to_ascii_lowercase().as_str())
    }) {
        r.add(
            format!("{f}.headers.{name}"),
            "is set by the host from the URL and body: a Blueprint may not choose it (a Host header would reach another site behind the same address)",
        );
    }
    if let Some(secret) = &http.secret_ref {
        secret_ref(r, secret, &format!("{f}.secretRef"));
        r.check(
            host_is_fixed(&http.url),
            format!("{f}.url"),
            "a call that carries a secretRef token must name its scheme and host without templates (templates may fill in the path and query): otherwise whoever writes the CR decides where the token goes",
        );
        r.check(
            !http.url.contains("{%"),
            format!("{f}.url"),
            "a call that carries a secretRef token may use only {{ }} expressions in its URL: each is percent-encoded, so whoever writes the CR fills in a value but cannot change the path or query",
        );
    }
}

/// Exactly one of `url` and `secretRef` says where a database is.
fn connection(r: &mut Report<'_>, url: Option<&str>, secret: Option<&SecretRef>, at: &str) {
    match (url, secret) {
        (Some(url), None) => {
            r.check(
                !url.trim().is_empty(),
                format!("{at}.url"),
                "must not be empty",
            );
        }
        (None, Some(secret)) => secret_ref(r, secret, &format!("{at}.secretRef")),
        _ => r.add(at, "set exactly one of url and secretRef"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{AT, reconcile};
    use super::host_is_fixed;

    #[test]
    fn an_external_default_is_required_with_on_error_default() {
        assert_eq!(
            reconcile(
                "{ external: [ { name: price, http: { url: 'http://p' }, onError: default } ] }"
            ),
            [format!(
                "{AT}.external[0].default: onError: default needs a default value"
            )]
        );
    }

    #[test]
    fn external_calls_are_named_once_and_make_exactly_one_call() {
        assert_eq!(
            reconcile(
                "{ external: [ { name: price, http: { url: 'http://p', body: {} } }, { name: price, redis: { command: [] } }, { name: my-load, prometheus: { url: u, query: q }, postgres: { url: u, secretRef: { name: db, key: url }, query: q } } ] }"
            ),
            [
                format!("{AT}.external[0].http.body: a body needs method: POST"),
                format!("{AT}.external[1].name: \"price\" is already used by external[0]"),
                format!("{AT}.external[1].redis: set exactly one of url and secretRef"),
                format!("{AT}.external[1].redis.command: must name a command, e.g. [GET, key]"),
                format!(
                    "{AT}.external[2].name: \"my-load\" must be an identifier (letters, digits, _) so templates can use .external.my-load"
                ),
                format!(
                    "{AT}.external[2]: set exactly one of http, prometheus, postgres and redis"
                ),
                format!("{AT}.external[2].postgres: set exactly one of url and secretRef"),
            ]
        );
    }

    #[test]
    fn headers_the_host_sets_may_not_be_chosen() {
        let problems = reconcile(
            "{ external: [ { name: x, http: { url: 'http://p', headers: { Host: admin.internal, Content-Length: '0', X-Team: a } } } ] }",
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!(
                "{AT}.external[0].http.headers.Content-Length: is set by the host"
            )),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with(&format!(
                "{AT}.external[0].http.headers.Host: is set by the host"
            )),
            "{problems:?}"
        );
    }

    #[test]
    fn a_token_goes_only_to_a_host_the_blueprint_writes_out() {
        for fixed in [
            "https://api.example/v1/{{ .metadata.name }}",
            "https://api.example:8443/x?q={{ .spec.q }}",
            "http://p",
        ] {
            assert!(host_is_fixed(fixed), "{fixed}");
        }
        for templated in [
            "https://{{ .spec.host }}/v1",
            "https://api.example{{ .spec.suffix }}/v1",
            "https://api.example:{{ .spec.port }}/",
            "{{ .spec.url }}",
            "https://{% if x %}a{% endif %}.example/",
        ] {
            assert!(!host_is_fixed(templated), "{templated}");
        }
        assert_eq!(
            reconcile(
                "{ external: [ { name: price, http: { url: 'https://{{ .spec.host }}/p', secretRef: { name: t, key: token } } } ] }"
            ),
            [format!(
                "{AT}.external[0].http.url: a call that carries a secretRef token must name its scheme and host without templates (templates may fill in the path and query): otherwise whoever writes the CR decides where the token goes"
            )]
        );
        // Without a token, a templated host is the egress policy's to judge, not validation's.
        let unauthenticated = reconcile(
            "{ external: [ { name: price, http: { url: 'https://{{ .spec.host }}/p' } } ], managedResources: [ { apiVersion: v1, kind: x, namespaces: [''] } ] }",
        );
        assert!(
            unauthenticated
                .iter()
                .all(|l| !l.contains("external[0].http.url")),
            "{unauthenticated:?}"
        );
    }
}
