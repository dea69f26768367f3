//! The write fence: a replica that is not (or no longer) the leader must not change the
//! cluster. Every client the controllers write with is built through [`client`]; while
//! the [`Fence`] is closed its writes fail at once with [`Fenced`], and a write still in
//! flight when it closes is abandoned (its request dropped) instead of landing later.
//!
//! Reads stay open (watches feed caches a standby may keep warm), and so do access
//! reviews (`authorization.k8s.io`, `authentication.k8s.io`), which change nothing.
//! The Lease is renewed with a client built without the fence.
//!
//! A fence opened by a lease also carries the time its lease is known to hold until
//! ([`Fence::open_until`], moved on by every renewal): past it, writes are refused and those
//! in flight abandoned even before anyone closes the fence. A process paused past its
//! lease (SIGSTOP, a frozen VM) resumes with its reconcile tasks and its election task
//! racing; without the deadline a reconcile could start a write before the election task
//! saw the lease was lost, while another replica already leads.
//!
//! The same layer bounds every request but a watch by the fence's request timeout
//! (`inrun run --request-timeout`): a watch is held open by the API server for minutes on
//! purpose and ends by its own `timeoutSeconds`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Instant;

use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tokio::sync::watch;

use crate::sharding::shard::{Refused, admit};

/// Whether this replica may write. Cloning shares the state; a new fence is open (a host
/// without leader election always may write).
#[derive(Clone, Debug)]
pub struct Fence {
    open: Arc<watch::Sender<bool>>,
    /// When writes stop even if the fence is still open; `None`: never.
    until: Arc<Mutex<Option<Instant>>>,
    request_timeout: Option<std::time::Duration>,
    requests: inrun_observe::metrics::CountRequests,
    /// Under sharding, what a write made outside any CR's reconcile (the host's own: CRDs,
    /// Blueprint resources' status, releases) must also pass: the ring's leader fence.
    bucketless: Arc<std::sync::OnceLock<Fence>>,
}

impl Default for Fence {
    fn default() -> Self {
        Fence {
            open: Arc::new(watch::channel(true).0),
            until: Arc::new(Mutex::new(None)),
            request_timeout: None,
            requests: inrun_observe::metrics::CountRequests::none(),
            bucketless: Arc::default(),
        }
    }
}

impl Fence {
    /// The same fence, bounding each request but a watch by `timeout`.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same fence, its clients counting the requests they send with `requests`
    /// (`rest_client_requests_total`).
    #[must_use]
    pub fn counting(mut self, requests: inrun_observe::metrics::CountRequests) -> Self {
        self.requests = requests;
        self
    }

    /// Lets writes through, with no deadline.
    pub fn open(&self) {
        self.set_until(None);
        self.open.send_replace(true);
    }

    /// Lets writes through until `until` (a lease's renew deadline), when they stop by
    /// themselves unless [`Fence::extend`] moved it on.
    pub fn open_until(&self, until: Instant) {
        self.set_until(Some(until));
        self.open.send_replace(true);
    }

    /// Moves the deadline of a fence opened with [`Fence::open_until`] to `until` (a
    /// renewal succeeded).
    pub fn extend(&self, until: Instant) {
        self.set_until(Some(until));
    }

    fn set_until(&self, until: Option<Instant>) {
        *self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = until;
    }

    fn until(&self) -> Option<Instant> {
        *self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Resolves once the fence's deadline has passed (never, without one), following the
    /// deadline as renewals move it.
    async fn expired(&self) {
        loop {
            let Some(until) = self.until() else {
                return std::future::pending().await;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until.into()).await;
        }
    }

    /// From now on a write made outside any CR's reconcile also needs `leading` open (and
    /// is abandoned when it closes): under sharding the host's own writes are the ring
    /// leader's alone. Set once, before any such write; every clone of this fence (every
    /// client built on it) follows.
    pub fn fence_bucketless_writes(&self, leading: Fence) {
        let _ = self.bucketless.set(leading);
    }

    /// Refuses new writes and abandons those in flight.
    pub fn close(&self) {
        self.open.send_replace(false);
    }

    /// Whether writes go through now: open, and its deadline (if any) not passed.
    #[must_use]
    pub fn is_open(&self) -> bool {
        *self.open.borrow() && self.until().is_none_or(|until| Instant::now() < until)
    }

    fn watch(&self) -> watch::Receiver<bool> {
        self.open.subscribe()
    }
}

/// What a request that ran past the request timeout fails with.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} timed out after {}", inrun_contract::duration::format(*.after))]
pub struct TimedOut {
    method: http::Method,
    path: String,
    after: std::time::Duration,
}

/// Whether a request is a watch (`?watch=true`, or `=1`).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    })
}

