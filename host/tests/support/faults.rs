//! A fault proxy in front of the harness's API server: the host under test talks to it
//! (plain HTTP on 127.0.0.1, its ServiceAccount token passed on), and it forwards each
//! request to the real API server, except that a share of them is delayed, answered 429
//! with `Retry-After`, answered 500 or 503, or cut off — before the request goes on, or
//! after the API server did it and before the host hears back. It counts what it did and
//! what reached the API server, and when a write came again after a 429.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

/// How often each fault happens, as a share of requests (0.0 to 1.0), and the most added
/// latency.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub latency: Duration,
    pub reset: f64,
    pub throttle: f64,
    pub error: f64,
}

/// What the proxy did, by kind.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub forwarded: usize,
    pub throttled: usize,
    pub errors: usize,
    pub reset_before: usize,
    pub reset_after: usize,
    /// Writes (POST, PUT, PATCH, DELETE) to `ConfigMap`s or to objects of the group named
    /// at [`FaultProxy::start`] that the API server answered with a 2xx.
    pub writes: usize,
    /// For each write refused with a 429: how long after it the same write came again.
    pub retried_after: Vec<Duration>,
}

struct State {
    faults: Faults,
    tally: Tally,
    /// When each write (method and path) was last refused with a 429.
    throttled_at: HashMap<(String, String), Instant>,
    rng: u64,
}

