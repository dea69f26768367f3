//! The remote reconciler: the Request POSTed as JSON to an HTTP endpoint, the Result read
//! back. One call per reconcile; the bearer token comes from a Secret and is never logged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{ReconcileError, Reconciler, ReconcilerKind, finish};
use crate::http::{EXCERPT_MAX, excerpt, truncate};
use crate::replies::{self, ReplyError};
use crate::secrets::{SecretError, Secrets};
use inrun_blueprint::{RemoteSpec, SecretRef};
use inrun_contract::{Outcome, Request};

pub use crate::remote_error::{REPLY_MAX, RemoteError};

/// A reconciler behind an HTTP endpoint.
pub struct Remote {
    endpoint: String,
    auth: Option<SecretRef>,
    timeout: Duration,
    client: reqwest::Client,
    secrets: Arc<dyn Secrets>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("endpoint", &self.endpoint)
            .field("auth", &self.auth)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A remote reconciler for `spec`, reading its token from `secrets`.
    pub fn new(spec: &RemoteSpec, client: reqwest::Client, secrets: Arc<dyn Secrets>) -> Self {
        Remote {
            endpoint: spec.endpoint.clone(),
            auth: spec.auth.as_ref().map(|a| a.secret_ref.clone()),
            timeout: spec.timeout,
            client,
            secrets,
        }
    }

    /// The endpoint the Request is POSTed to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Makes the call and reads the Result.
    ///
    /// # Errors
    /// [`RemoteError`] for every way the call can fail.
    pub async fn call(&self, req: &Request) -> Result<Outcome, RemoteError> {
        let mut call = self
            .client
            .post(&self.endpoint)
            .timeout(self.timeout)
            .json(req);
        if let Some(secret) = &self.auth {
            let namespace = req.key.split_once('/').map_or("", |(ns, _)| ns);
            let token = crate::secrets::resolve(self.secrets.as_ref(), secret, namespace)
                .await
                .map_err(RemoteError::Token)?;
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| {
                    RemoteError::Token(SecretError::NotText {
                        namespace: secret.namespace.as_deref().unwrap_or(namespace).into(),
                        name: secret.name.clone(),
                        key: secret.key.clone(),
                    })
                })?;
            value.set_sensitive(true);
            call = call.header(reqwest::header::AUTHORIZATION, value);
        }
        let deadline = std::time::Instant::now() + self.timeout;
        let response = call.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let (body, held) =
            replies::read(response, REPLY_MAX, deadline)
                .await
                .map_err(|e| match e {
                    ReplyError::TooLarge(_) => RemoteError::TooLarge {
                        endpoint: self.endpoint.clone(),
                    },
                    ReplyError::Budget(source) => self.budget(source),
                    ReplyError::Transport(e) => self.transport(e),
                })?;
        if !status.is_success() {
            return Err(RemoteError::Status {
                endpoint: self.endpoint.clone(),
                status: status.as_u16(),
                excerpt: excerpt(&body),
            });
        }
        replies::keep_parsed(held, &body).map_err(|source| self.budget(source))?;
        let reply: Value =
            serde_json::from_slice(&body).map_err(|source| RemoteError::NotJson {
                endpoint: self.endpoint.clone(),
                excerpt: excerpt(&body),
                source,
            })?;
        drop(body);
        self.outcome(reply)
    }

    fn budget(&self, source: inrun_wasm::HeldHit) -> RemoteError {
        RemoteError::Budget {
            endpoint: self.endpoint.clone(),
            source,
        }
    }

    fn transport(&self, e: reqwest::Error) -> RemoteError {
        let endpoint = self.endpoint.clone();
        if e.is_timeout() {
            RemoteError::Timeout {
                endpoint,
                after: self.timeout,
            }
        } else if e.is_connect() {
            RemoteError::Connect {
                endpoint,
                source: e.without_url(),
            }
        } else {
            RemoteError::Transport {
                endpoint,
                source: e.without_url(),
            }
        }
    }

    /// The Result in a reply: `result` checked and removed, the rest read as an Outcome.
    fn outcome(&self, reply: Value) -> Result<Outcome, RemoteError> {
        let shape = |problem: String| RemoteError::Shape {
            endpoint: self.endpoint.clone(),
            problem,
        };
        let Value::Object(mut map) = reply else {
            return Err(shape("the reply is not a JSON object".into()));
        };
        let result = match map.remove("result") {
            Some(Value::String(s)) => s,
            Some(other) => return Err(shape(format!("\"result\" is {other}, not a string"))),
            None => return Err(shape("the reply has no \"result\"".into())),
        };
        match result.as_str() {
            "ok" => serde_json::from_value(Value::Object(map)).map_err(|e| shape(e.to_string())),
            "error" => {
                let message = match map.get("error") {
                    Some(Value::String(m)) => m.clone(),
                    Some(other) => other.to_string(),
                    None => "(no \"error\" message)".into(),
                };
                Err(RemoteError::Reported {
                    endpoint: self.endpoint.clone(),
                    message: truncate(&message, EXCERPT_MAX * 5),
                })
            }
            _ => Err(RemoteError::UnknownResult {
                endpoint: self.endpoint.clone(),
                result: truncate(&result, EXCERPT_MAX),
            }),
        }
    }
}

