//! The host side of the `cluster` and `http` imports: each call is checked against the
//! plugin's grants, bounded by the call's remaining time, and answered with a value or an
//! error message the guest can act on. Nothing here traps the guest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::bindings::package::inrun::reconciler0_2_0::credentials;
use super::bindings::reconciler::inrun::reconciler::{cluster, http};
use super::grants::{self, HttpGrant, Scope};
use super::state::State;

/// Headers the host sets itself; a guest that sends them is refused.
const RESERVED_HEADERS: &[&str] = &["host", "content-length", "transfer-encoding", "connection"];

/// Time left before `deadline`, or an error naming what ran out.
fn remaining(deadline: Instant, what: &str) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(format!("{what}: the call's deadline has passed"));
    }
    Ok(left)
}

/// Fails when no tokio runtime drives this call: timers and sockets need one.
fn runtime(what: &str) -> Result<(), String> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| format!("{what} needs the host's async runtime, and this call has none"))
}

/// Why a host call failed, kept as data (the metrics count refusals apart): the grants
/// refused it, or it failed doing what they allow. The guest sees the message either way.
#[derive(Debug)]
enum Failure {
    /// The plugin's grants do not allow it.
    Refused(String),
    /// It was allowed and went wrong.
    Failed(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Failed(message)
    }
}

impl State {
    /// Reports how a host call ended and hands the guest its answer.
    fn answer<T>(&self, capability: &'static str, result: Result<T, Failure>) -> Result<T, String> {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(Failure::Refused(_)) => "refused",
            Err(Failure::Failed(_)) => "error",
        };
        self.observer.host_call(capability, outcome);
        result.map_err(|f| match f {
            Failure::Refused(m) | Failure::Failed(m) => m,
        })
    }
}

/// A read the grants allow: where it looks, who serves it, and how long it may take.
struct Read<'a> {
    scope: Scope<'a>,
    reader: Arc<dyn grants::ClusterReader>,
    left: Duration,
    what: String,
}

impl State {
    /// Checks a read against the grants and the call's deadline.
    fn prepare_read<'a>(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&'a str>,
        cr_namespace: Option<&'a str>,
        listing: bool,
    ) -> Result<Read<'a>, Failure> {
        let scope = self
            .grants
            .read_scope(
                &self.plugin.name,
                api_version,
                kind,
                namespace,
                cr_namespace,
                listing,
            )
            .map_err(Failure::Refused)?;
        let what = format!("reading {kind} ({api_version}) in {scope}");
        runtime(&what)?;
        let left = remaining(self.deadline, &what)?;
        let Some(grant) = self.grants.cluster.as_ref() else {
            return Err(format!("{what}: no cluster reader").into());
        };
        Ok(Read {
            scope,
            reader: grant.reader.clone(),
            left,
            what,
        })
    }
}

/// Runs a read within its time, naming it in any error.
async fn bounded<T>(
    read: &Read<'_>,
    run: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(read.left, run).await {
        Ok(result) => result.map_err(|e| Failure::Failed(format!("{}: {e}", read.what))),
        Err(_) => Err(Failure::Failed(format!(
            "{}: the call's deadline passed while waiting",
            read.what
        ))),
    }
}