/// `call` bounded by `timeout`, when there is one.
fn bounded<R>(
    call: impl Future<Output = Result<R, BoxError>> + Send + 'static,
    timeout: Option<std::time::Duration>,
    method: http::Method,
    path: String,
) -> Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>
where
    R: 'static,
{
    match timeout {
        None => Box::pin(call),
        Some(after) => Box::pin(async move {
            match tokio::time::timeout(after, call).await {
                Ok(done) => done,
                Err(_) => Err(Box::new(TimedOut {
                    method,
                    path,
                    after,
                }) as BoxError),
            }
        }),
    }
}

/// What a fenced write fails with.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} abandoned: this replica is not the leader (its lease was lost)")]
pub struct Fenced {
    method: http::Method,
    path: String,
}

/// What a write for a CR of a bucket this replica does not hold (or no longer may write
/// for) fails with, under `inrun run --sharding`.
#[derive(Debug, thiserror::Error)]
pub enum NotHolder {
    /// Another replica holds the CR's bucket, or it is being handed over.
    #[error(
        "{method} {path} refused: the CR's bucket {bucket:02} is not held by this replica (another replica serves it)"
    )]
    Bucket {
        /// The request's method.
        method: http::Method,
        /// The request's path.
        path: String,
        /// The CR's bucket.
        bucket: usize,
    },
    /// The member Lease was not renewed within the renew deadline.
    #[error("{method} {path} abandoned: this replica's member Lease was not renewed in time")]
    Lapsed {
        /// The request's method.
        method: http::Method,
        /// The request's path.
        path: String,
    },
}

impl NotHolder {
    fn boxed(refused: Refused, method: http::Method, path: String) -> BoxError {
        Box::new(match refused {
            Refused::NotHeld(bucket) => NotHolder::Bucket {
                method,
                path,
                bucket,
            },
            Refused::Lapsed => NotHolder::Lapsed { method, path },
        })
    }
}

/// A client from `config` whose writes pass only while `fence` is open; the requests it
/// sends are counted as the fence says.
///
/// # Errors
/// When the client cannot be built from `config`.
pub fn client(config: Config, fence: &Fence) -> Result<Client, kube::Error> {
    // Counted inside the fence: a write it refuses is never sent.
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&fence.requests)
        .with_layer(&FenceLayer {
            fence: fence.clone(),
        })
        .build())
}

/// Whether a request changes the cluster.
fn writes(method: &http::Method, path: &str) -> bool {
    let reads = matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    let reviews = path.starts_with("/apis/authorization.k8s.io/")
        || path.starts_with("/apis/authentication.k8s.io/");
    !reads && !reviews
}