/// A running fault proxy.
#[derive(Clone)]
pub struct FaultProxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`https://…`, its CA in `ca`), counting writes to
    /// objects whose path names `group`. No faults until [`FaultProxy::set`].
    pub async fn start(upstream: &str, ca: &Path, group: &str, seed: u64) -> FaultProxy {
        let pem = std::fs::read(ca).expect("the API server's CA");
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a CA"))
            .build()
            .expect("a client");
        let state = Arc::new(Mutex::new(State {
            faults: Faults::default(),
            tally: Tally::default(),
            throttled_at: HashMap::new(),
            rng: seed | 1,
        }));
        let proxy = Proxy {
            client,
            upstream: upstream.trim_end_matches('/').to_string(),
            group: format!("/apis/{group}/"),
            state: state.clone(),
        };
        let app = axum::Router::new().fallback(move |req: Request<Body>| {
            let proxy = proxy.clone();
            async move { proxy.handle(req).await }
        });
        let port = super::serve(app).await;
        FaultProxy { port, state }
    }

    pub fn set(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    pub fn tally(&self) -> Tally {
        self.lock().tally.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the kubeconfig at `kubeconfig` (JSON, as the harness writes them) whose
    /// server is this proxy, in `dir`.
    pub fn kubeconfig(&self, kubeconfig: &Path, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("a kubeconfig");
        let mut doc: serde_json::Value = serde_yaml_ng::from_str(&text).expect("a kubeconfig");
        for cluster in doc["clusters"].as_array_mut().into_iter().flatten() {
            cluster["cluster"] =
                serde_json::json!({"server": format!("http://127.0.0.1:{}", self.port)});
        }
        let path = dir.join("through-the-proxy.kubeconfig");
        std::fs::write(&path, doc.to_string()).expect("write the kubeconfig");
        path
    }
}

#[derive(Clone)]
struct Proxy {
    client: reqwest::Client,
    upstream: String,
    group: String,
    state: Arc<Mutex<State>>,
}

/// What the proxy does with one request.
enum Fate {
    Forward(Duration),
    Throttle,
    Error(StatusCode),
    ResetBefore,
    ResetAfter,
}

impl Proxy {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fate(&self, write: bool, watch: bool) -> Fate {
        let mut s = self.lock();
        let mut roll = || {
            s.rng ^= s.rng << 13;
            s.rng ^= s.rng >> 7;
            s.rng ^= s.rng << 17;
            (s.rng % 1_000_000) as f64 / 1_000_000.0
        };
        let (r, half, wait) = (roll(), roll(), roll());
        let f = s.faults;
        let latency = f.latency.mul_f64(wait);
        if r < f.reset {
            // A watch is cut as it streams; a write either before or after the server did it.
            return if half < 0.5 || !write || watch {
                Fate::ResetBefore
            } else {
                Fate::ResetAfter
            };
        }
        if watch {
            return Fate::Forward(latency);
        }
        if r < f.reset + f.throttle {
            return Fate::Throttle;
        }
        if r < f.reset + f.throttle + f.error {
            return Fate::Error(if half < 0.5 {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            });
        }
        Fate::Forward(latency)
    }

    async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let method = parts.method.to_string();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().map(str::to_string);
        let write = !matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS")
            && !path.starts_with("/apis/authorization.k8s.io/");
        let watch = query
            .as_deref()
            .is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
        let counted = write && (path.contains("/configmaps") || path.starts_with(&self.group));
        let key = (method.clone(), path.clone());
        if counted {
            let mut s = self.lock();
            if let Some(at) = s.throttled_at.remove(&key) {
                s.tally.retried_after.push(at.elapsed());
            }
        }
        let body = axum::body::to_bytes(body, 64 << 20)
            .await
            .unwrap_or_default();
        let fate = self.fate(write, watch);
        let forwarded = match fate {
            Fate::Throttle => {
                let mut s = self.lock();
                s.tally.throttled += 1;
                if counted {
                    s.throttled_at.insert(key, Instant::now());
                }
                return status(StatusCode::TOO_MANY_REQUESTS, Some("1"));
            }
            Fate::Error(code) => {
                self.lock().tally.errors += 1;
                return status(code, None);
            }
            Fate::ResetBefore => {
                self.lock().tally.reset_before += 1;
                return reset();
            }
            Fate::Forward(latency) => {
                tokio::time::sleep(latency).await;
                false
            }
            Fate::ResetAfter => true,
        };
        let url = match &query {
            Some(q) => format!("{}{path}?{q}", self.upstream),
            None => format!("{}{path}", self.upstream),
        };
        let mut upstream = self.client.request(parts.method.clone(), url).body(body);
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                upstream = upstream.header(name, value);
            }
        }
        let answer = match upstream.send().await {
            Ok(a) => a,
            Err(_) => return status(StatusCode::BAD_GATEWAY, None),
        };
        let code = answer.status();
        {
            let mut s = self.lock();
            if counted && code.is_success() {
                s.tally.writes += 1;
            }
            if forwarded {
                s.tally.reset_after += 1;
            } else {
                s.tally.forwarded += 1;
            }
        }
        if forwarded {
            // The API server did it; the host never hears so.
            return reset();
        }
        let headers: HeaderMap = answer.headers().clone();
        let stream = futures::stream::unfold(answer, |mut a| async move {
            match a.chunk().await {
                Ok(Some(chunk)) => Some((Ok::<Bytes, std::io::Error>(chunk), a)),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e)), a)),
            }
        });
        let mut response = Response::new(Body::from_stream(stream));
        *response.status_mut() = code;
        for (name, value) in &headers {
            if name != "content-length" && name != "transfer-encoding" && name != "connection" {
                response.headers_mut().insert(name, value.clone());
            }
        }
        response
    }
}

/// A Kubernetes `Status` answer with `code`, and `Retry-After` when given.
fn status(code: StatusCode, retry_after: Option<&str>) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "injected by the fault proxy", "code": code.as_u16(),
        "reason": if code == StatusCode::TOO_MANY_REQUESTS { "TooManyRequests" } else { "InternalError" },
        "details": {"retryAfterSeconds": retry_after.and_then(|s| s.parse::<u64>().ok())},
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(
            "retry-after",
            HeaderValue::from_str(seconds).expect("a header value"),
        );
    }
    response
}

/// A connection cut mid-answer: a body that fails before its first byte.
fn reset() -> Response<Body> {
    let stream = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("reset by the fault proxy"))
    });
    Response::new(Body::from_stream(stream))
}
