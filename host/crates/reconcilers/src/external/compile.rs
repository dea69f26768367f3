//! `reconcile.external` calls compiled at assembly: each template once, each failure named
//! by its Blueprint field.

use std::time::Duration;

use serde_json::Value;

use super::url::{UrlPart, UrlTemplate, url_parts};
use super::{Clients, CompileError, ExternalCalls, TOLD_BURST, TOLD_PER_SECOND};
use inrun_blueprint::{
    ExternalCall, ExternalKind, HttpCall, HttpMethod, OnError, PostgresCall, PrometheusCall,
    RedisCall, SecretRef,
};
use inrun_template::{CompiledValue, Engine};

/// Where a database is: a URL template or a Secret key holding the URL.
pub(super) enum Conn {
    Url(CompiledValue),
    Secret(SecretRef),
}

/// One call's templates, compiled, by kind.
pub(super) enum Call {
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
    /// The kind's name, as the Blueprint writes it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Call::Http { .. } => "http",
            Call::Prometheus { .. } => "prometheus",
            Call::Postgres { .. } => "postgres",
            Call::Redis { .. } => "redis",
        }
    }
}

/// One call, compiled, with what to do when it fails.
pub(super) struct Compiled {
    pub(super) name: String,
    pub(super) timeout: Duration,
    pub(super) on_error: OnError,
    pub(super) default: Value,
    pub(super) call: Call,
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
        let mut compiler = Compiler {
            templates,
            errors: Vec::new(),
        };
        let mut compiled = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            let at = format!("{at}.external[{i}]");
            if let Some(call) = compiler.call(c, &at) {
                compiled.push(Compiled {
                    name: c.name.clone(),
                    timeout: c.timeout,
                    on_error: c.on_error,
                    default: c.default.clone().unwrap_or(Value::Null),
                    call,
                });
            }
        }
        if compiler.errors.is_empty() {
            Ok(ExternalCalls {
                calls: compiled,
                clients,
                told: std::sync::Mutex::new(inrun_wasm::TokenRate::new(
                    TOLD_PER_SECOND,
                    TOLD_BURST,
                )),
            })
        } else {
            Err(compiler.errors)
        }
    }
}

/// Compiles templates, collecting every failure rather than stopping at the first.
struct Compiler<'a> {
    templates: &'a Engine,
    errors: Vec<CompileError>,
}

impl Compiler<'_> {
    /// The template `v` (written at `field`) compiled, or `None` with the error kept.
    fn value(&mut self, field: String, v: Value) -> Option<CompiledValue> {
        self.templates
            .compile_value(&v)
            .map_err(|source| self.errors.push(CompileError { field, source }))
            .ok()
    }

    /// A text template (written at `field`) compiled.
    fn text(&mut self, field: String, s: &str) -> Option<CompiledValue> {
        self.value(field, Value::String(s.to_string()))
    }

    /// One call (written at `at`) compiled, or `None` when any of its templates failed.
    fn call(&mut self, c: &ExternalCall, at: &str) -> Option<Call> {
        match c.call() {
            Some(ExternalKind::Http(h)) => self.http(h, &format!("{at}.http")),
            Some(ExternalKind::Prometheus(p)) => self.prometheus(p, at),
            Some(ExternalKind::Postgres(p)) => self.postgres(p, at),
            Some(ExternalKind::Redis(r)) => self.redis(r, at),
            // Validation already refused a call with no kind or several.
            None => None,
        }
    }

    /// An `http` call (written at `f`).
    fn http(&mut self, h: &HttpCall, f: &str) -> Option<Call> {
        let url = self.url(h, f);
        let headers: Vec<_> = h
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), self.text(format!("{f}.headers.{k}"), v)?)))
            .collect();
        let body = match &h.body {
            Some(b) => Some(self.value(format!("{f}.body"), b.clone())?),
            None => None,
        };
        Some(Call::Http {
            url: url?,
            method: h.method,
            headers,
            body,
            secret: h.secret_ref.clone(),
        })
    }

    /// An `http` call's URL: for a token-bearing one, each `{{ }}` renders alone,
    /// percent-encoded; the whole is compiled first, so a marker left open is an error
    /// naming the field, not text sent as it is.
    fn url(&mut self, h: &HttpCall, f: &str) -> Option<UrlTemplate> {
        if h.secret_ref.is_none() {
            return self
                .text(format!("{f}.url"), &h.url)
                .map(UrlTemplate::Whole);
        }
        let mut parts = Vec::new();
        let mut ok = self.text(format!("{f}.url"), &h.url).is_some();
        for part in url_parts(&h.url) {
            match part {
                Ok(literal) => parts.push(UrlPart::Literal(literal.to_string())),
                Err(expr) => match self.text(format!("{f}.url"), expr) {
                    Some(v) => parts.push(UrlPart::Value(v)),
                    None => ok = false,
                },
            }
        }
        ok.then_some(UrlTemplate::Encoded(parts))
    }

    /// A `prometheus` call.
    fn prometheus(&mut self, p: &PrometheusCall, at: &str) -> Option<Call> {
        let url = self.text(format!("{at}.prometheus.url"), &p.url);
        let query = self.text(format!("{at}.prometheus.query"), &p.query);
        url.zip(query)
            .map(|(url, query)| Call::Prometheus { url, query })
    }

    /// A `postgres` call: its connection and each query parameter.
    fn postgres(&mut self, p: &PostgresCall, at: &str) -> Option<Call> {
        let conn = self.conn(&format!("{at}.postgres"), &p.url, &p.secret_ref);
        let params = self.texts(&format!("{at}.postgres.params"), &p.params);
        conn.zip(params).map(|(conn, params)| Call::Postgres {
            conn,
            query: p.query.clone(),
            params,
        })
    }

    /// A `redis` call: its connection and each word of the command.
    fn redis(&mut self, r: &RedisCall, at: &str) -> Option<Call> {
        let conn = self.conn(&format!("{at}.redis"), &r.url, &r.secret_ref);
        let command = self.texts(&format!("{at}.redis.command"), &r.command);
        conn.zip(command)
            .map(|(conn, command)| Call::Redis { conn, command })
    }

    /// Each text of a list (written at `at[j]`) compiled; `None` when any failed.
    fn texts(&mut self, at: &str, texts: &[String]) -> Option<Vec<CompiledValue>> {
        let compiled: Vec<_> = texts
            .iter()
            .enumerate()
            .filter_map(|(j, t)| self.text(format!("{at}[{j}]"), t))
            .collect();
        (compiled.len() == texts.len()).then_some(compiled)
    }

    /// A database's connection: the URL template, else the Secret that holds the URL.
    fn conn(&mut self, at: &str, url: &Option<String>, secret: &Option<SecretRef>) -> Option<Conn> {
        match (url, secret) {
            (Some(url), _) => self.text(format!("{at}.url"), url).map(Conn::Url),
            (None, Some(s)) => Some(Conn::Secret(s.clone())),
            (None, None) => None,
        }
    }
}