struct FenceLayer {
    fence: Fence,
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// The client's stack behind the fence.
#[derive(Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<http::Request<Body>> for FencedService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: 'static,
{
    type Response = http::Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let timeout = self
            .fence
            .request_timeout
            .filter(|_| !is_watch(request.uri()));
        if !writes(&method, &path) {
            let call = self.inner.call(request);
            return bounded(
                async move { call.await.map_err(Into::into) },
                timeout,
                method,
                path,
            );
        }
        let mut open = self.fence.watch();
        open.mark_unchanged();
        if !self.fence.is_open() {
            return Box::pin(async move { Err(Box::new(Fenced { method, path }) as BoxError) });
        }
        let call = self.inner.call(request);
        let (m, p) = (method.clone(), path.clone());
        let call = bounded(async move { call.await.map_err(Into::into) }, timeout, m, p);
        let fence = self.fence.clone();
        Box::pin(async move {
            // A write made while reconciling a CR under sharding: the CR's bucket must be
            // held. Asked here, not above: this future runs in the reconcile's task, the
            // client's queue calls the layer in its own.
            let admitted = match admit() {
                None => None,
                Some(Ok(admitted)) => Some(admitted),
                Some(Err(refused)) => return Err(NotHolder::boxed(refused, method, path)),
            };
            // The host's own write under sharding: the ring leader's alone.
            let leading = admitted.is_none().then(|| fence.bucketless.get()).flatten();
            if leading.is_some_and(|l| !l.is_open()) {
                return Err(Box::new(Fenced { method, path }) as BoxError);
            }
            let mut lead_open = leading.map(Fence::watch);
            let lead_lost = async {
                match (leading, lead_open.as_mut()) {
                    (Some(l), Some(open)) => tokio::select! {
                        _ = open.wait_for(|o| !*o) => {}
                        () = l.expired() => {}
                    },
                    _ => std::future::pending().await,
                }
            };
            let lapsed = async {
                match &admitted {
                    Some(a) => a.shard().expired().await,
                    None => std::future::pending().await,
                }
            };
            // One span per write, under the reconcile that makes it.
            let span = tracing::debug_span!(
                "k8s.write",
                http.request.method = %method,
                url.path = %path,
                http.response.status_code = tracing::field::Empty,
            );
            let call = tracing::Instrument::instrument(call, span.clone());
            let done = tokio::select! {
                biased;
                // Dropping the call abandons the request, whatever it had sent.
                _ = open.wait_for(|o| !*o) => Err(Box::new(Fenced { method, path }) as BoxError),
                () = fence.expired() => Err(Box::new(Fenced { method, path }) as BoxError),
                () = lapsed => Err(NotHolder::boxed(Refused::Lapsed, method, path)),
                () = lead_lost => Err(Box::new(Fenced { method, path }) as BoxError),
                done = call => done,
            };
            // Only an answer says the write will not land later; a server error (an etcd
            // timeout, say) does not.
            let settled = done.as_ref().is_ok_and(|a| !a.status().is_server_error());
            match admitted {
                Some(a) if settled => a.answered(),
                unsettled => drop(unsettled),
            }
            if let Ok(answer) = &done {
                span.record("http.response.status_code", answer.status().as_u16());
            }
            done
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_that_change_the_cluster_are_fenced() {
        use http::Method;
        assert!(!writes(&Method::GET, "/api/v1/namespaces/a/configmaps"));
        assert!(!writes(&Method::GET, "/api/v1/configmaps?watch=true"));
        assert!(!writes(
            &Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        ));
        assert!(!writes(
            &Method::POST,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews"
        ));
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(
                writes(&method, "/api/v1/namespaces/a/configmaps/x"),
                "{method}"
            );
        }
        // A path that merely contains a review group's name is no review.
        assert!(writes(
            &Method::PATCH,
            "/api/v1/namespaces/authorization.k8s.io/configmaps/x"
        ));
    }

    #[test]
    fn only_watches_escape_the_request_timeout() {
        let uri = |s: &str| s.parse::<http::Uri>().expect("uri");
        assert!(is_watch(&uri("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(is_watch(&uri("/api/v1/pods?resourceVersion=1&watch=1")));
        assert!(!is_watch(&uri("/api/v1/pods?limit=500")));
        assert!(!is_watch(&uri("/api/v1/namespaces/watch/pods")));
        assert!(!is_watch(&uri("/api/v1/pods?watchful=true")));
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_fails_naming_it() {
        let slow = async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            Ok::<(), BoxError>(())
        };
        let err = bounded(
            slow,
            Some(std::time::Duration::from_millis(20)),
            http::Method::GET,
            "/api/v1/pods".into(),
        )
        .await
        .expect_err("timed out");
        assert_eq!(err.to_string(), "GET /api/v1/pods timed out after 20ms");
    }

    /// A fenced service whose every call takes `took`, then answers 200.
    fn fenced(
        fence: &Fence,
        took: std::time::Duration,
    ) -> FencedService<
        impl tower::Service<
            http::Request<Body>,
            Response = http::Response<()>,
            Error = BoxError,
            Future = impl Future<Output = Result<http::Response<()>, BoxError>> + Send + 'static,
        > + Clone,
    > {
        let inner = tower::service_fn(move |_: http::Request<Body>| async move {
            tokio::time::sleep(took).await;
            Ok::<_, BoxError>(http::Response::new(()))
        });
        FencedService {
            inner,
            fence: fence.clone(),
        }
    }

    fn write() -> http::Request<Body> {
        http::Request::patch("/api/v1/namespaces/a/configmaps/x")
            .body(Body::empty())
            .expect("request")
    }

    #[tokio::test]
    async fn a_fence_past_its_deadline_refuses_writes_though_nobody_closed_it() {
        use tower::Service;
        let fence = Fence::default();
        fence.open_until(Instant::now() - std::time::Duration::from_millis(1));
        assert!(!fence.is_open());
        let err = fenced(&fence, std::time::Duration::ZERO)
            .call(write())
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("abandoned"), "{err}");
        // Reads still go through.
        let read = http::Request::get("/api/v1/namespaces/a/configmaps/x")
            .body(Body::empty())
            .expect("request");
        fenced(&fence, std::time::Duration::ZERO)
            .call(read)
            .await
            .expect("a read");
    }

    #[tokio::test]
    async fn a_write_in_flight_at_the_deadline_is_abandoned_unless_a_renewal_moved_it() {
        use tower::Service;
        let fence = Fence::default();
        let short = std::time::Duration::from_millis(50);
        fence.open_until(Instant::now() + short);
        let started = Instant::now();
        let err = fenced(&fence, std::time::Duration::from_secs(30))
            .call(write())
            .await
            .expect_err("abandoned");
        assert!(err.to_string().contains("abandoned"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));

        // Renewed while the write is in flight: it completes.
        fence.open_until(Instant::now() + short);
        let mut service = fenced(&fence, std::time::Duration::from_millis(200));
        let call = service.call(write());
        fence.extend(Instant::now() + std::time::Duration::from_secs(60));
        call.await.expect("completes after the deadline moved");
    }

    #[test]
    fn a_fence_is_open_until_closed_and_shared_by_its_clones() {
        let fence = Fence::default();
        let clone = fence.clone();
        assert!(clone.is_open());
        fence.close();
        assert!(!clone.is_open());
        clone.open();
        assert!(fence.is_open());
    }

    type ConfigMaps = kube::Api<k8s_openapi::api::core::v1::ConfigMap>;

    /// ConfigMaps through a client on `fence` to an address nothing listens on (port 1: a
    /// write that is sent fails to connect), and a shard renewed and holding bucket 5.
    fn unanswered(fence: &Fence) -> (ConfigMaps, std::sync::Arc<crate::sharding::shard::Shard>) {
        let config = Config::new("http://127.0.0.1:1".parse().expect("url"));
        let client = client(config, fence).expect("client");
        let shard = std::sync::Arc::new(crate::sharding::shard::Shard::default());
        shard.renewed(Instant::now() + std::time::Duration::from_secs(60));
        shard.take(1 << 5);
        (kube::Api::namespaced(client, "a"), shard)
    }

    /// Why a delete through `api` failed.
    async fn refusal(api: &ConfigMaps) -> String {
        api.delete("x", &kube::api::DeleteParams::default())
            .await
            .expect_err("nothing answers")
            .to_string()
    }

    /// The bucket a write is for travels with the reconcile's task, not with the request:
    /// a real client (whose queue calls the layer in a task of its own) still refuses a
    /// write for a bucket not held before anything is sent, and sends one for a bucket held.
    #[tokio::test]
    async fn a_clients_write_for_a_cr_passes_only_for_a_bucket_this_replica_holds() {
        let (api, shard) = unanswered(&Fence::default());
        let write = || refusal(&api);
        let refused = shard.scope(6, write()).await;
        assert!(
            refused.contains("bucket 06 is not held by this replica"),
            "{refused}"
        );
        let sent = shard.scope(5, write()).await;
        assert!(!sent.contains("not held"), "{sent}");
        // Outside a reconcile (the host's own writes) the bucket fence does not apply.
        let own = write().await;
        assert!(!own.contains("not held"), "{own}");
        // The write sent got no answer, so it may still land: its bucket is not drained
        // until it could have; the refused one was never sent.
        let settle = std::time::Duration::from_secs(60);
        let none = std::time::Duration::ZERO;
        assert!(!shard.drained(1 << 5, settle, none).await);
        assert!(shard.drained(1 << 6, settle, none).await);
    }

    /// A write the API server answers, even with a refusal, will not land later: its bucket
    /// drains at once. (A one-request server answering 404, not a Kubernetes fake.)
    #[tokio::test]
    async fn a_write_answered_leaves_its_bucket_drained_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; 4096];
            let _ = socket.read(&mut request).await;
            let answer = "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            socket.write_all(answer.as_bytes()).await.expect("answer");
        });
        let config = Config::new(format!("http://127.0.0.1:{port}").parse().expect("url"));
        let api: ConfigMaps =
            kube::Api::namespaced(client(config, &Fence::default()).expect("client"), "a");
        let shard = std::sync::Arc::new(crate::sharding::shard::Shard::default());
        shard.renewed(Instant::now() + std::time::Duration::from_secs(60));
        shard.take(1 << 5);
        let answered = shard.scope(5, refusal(&api)).await;
        assert!(!answered.contains("not held"), "{answered}");
        server.await.expect("served");
        let settle = std::time::Duration::from_secs(60);
        assert!(
            shard
                .drained(1 << 5, settle, std::time::Duration::ZERO)
                .await
        );
    }

    /// Under sharding the host's own writes (outside any CR's pass) need the ring's leader
    /// fence as well; a CR's writes need only their bucket.
    #[tokio::test]
    async fn the_hosts_own_writes_under_sharding_pass_only_while_this_replica_leads_the_ring() {
        let fence = Fence::default();
        let leading = Fence::default();
        leading.close();
        fence.fence_bucketless_writes(leading.clone());
        let (api, shard) = unanswered(&fence);
        let write = || refusal(&api);
        let own = write().await;
        assert!(own.contains("abandoned"), "not leading: {own}");
        let for_cr = shard.scope(5, write()).await;
        assert!(
            !for_cr.contains("abandoned"),
            "a held bucket's write: {for_cr}"
        );
        leading.open_until(Instant::now() + std::time::Duration::from_secs(60));
        let own = write().await;
        assert!(!own.contains("abandoned"), "leading: {own}");
        // Past the lead's renew deadline, refused again though nobody closed it.
        leading.open_until(Instant::now() - std::time::Duration::from_millis(1));
        let own = write().await;
        assert!(own.contains("abandoned"), "lapsed lead: {own}");
    }
}
