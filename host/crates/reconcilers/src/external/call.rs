//! Making one compiled call: its templates rendered against the CR, its target held to the
//! egress policy, its credentials read, then the client of its kind.

use serde_json::Value;

use super::compile::{Call, Compiled, Conn};
use super::render::{render, render_text};
use super::url::UrlTemplate;
use super::{CallError, ExternalCalls, http, postgres, redis};
use inrun_blueprint::{HttpMethod, SecretRef};
use inrun_template::{CompiledValue, Context};

impl ExternalCalls {
    /// Makes the call `c` against `ctx`; Secrets without a namespace are read in `ns`. With
    /// canned answers set, answers from them instead.
    pub(super) async fn call(
        &self,
        c: &Compiled,
        ctx: &Context,
        ns: &str,
    ) -> Result<Value, CallError> {
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
                let request = HttpParts {
                    url,
                    method: *method,
                    headers,
                    body: body.as_ref(),
                    secret: secret.as_ref(),
                };
                self.http(request, ctx, ns).await
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
            } => self.postgres(conn, query, params, ctx, ns).await,
            Call::Redis { conn, command } => self.redis(conn, command, ctx, ns).await,
        }
    }

    /// An `http` call: URL rendered and fenced, headers and body rendered, the bearer token
    /// read.
    async fn http(&self, c: HttpParts<'_>, ctx: &Context, ns: &str) -> Result<Value, CallError> {
        let url = c.url.render(ctx)?;
        self.fence(&url)?;
        let mut rendered = Vec::new();
        for (k, v) in c.headers {
            rendered.push((k.clone(), render_text(v, ctx, &format!("headers.{k}"))?));
        }
        let body = c.body.map(|b| render(b, ctx, "body")).transpose()?;
        let token = match c.secret {
            Some(s) => Some(self.secret(s, ns).await?),
            None => None,
        };
        let call = http::HttpRequest {
            url: &url,
            method: c.method,
            headers: &rendered,
            body: body.as_ref(),
            token: token.as_deref(),
        };
        http::fetch(&self.clients.http, call).await
    }

    /// A `postgres` query: the URL parsed once, by the client's parser; under an egress
    /// policy, one host, checked, resolved once and dialled at the checked address.
    async fn postgres(
        &self,
        conn: &Conn,
        query: &str,
        params: &[CompiledValue],
        ctx: &Context,
        ns: &str,
    ) -> Result<Value, CallError> {
        let url = self.conn(conn, ctx, ns).await?;
        let mut target = postgres::Target::parse(&url).map_err(|e| redacted(conn, ns, e))?;
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

    /// A `redis` command; under an egress policy, the host the client would dial, checked
    /// and resolved once.
    async fn redis(
        &self,
        conn: &Conn,
        command: &[CompiledValue],
        ctx: &Context,
        ns: &str,
    ) -> Result<Value, CallError> {
        let url = self.conn(conn, ctx, ns).await?;
        let address = match &self.clients.egress {
            Some(egress) => {
                let (host, port) = redis::target(&url).map_err(|e| redacted(conn, ns, e))?;
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

    /// The egress policy's verdict on an HTTP call's rendered URL (its client checks the
    /// addresses a name resolves to when it connects).
    pub(super) fn fence(&self, url: &str) -> Result<(), CallError> {
        match &self.clients.egress {
            Some(egress) => egress.check_url(url).map(drop).map_err(CallError::from),
            None => Ok(()),
        }
    }

    /// The value of the Secret key `s` (in `ns` when it names no namespace).
    async fn secret(&self, s: &SecretRef, ns: &str) -> Result<String, CallError> {
        crate::secrets::resolve(self.clients.secrets.as_ref(), s, ns)
            .await
            .map_err(CallError::Secret)
    }

    /// A database's connection URL, rendered or read from its Secret.
    async fn conn(&self, conn: &Conn, ctx: &Context, ns: &str) -> Result<String, CallError> {
        match conn {
            Conn::Url(t) => render_text(t, ctx, "url"),
            Conn::Secret(s) => self.secret(s, ns).await,
        }
    }
}

/// An `http` call's compiled parts.
struct HttpParts<'a> {
    url: &'a UrlTemplate,
    method: HttpMethod,
    headers: &'a [(String, CompiledValue)],
    body: Option<&'a CompiledValue>,
    secret: Option<&'a SecretRef>,
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