/// `url` as a span may show it: no user information, no query.
fn shown_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

#[async_trait]
impl Reconciler for Remote {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Remote
    }

    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        let span = tracing::debug_span!("remote.call", url.full = %shown_url(&self.endpoint));
        let outcome = tracing::Instrument::instrument(self.call(req), span).await?;
        finish(outcome, req)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::http::http_client;
    use crate::secrets::StaticSecrets;
    use serde_json::json;

    #[test]
    fn a_remote_url_is_shown_without_credentials_or_query() {
        assert_eq!(
            shown_url("https://user:token@svc.example:8443/reconcile?key=secret#x"),
            "https://svc.example:8443/reconcile"
        );
        assert_eq!(shown_url("http://10.0.0.1"), "http://10.0.0.1");
    }

    fn remote() -> Remote {
        let spec = RemoteSpec {
            endpoint: "http://127.0.0.1:9/reconcile".into(),
            auth: None,
            timeout: Duration::from_secs(1),
            rollout: None,
        };
        Remote::new(
            &spec,
            http_client().expect("client"),
            Arc::new(StaticSecrets::new()),
        )
    }

    #[test]
    fn an_ok_reply_is_read_as_an_outcome_without_its_result_key() {
        let o = remote()
            .outcome(json!({"result": "ok", "status": {"phase": "Ready"}, "requeueAfter": "5s"}))
            .expect("outcome");
        assert_eq!(o.requeue_after, Some(Duration::from_secs(5)));
    }

    #[test]
    fn replies_that_are_not_results_are_told_apart() {
        let r = remote();
        assert!(matches!(
            r.outcome(json!({"result": "error", "error": "db down"})),
            Err(RemoteError::Reported { message, .. }) if message == "db down"
        ));
        assert!(matches!(
            r.outcome(json!({"result": "maybe"})),
            Err(RemoteError::UnknownResult { .. })
        ));
        assert!(matches!(
            r.outcome(json!([1])),
            Err(RemoteError::Shape { .. })
        ));
        assert!(matches!(
            r.outcome(json!({"status": {}})),
            Err(RemoteError::Shape { .. })
        ));
        assert!(matches!(
            r.outcome(json!({"result": "ok", "resources": "no"})),
            Err(RemoteError::Shape { .. })
        ));
    }

    /// An HTTP server on 127.0.0.1 that answers every request with `reply` and counts the
    /// requests it got.
    pub(crate) async fn server(
        reply: String,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        (addr, hits)
    }

    #[tokio::test]
    async fn a_redirect_is_the_endpoints_answer_and_the_token_goes_nowhere_else() {
        let ok = r#"{"result":"ok"}"#;
        let (elsewhere, hits) = server(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ok}",
            ok.len()
        ))
        .await;
        let (endpoint, _) = server(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{elsewhere}/steal\r\ncontent-length: 0\r\n\r\n"
        ))
        .await;
        let spec = RemoteSpec {
            endpoint: format!("http://{endpoint}/reconcile"),
            auth: Some(inrun_blueprint::RemoteAuth {
                secret_ref: SecretRef {
                    name: "token".into(),
                    key: "token".into(),
                    namespace: Some("team-a".into()),
                },
            }),
            timeout: Duration::from_secs(5),
            rollout: None,
        };
        let secrets = StaticSecrets::new().with("team-a", "token", "token", "s3cret");
        let remote = Remote::new(&spec, http_client().expect("client"), Arc::new(secrets));
        let req = Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
                   "metadata": {"name": "web", "namespace": "team-a"}, "spec": {}}),
            json!({}),
        );
        let err = remote
            .call(&req)
            .await
            .expect_err("a redirect is not a Result");
        assert!(
            matches!(err, RemoteError::Status { status: 307, .. }),
            "{err}"
        );
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the redirect was not followed"
        );
    }
}
