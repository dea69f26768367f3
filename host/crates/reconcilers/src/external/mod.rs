//! `reconcile.external`: named calls (HTTP, Prometheus, PostgreSQL, Redis) made in the
//! prepare step, before the reconciler; their results are `.external.<name>` in args,
//! templates and `emit.status`.
//!
//! Templates are compiled once at assembly; each call runs with its own timeout, in
//! Blueprint order (a call sees the results of the calls before it). A failed call either
//! fails the reconcile, naming the call, or yields its declared `default`.

mod http;
mod postgres;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::secrets::{SecretError, Secrets};
use inrun_blueprint::{ExternalCall, ExternalKind, HttpMethod, OnError, SecretRef};
use inrun_template::{CompiledValue, Context, Engine, TemplateError};

/// A call that failed, by name: the reconcile fails with this.
#[derive(Debug, thiserror::Error)]
#[error("external call {name:?} ({kind}) failed")]
pub struct ExternalError {
    /// The call's `name`.
    pub name: String,
    /// `http`, `prometheus`, `postgres` or `redis`.
    pub kind: &'static str,
    /// Why.
    #[source]
    pub source: CallError,
}

/// Why one call failed. Messages never hold secret values.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call would go where the operator's egress policy does not allow.
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressError),
    /// A template of the call failed to render.
    #[error("rendering {what}")]
    Template {
        /// Which field.
        what: String,
        /// Why.
        #[source]
        source: TemplateError,
    },
    /// A templated part of a token-bearing URL is one the token may not go to.
    #[error("rendering url: {0}")]
    BadUrlPart(String),
    /// A credential could not be read.
    #[error("reading credentials")]
    Secret(#[source] SecretError),
    /// The connection URL read from a Secret may not be reached; the message names the
    /// Secret and key, never the URL (which may hold a password).
    #[error("the URL in Secret {secret} key {key:?} {reason}")]
    SecretTarget {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: String,
        /// What the egress policy refused, without the URL.
        reason: &'static str,
    },
    /// The bearer token holds characters an HTTP header cannot carry.
    #[error("the token is not a valid HTTP header value")]
    BadToken,
    /// The call took longer than its `timeout`.
    #[error("no answer within {}", inrun_contract::duration::format(*.0))]
    Timeout(Duration),
    /// The HTTP request failed (connection, TLS, ...).
    #[error("HTTP request failed")]
    Http(#[source] reqwest::Error),
    /// The reply is larger than the host reads.
    #[error("the reply is larger than {0} bytes")]
    TooLarge(usize),
    /// A query returned more rows than the host reads.
    #[error("the query returned more than {0} rows")]
    TooManyRows(usize),
    /// The server answered with a status other than 2xx.
    #[error("HTTP {status}: {excerpt}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        excerpt: String,
    },
    /// The reply is not JSON.
    #[error("the reply is not JSON: {excerpt}")]
    NotJson {
        /// The start of the body.
        excerpt: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// Prometheus answered with an error or an unexpected shape.
    #[error("prometheus: {0}")]
    Prometheus(String),
    /// Connecting to or querying PostgreSQL failed.
    #[error("postgres")]
    Postgres(#[source] tokio_postgres::Error),
    /// A query parameter cannot be sent as the type the query expects.
    #[error("parameter ${index}: {message}")]
    Param {
        /// 1-based placeholder number.
        index: usize,
        /// Why.
        message: String,
    },
    /// A result column has a type the host does not convert.
    #[error("column {column:?} has type {type_}; cast it in the query (e.g. {column}::text)")]
    Column {
        /// Column name.
        column: String,
        /// Its PostgreSQL type.
        type_: String,
    },
    /// Connecting to or querying Redis failed.
    #[error("redis")]
    Redis(#[source] ::redis::RedisError),
    /// The Redis command may write; only read commands are allowed.
    #[error("redis command {0:?} is not a read command")]
    NotReadOnly(String),
    /// The canned answers (`inrun render --external-fixture`) make this call fail.
    #[error("{0}")]
    Canned(String),
    /// Canned answers are given, but none for this call: it fails whatever its `onError`
    /// says, since nothing is called instead.
    #[error("{source_name} has no result for this call; add an entry named after it")]
    NotCanned {
        /// Where the canned answers come from (a file name).
        source_name: String,
    },
}

/// Answers `reconcile.external` calls by name instead of reaching anything, for testing
/// Blueprints offline (`inrun render --external-fixture`, `inrun test`). The call's
/// templates are still rendered, so their errors show.
pub trait CannedExternal: Send + Sync {
    /// The canned result of the call named `name`: `None` when there is none, `Some(Err)`
    /// for a canned failure (which `onError: default` turns into the call's default).
    fn answer(&self, name: &str) -> Option<Result<Value, String>>;
    /// Where the answers come from, for error messages (e.g. a file name).
    fn source_name(&self) -> String;
}

/// The shared pieces calls need: the HTTP client and where credentials come from.
#[derive(Clone)]
pub struct Clients {
    /// HTTP client for `http` and `prometheus` calls.
    pub http: reqwest::Client,
    /// Secret values.
    pub secrets: Arc<dyn Secrets>,
    /// Where calls may go, for a Blueprint resource; `None`: anywhere.
    pub egress: Option<crate::egress::Egress>,
    /// Canned results: when set, no call reaches anything and each is answered from here.
    pub canned: Option<Arc<dyn CannedExternal>>,
}

/// Where a database is: a URL template or a Secret key holding the URL.
enum Conn {
    Url(CompiledValue),
    Secret(SecretRef),
}

enum Call {
    Http {
        url: UrlTemplate,
        method: HttpMethod,
        headers: Vec<(String, CompiledValue)>,
        body: Option<CompiledValue>,
        secret: Option<SecretRef>,
    },
    Prometheus {
        url: CompiledValue,
        query: CompiledValue,
    },
    Postgres {
        conn: Conn,
        query: String,
        params: Vec<CompiledValue>,
    },
    Redis {
        conn: Conn,
        command: Vec<CompiledValue>,
    },
}

impl Call {
    fn kind(&self) -> &'static str {
        match self {
            Call::Http { .. } => "http",
            Call::Prometheus { .. } => "prometheus",
            Call::Postgres { .. } => "postgres",
            Call::Redis { .. } => "redis",
        }
    }
}

struct Compiled {
    name: String,
    timeout: Duration,
    on_error: OnError,
    default: Value,
    call: Call,
}

/// One reconcile block's external calls, compiled.
pub struct ExternalCalls {
    calls: Vec<Compiled>,
    clients: Clients,
    /// Info lines about failures answered with a default: a few a second at most, the
    /// rest at debug (a CR requeued every 100 ms would otherwise log at every pass).
    told: std::sync::Mutex<inrun_wasm::TokenBucket>,
}

/// Info lines a second about external calls answered with their default, per block.
const TOLD_PER_SECOND: u32 = 1;
const TOLD_BURST: u32 = 10;

/// A template of an external call that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("{field}")]
pub struct CompileError {
    /// The Blueprint field, e.g. `spec.crds[0].reconcile.external[1].http.url`.
    pub field: String,
    /// Why.
    #[source]
    pub source: TemplateError,
}

impl ExternalCalls {
    /// Compiles `calls` (declared at `at`, e.g. `spec.crds[0].reconcile`).
    ///
    /// # Errors
    /// Every template that does not compile, each naming its field.
    pub fn compile(
        templates: &Engine,
        calls: &[ExternalCall],
        at: &str,
        clients: Clients,
    ) -> Result<Self, Vec<CompileError>> {
        let mut errors = Vec::new();
        let mut compiled = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            let at = format!("{at}.external[{i}]");
            let mut value = |field: String, v: Value| -> Option<CompiledValue> {
                templates
                    .compile_value(&v)
                    .map_err(|source| errors.push(CompileError { field, source }))
                    .ok()
            };
            let text = |s: &str| Value::String(s.to_string());
            let call = match c.call() {
                Some(ExternalKind::Http(h)) => {
                    let f = format!("{at}.http");
                    let url = if h.secret_ref.is_some() {
                        // Each `{{ }}` of a token-bearing URL renders alone, percent-encoded;
                        // the whole is compiled first, so a marker left open is an error
                        // naming the field, not text sent as it is.
                        let mut parts = Vec::new();
                        let mut ok = value(format!("{f}.url"), text(&h.url)).is_some();
                        for part in url_parts(&h.url) {
                            match part {
                                Ok(literal) => parts.push(UrlPart::Literal(literal.to_string())),
                                Err(expr) => match value(format!("{f}.url"), text(expr)) {
                                    Some(v) => parts.push(UrlPart::Value(v)),
                                    None => ok = false,
                                },
                            }
                        }
                        ok.then_some(UrlTemplate::Encoded(parts))
                    } else {
                        value(format!("{f}.url"), text(&h.url)).map(UrlTemplate::Whole)
                    };
                    let headers: Vec<_> = h
                        .headers
                        .iter()
                        .filter_map(|(k, v)| {
                            Some((k.clone(), value(format!("{f}.headers.{k}"), text(v))?))
                        })
                        .collect();
                    let body = h
                        .body
                        .as_ref()
                        .map(|b| value(format!("{f}.body"), b.clone()));
                    match (url, body) {
                        (Some(url), Some(Some(body))) => Some(Call::Http {
                            url,
                            method: h.method,
                            headers,
                            body: Some(body),
                            secret: h.secret_ref.clone(),
                        }),
                        (Some(url), None) => Some(Call::Http {
                            url,
                            method: h.method,
                            headers,
                            body: None,
                            secret: h.secret_ref.clone(),
                        }),
                        _ => None,
                    }
                }
                Some(ExternalKind::Prometheus(p)) => {
                    let url = value(format!("{at}.prometheus.url"), text(&p.url));
                    let query = value(format!("{at}.prometheus.query"), text(&p.query));
                    url.zip(query)
                        .map(|(url, query)| Call::Prometheus { url, query })
                }
                Some(ExternalKind::Postgres(p)) => {
                    let conn = conn(&mut value, &format!("{at}.postgres"), &p.url, &p.secret_ref);
                    let params: Vec<_> = p
                        .params
                        .iter()
                        .enumerate()
                        .filter_map(|(j, t)| value(format!("{at}.postgres.params[{j}]"), text(t)))
                        .collect();
                    let complete = params.len() == p.params.len();
                    conn.filter(|_| complete).map(|conn| Call::Postgres {
                        conn,
                        query: p.query.clone(),
                        params,
                    })
                }
                Some(ExternalKind::Redis(r)) => {
                    let conn = conn(&mut value, &format!("{at}.redis"), &r.url, &r.secret_ref);
                    let command: Vec<_> = r
                        .command
                        .iter()
                        .enumerate()
                        .filter_map(|(j, t)| value(format!("{at}.redis.command[{j}]"), text(t)))
                        .collect();
                    let complete = command.len() == r.command.len();
                    conn.filter(|_| complete)
                        .map(|conn| Call::Redis { conn, command })
                }
                // Validation already refused a call with no kind or several.
                None => None,
            };
            if let Some(call) = call {
                compiled.push(Compiled {
                    name: c.name.clone(),
                    timeout: c.timeout,
                    on_error: c.on_error,
                    default: c.default.clone().unwrap_or(Value::Null),
                    call,
                });
            }
        }
        if errors.is_empty() {
            Ok(ExternalCalls {
                calls: compiled,
                clients,
                told: std::sync::Mutex::new(inrun_wasm::TokenBucket::new(
                    TOLD_PER_SECOND,
                    TOLD_BURST,
                )),
            })
        } else {
            Err(errors)
        }
    }

    /// Whether there are no calls.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Runs every call in order against `base` (the CR's context); returns the results by
    /// name. Secret references without a namespace use `cr_namespace`.
    ///
    /// # Errors
    /// [`ExternalError`] for the first call that failed with `onError: fail`.
    pub async fn run(&self, base: &Context, cr_namespace: &str) -> Result<Value, ExternalError> {
        let mut results = Map::new();
        for c in &self.calls {
            let ctx = base.clone().with_external(Value::Object(results.clone()));
            let outcome =
                match tokio::time::timeout(c.timeout, self.call(c, &ctx, cr_namespace)).await {
                    Ok(r) => r,
                    Err(_) => Err(CallError::Timeout(c.timeout)),
                };
            let value = match outcome {
                Ok(v) => v,
                Err(source) => {
                    let fatal = matches!(source, CallError::NotCanned { .. });
                    let error = ExternalError {
                        name: c.name.clone(),
                        kind: c.call.kind(),
                        source,
                    };
                    match c.on_error {
                        _ if fatal => return Err(error),
                        OnError::Fail => return Err(error),
                        OnError::Default => {
                            let error = inrun_contract::errors::chain(&error);
                            let tell = self
                                .told
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .take(std::time::Instant::now())
                                .is_ok();
                            if tell {
                                tracing::info!(external.name = %c.name, %error,
                                    "external call failed; using its default");
                            } else {
                                tracing::debug!(external.name = %c.name, %error,
                                    "external call failed; using its default");
                            }
                            c.default.clone()
                        }
                    }
                }
            };
            results.insert(c.name.clone(), value);
        }
        Ok(Value::Object(results))
    }

    async fn call(&self, c: &Compiled, ctx: &Context, ns: &str) -> Result<Value, CallError> {
        if let Some(canned) = &self.clients.canned {
            return self.canned(canned.as_ref(), c, ctx);
        }
        match &c.call {
            Call::Http {
                url,
                method,
                headers,
                body,
                secret,
            } => {
                let url = url.render(ctx)?;
                self.fence(&url)?;
                let mut rendered = Vec::new();
                for (k, v) in headers {
                    rendered.push((k.clone(), render_text(v, ctx, &format!("headers.{k}"))?));
                }
                let body = body.as_ref().map(|b| render(b, ctx, "body")).transpose()?;
                let token = match secret {
                    Some(s) => Some(self.secret(s, ns).await?),
                    None => None,
                };
                let call = http::HttpRequest {
                    url: &url,
                    method: *method,
                    headers: &rendered,
                    body: body.as_ref(),
                    token: token.as_deref(),
                };
                http::fetch(&self.clients.http, call).await
            }
            Call::Prometheus { url, query } => {
                let url = render_text(url, ctx, "url")?;
                self.fence(&url)?;
                let query = render_text(query, ctx, "query")?;
                http::prometheus(&self.clients.http, &url, &query).await
            }
            Call::Postgres {
                conn,
                query,
                params,
            } => {
                let url = self.conn(conn, ctx, ns).await?;
                // Parsed once, by the client's parser; under an egress policy, one host,
                // checked, resolved once and dialled at the checked address.
                let mut target =
                    postgres::Target::parse(&url).map_err(|e| redacted(conn, ns, e))?;
                if let Some(egress) = &self.clients.egress {
                    let (host, port) = target.single(&url).map_err(|e| redacted(conn, ns, e))?;
                    let address = egress
                        .pin(&host, port)
                        .await
                        .map_err(|e| redacted(conn, ns, e.into()))?;
                    target = target.pinned(address);
                }
                let mut values = Vec::new();
                for (i, p) in params.iter().enumerate() {
                    values.push(render(p, ctx, &format!("params[{i}]"))?);
                }
                postgres::query(&target, query, &values).await
            }
            Call::Redis { conn, command } => {
                let url = self.conn(conn, ctx, ns).await?;
                // The host the client would dial, checked and resolved once.
                let address = match &self.clients.egress {
                    Some(egress) => {
                        let (host, port) =
                            redis::target(&url).map_err(|e| redacted(conn, ns, e))?;
                        Some(
                            egress
                                .pin(&host, port)
                                .await
                                .map_err(|e| redacted(conn, ns, e.into()))?,
                        )
                    }
                    None => None,
                };
                let mut args = Vec::new();
                for (i, a) in command.iter().enumerate() {
                    args.push(render_text(a, ctx, &format!("command[{i}]"))?);
                }
                redis::command(&url, address, &args).await
            }
        }
    }

    /// A call answered from `canned`: its templates rendered and its URL fenced as for a
    /// real call, then the canned result; no credentials are read and nothing is reached.
    fn canned(
        &self,
        canned: &dyn CannedExternal,
        c: &Compiled,
        ctx: &Context,
    ) -> Result<Value, CallError> {
        match &c.call {
            Call::Http {
                url, headers, body, ..
            } => {
                self.fence(&url.render(ctx)?)?;
                for (k, v) in headers {
                    render_text(v, ctx, &format!("headers.{k}"))?;
                }
                if let Some(b) = body {
                    render(b, ctx, "body")?;
                }
            }
            Call::Prometheus { url, query } => {
                self.fence(&render_text(url, ctx, "url")?)?;
                render_text(query, ctx, "query")?;
            }
            Call::Postgres { conn, params, .. } => {
                if let Conn::Url(t) = conn {
                    render_text(t, ctx, "url")?;
                }
                for (i, p) in params.iter().enumerate() {
                    render(p, ctx, &format!("params[{i}]"))?;
                }
            }
            Call::Redis { conn, command } => {
                if let Conn::Url(t) = conn {
                    render_text(t, ctx, "url")?;
                }
                for (i, a) in command.iter().enumerate() {
                    render_text(a, ctx, &format!("command[{i}]"))?;
                }
            }
        }
        match canned.answer(&c.name) {
            Some(answer) => answer.map_err(CallError::Canned),
            None => Err(CallError::NotCanned {
                source_name: canned.source_name(),
            }),
        }
    }

    /// The egress policy's verdict on an HTTP call's rendered URL (its client checks the
    /// addresses a name resolves to when it connects).
    fn fence(&self, url: &str) -> Result<(), CallError> {
        match &self.clients.egress {
            Some(egress) => egress.check_url(url).map(drop).map_err(CallError::from),
            None => Ok(()),
        }
    }

    async fn secret(&self, s: &SecretRef, ns: &str) -> Result<String, CallError> {
        crate::secrets::resolve(self.clients.secrets.as_ref(), s, ns)
            .await
            .map_err(CallError::Secret)
    }

    async fn conn(&self, conn: &Conn, ctx: &Context, ns: &str) -> Result<String, CallError> {
        match conn {
            Conn::Url(t) => render_text(t, ctx, "url"),
            Conn::Secret(s) => self.secret(s, ns).await,
        }
    }
}

/// An egress refusal of a connection URL: told without the URL when it was read from a
/// Secret (it may carry a password), naming the Secret and key instead.
fn redacted(conn: &Conn, ns: &str, error: CallError) -> CallError {
    match (conn, error) {
        (Conn::Secret(s), CallError::Egress(e)) => CallError::SecretTarget {
            secret: format!("{}/{}", s.namespace.as_deref().unwrap_or(ns), s.name),
            key: s.key.clone(),
            reason: e.redacted(),
        },
        (_, error) => error,
    }
}

fn conn(
    value: &mut impl FnMut(String, Value) -> Option<CompiledValue>,
    at: &str,
    url: &Option<String>,
    secret: &Option<SecretRef>,
) -> Option<Conn> {
    match (url, secret) {
        (Some(url), _) => value(format!("{at}.url"), Value::String(url.clone())).map(Conn::Url),
        (None, Some(s)) => Some(Conn::Secret(s.clone())),
        (None, None) => None,
    }
}

fn render(t: &CompiledValue, ctx: &Context, what: &str) -> Result<Value, CallError> {
    t.render(ctx).map_err(|source| CallError::Template {
        what: what.to_string(),
        source,
    })
}

/// An `http` call's URL template.
enum UrlTemplate {
    /// Rendered as one text.
    Whole(CompiledValue),
    /// A token-bearing URL: literal text and `{{ }}` expressions, each rendered alone and
    /// percent-encoded, so that whoever writes the CR fills in a path segment or a query
    /// value but cannot add `/`, `?`, `#` or `&`, nor make a segment `..`: the token goes
    /// only where the Blueprint's author wrote.
    Encoded(Vec<UrlPart>),
}

enum UrlPart {
    Literal(String),
    Value(CompiledValue),
}

impl UrlTemplate {
    fn render(&self, ctx: &Context) -> Result<String, CallError> {
        match self {
            UrlTemplate::Whole(t) => render_text(t, ctx, "url"),
            UrlTemplate::Encoded(parts) => {
                let mut url = String::new();
                for part in parts {
                    match part {
                        UrlPart::Literal(text) => url.push_str(text),
                        UrlPart::Value(t) => {
                            let value = render_text(t, ctx, "url")?;
                            url.push_str(
                                &url_encoded(&value)
                                    .map_err(|why| CallError::BadUrlPart(why.to_string()))?,
                            );
                        }
                    }
                }
                Ok(url)
            }
        }
    }
}

/// `text` split into literal parts (`Ok`) and `{{ … }}` expressions (`Err`, markers
/// included, so each compiles as a template of its own).
fn url_parts(text: &str) -> Vec<Result<&str, &str>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        if start > 0 {
            parts.push(Ok(&rest[..start]));
        }
        parts.push(Err(&rest[start..start + len + 2]));
        rest = &rest[start + len + 2..];
    }
    if !rest.is_empty() {
        parts.push(Ok(rest));
    }
    parts
}