// The futures below must not hold a borrow of the whole `State` across an await (it is
// `Send` but not `Sync`), so each read is prepared first and owns what it needs.
impl cluster::Host for State {
    async fn get(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, String> {
        let cr_namespace = self.cr_namespace.clone();
        let prepared = self.prepare_read(
            &api_version,
            &kind,
            namespace.as_deref(),
            cr_namespace.as_deref(),
            false,
        );
        let result = match prepared {
            Ok(read) => bounded(
                &read,
                read.reader.get(&api_version, &kind, read.scope, &name),
            )
            .await
            .map(|found| found.map(|v| v.to_string())),
            Err(e) => Err(e),
        };
        self.answer("cluster", result)
    }

    async fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, String> {
        let cr_namespace = self.cr_namespace.clone();
        let prepared = grants::parse_label_selector(label_selector.as_deref().unwrap_or(""))
            .map_err(Failure::from)
            .and_then(|labels| {
                self.prepare_read(
                    &api_version,
                    &kind,
                    namespace.as_deref(),
                    cr_namespace.as_deref(),
                    true,
                )
                .map(|read| (read, labels))
            });
        let result = match prepared {
            Ok((read, labels)) => bounded(
                &read,
                read.reader.list(&api_version, &kind, read.scope, &labels),
            )
            .await
            .map(|items| items.iter().map(ToString::to_string).collect()),
            Err(e) => Err(e),
        };
        self.answer("cluster", result)
    }
}

/// Longest credential value handed to a guest, in bytes.
const CREDENTIAL_MAX: usize = 64 * 1024;

impl credentials::Host for State {
    async fn get(&mut self, name: String, key: String) -> Result<String, String> {
        let prepared = match (&self.grants.credentials, self.cr_namespace.clone()) {
            (None, _) => Err(Failure::Refused(
                "credentials: this package is granted none (package.capabilities.credentials)"
                    .into(),
            )),
            (Some(grant), _) if !grant.allows(&name, &key) => Err(Failure::Refused(format!(
                "credentials: key {key:?} of Secret {name:?} is not granted (package.capabilities.credentials)"
            ))),
            (Some(_), None) => Err(Failure::Refused(
                "credentials: a cluster-scoped CR has no namespace to read Secrets in".into(),
            )),
            (Some(grant), Some(namespace)) => Ok((grant.reader.clone(), namespace)),
        };
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        let result = match prepared {
            Ok((reader, namespace)) => {
                let what = format!("credentials: key {key:?} of Secret {namespace}/{name}");
                match tokio::time::timeout(left, reader.key(&namespace, &name, &key)).await {
                    Err(_) => Err(Failure::Failed(format!(
                        "{what}: the call's deadline passed while waiting"
                    ))),
                    Ok(Err(e)) => Err(Failure::Failed(format!("credentials: {e}"))),
                    Ok(Ok(value)) if value.len() > CREDENTIAL_MAX => Err(Failure::Failed(format!(
                        "{what}: longer than {CREDENTIAL_MAX} bytes"
                    ))),
                    Ok(Ok(value)) => Ok(value),
                }
            }
            Err(e) => Err(e),
        };
        self.answer("credentials", result)
    }
}

impl http::Host for State {
    async fn fetch(&mut self, req: http::Request) -> Result<http::Response, String> {
        let plugin = self.plugin.clone();
        let grant = self.grants.http.clone();
        let result = fetch(&plugin.name, grant.as_ref(), req, self.deadline).await;
        self.answer("http", result)
    }
}

/// Sends one guest request, if the grant allows its URL, and reads the capped response.
async fn fetch(
    plugin: &str,
    grant: Option<&HttpGrant>,
    req: http::Request,
    deadline: Instant,
) -> Result<http::Response, Failure> {
    let url = grants::check_url(plugin, grant, &req.url).map_err(Failure::Refused)?;
    let Some(grant) = grant else {
        return Err(Failure::Refused(format!(
            "outbound HTTP is not granted to plugin {plugin}"
        )));
    };
    let method = reqwest::Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
        .ok()
        .filter(|m| *m != reqwest::Method::CONNECT && *m != reqwest::Method::TRACE)
        .ok_or_else(|| format!("HTTP method {:?} is not allowed", req.method))?;
    let headers = request_headers(&req.headers)?;
    let what = format!("{method} {}", redacted(&url));
    let cap = grant.max_response_bytes;
    if let Some(canned) = &grant.canned {
        let reply = canned
            .respond(method.as_str(), &req.url, url.as_str())
            .map_err(Failure::Failed)?;
        if reply.body.len() > cap {
            return Err(Failure::Failed(format!("{what}: {}", too_large(cap))));
        }
        return Ok(http::Response {
            status: reply.status,
            headers: reply.headers,
            body: reply.body,
        });
    }
    runtime(&what)?;
    let left = remaining(deadline, &what)?;
    let limit = grant.timeout.min(left);
    let mut builder = grant.client.request(method, url).headers(headers);
    if let Some(body) = req.body {
        builder = builder.body(body);
    }
    let failed = match tokio::time::timeout(limit, exchange(builder, cap)).await {
        Ok(Ok(response)) => return Ok(response),
        Ok(Err(e)) => format!("{what}: {e}"),
        Err(_) if limit < grant.timeout => {
            format!("{what}: the call's deadline passed before the response was complete")
        }
        Err(_) => format!(
            "{what}: no complete response within {}",
            inrun_contract::duration::format(grant.timeout)
        ),
    };
    Err(Failure::Failed(failed))
}

/// Sends the request and reads its response, refusing a body larger than `cap` bytes
/// before it is all read.
async fn exchange(builder: reqwest::RequestBuilder, cap: usize) -> Result<http::Response, String> {
    let mut response = builder.send().await.map_err(|e| describe(&e))?;
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
        if body.len() + chunk.len() > cap {
            return Err(too_large(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(http::Response {
        status,
        headers,
        body,
    })
}

fn too_large(cap: usize) -> String {
    format!("the response body is larger than the grant's maxResponseSize of {cap} bytes")
}

/// A reqwest error's causes, without the URL its own message repeats (the caller names it).
fn describe(err: &reqwest::Error) -> String {
    let causes = std::error::Error::source(err).map(inrun_contract::errors::chain);
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else if err.is_body() || err.is_decode() {
        "reading the response"
    } else {
        "sending the request"
    };
    match causes {
        Some(c) => format!("{what}: {c}"),
        None => what.to_string(),
    }
}

/// The URL without its query, which may carry tokens.
fn redacted(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn request_headers(pairs: &[(String, String)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "header {name:?} is set by the host and may not be sent by a plugin"
            ));
        }
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header {name:?} is not valid"))?;
        map.append(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        let err = request_headers(&[("Host".into(), "internal".into())]).unwrap_err();
        assert!(err.contains("set by the host"), "{err}");
        assert!(request_headers(&[("bad name".into(), "x".into())]).is_err());
        assert!(request_headers(&[("x-a".into(), "line\nbreak".into())]).is_err());
        let ok = request_headers(&[("Accept".into(), "text/plain".into())]).unwrap();
        assert_eq!(ok["accept"], "text/plain");
    }

    #[test]
    fn a_url_is_shown_without_its_query() {
        let url = reqwest::Url::parse("http://h:1/p?token=secret#f").unwrap();
        assert_eq!(redacted(&url), "http://h:1/p");
    }
}