/// `value` percent-encoded but for RFC 3986's unreserved characters; refused when it is a
/// dot segment (`.`, `..`), which URL parsers resolve whatever its encoding.
fn url_encoded(value: &str) -> Result<String, &'static str> {
    if value == "." || value == ".." {
        return Err("a templated part of a URL that carries a token may not be `.` or `..`");
    }
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(out)
}

fn render_text(t: &CompiledValue, ctx: &Context, what: &str) -> Result<String, CallError> {
    Ok(match render(t, ctx, what)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// A float as a JSON number, or `null` when it is not finite.
fn number(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod url_templates {
    use super::*;

    #[test]
    fn a_token_bearing_urls_templated_parts_are_encoded_and_dot_segments_refused() {
        assert_eq!(
            url_parts("https://api.example/v1/teams/{{ .spec.team }}/x?q={{ .spec.q }}"),
            vec![
                Ok("https://api.example/v1/teams/"),
                Err("{{ .spec.team }}"),
                Ok("/x?q="),
                Err("{{ .spec.q }}"),
            ]
        );
        assert_eq!(
            url_encoded("../../admin/users?x=1#f&y").unwrap(),
            "..%2F..%2Fadmin%2Fusers%3Fx%3D1%23f%26y"
        );
        assert_eq!(url_encoded("team-a_1.x~").unwrap(), "team-a_1.x~");
        assert!(url_encoded("..").is_err());
        assert!(url_encoded(".").is_err());
        // Encoded, the parsed URL keeps the path the Blueprint wrote.
        let url = format!(
            "https://api.example/v1/teams/{}",
            url_encoded("../admin").unwrap()
        );
        let parsed = reqwest::Url::parse(&url).unwrap();
        assert_eq!(parsed.path(), "/v1/teams/..%2Fadmin");
    }
}

#[cfg(test)]
mod redaction {
    use super::*;
    use crate::egress::EgressError;

    #[test]
    fn a_refused_url_from_a_secret_names_the_secret_never_the_url() {
        let conn = Conn::Secret(SecretRef {
            name: "db".into(),
            key: "dsn".into(),
            namespace: None,
        });
        for refused in [
            EgressError::BadUrl("postgres://app:hunter2@db.internal:5432/x".into()),
            EgressError::NotListed {
                host: "db.internal".into(),
                port: 5432,
            },
            EgressError::Resolve {
                host: "db.internal".into(),
                reason: "no such host".into(),
            },
        ] {
            let told = inrun_contract::errors::chain(&redacted(
                &conn,
                "team-a",
                CallError::Egress(refused),
            ));
            assert!(
                told.starts_with("the URL in Secret team-a/db key \"dsn\" "),
                "{told}"
            );
            assert!(
                !told.contains("hunter2") && !told.contains("db.internal"),
                "{told}"
            );
        }
    }
}
