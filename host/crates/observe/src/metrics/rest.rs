//! `rest_client_requests_total`: every request a Kubernetes client of the host sends, by
//! status code, method and API server, counted by a tower layer on the client's stack
//! (client-go counts the same in its transport).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    code: String,
    method: String,
    host: String,
}

#[cfg(test)]
impl RequestLabels {
    pub(super) fn new(code: &str, method: &str, host: &str) -> Self {
        RequestLabels {
            code: code.into(),
            method: method.into(),
            host: host.into(),
        }
    }
}

/// The code of a request that got no response: it failed, timed out or was abandoned.
const NO_RESPONSE: &str = "<error>";

/// A layer counting a client's requests to the API server at `host`; one built from
/// [`CountRequests::none`] counts nothing. Cloning shares the counts.
#[derive(Clone)]
pub struct CountRequests {
    family: Option<Family<RequestLabels, Counter>>,
    host: Arc<str>,
}

impl std::fmt::Debug for CountRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the counts: a fence or client printed in a log would carry them all.
        f.debug_struct("CountRequests")
            .field("counting", &self.family.is_some())
            .field("host", &self.host)
            .finish()
    }
}

impl CountRequests {
    pub(super) fn new(family: Family<RequestLabels, Counter>, host: &str) -> Self {
        CountRequests {
            family: Some(family),
            host: host.into(),
        }
    }

    /// A layer that counts nothing.
    pub fn none() -> Self {
        CountRequests {
            family: None,
            host: "".into(),
        }
    }
}

impl Default for CountRequests {
    fn default() -> Self {
        Self::none()
    }
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            counts: self.clone(),
        }
    }
}

/// A client stack whose requests are counted.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    counts: CountRequests,
}

/// One request sent: counted when its response arrives, or as `<error>` when it fails
/// or is dropped first (a timeout, a write abandoned by the fence).
struct Pending {
    family: Family<RequestLabels, Counter>,
    method: String,
    host: Arc<str>,
    counted: bool,
}

impl Pending {
    fn count(&mut self, code: &str) {
        if !self.counted {
            self.counted = true;
            self.family
                .get_or_create(&RequestLabels {
                    code: code.to_string(),
                    method: self.method.clone(),
                    host: self.host.to_string(),
                })
                .inc();
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.count(NO_RESPONSE);
    }
}

impl<S, Req, Res> tower::Service<http::Request<Req>> for Counted<S>
where
    S: tower::Service<http::Request<Req>, Response = http::Response<Res>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    Res: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Req>) -> Self::Future {
        let pending = self.counts.family.clone().map(|family| Pending {
            family,
            method: request.method().as_str().to_string(),
            host: self.counts.host.clone(),
            counted: false,
        });
        let call = self.inner.call(request);
        Box::pin(async move {
            let mut pending = pending;
            let result = call.await;
            if let (Some(p), Ok(response)) = (&mut pending, &result) {
                p.count(response.status().as_str());
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, ServiceExt};

    fn count(family: &Family<RequestLabels, Counter>, code: &str, method: &str) -> u64 {
        family
            .get_or_create(&RequestLabels {
                code: code.into(),
                method: method.into(),
                host: "127.0.0.1:6443".into(),
            })
            .get()
    }

    #[tokio::test]
    async fn requests_are_counted_by_code_and_method_and_failures_as_error() {
        let family = Family::default();
        let layer = CountRequests::new(family.clone(), "127.0.0.1:6443");
        let ok = layer.layer(tower::service_fn(|r: http::Request<()>| async move {
            let status = if r.method() == http::Method::GET {
                200
            } else {
                409
            };
            Ok::<_, std::io::Error>(
                http::Response::builder()
                    .status(status)
                    .body(())
                    .expect("response"),
            )
        }));
        let request = |m: http::Method| {
            http::Request::builder()
                .method(m)
                .body(())
                .expect("request")
        };
        ok.clone()
            .oneshot(request(http::Method::GET))
            .await
            .expect("sent");
        ok.clone()
            .oneshot(request(http::Method::GET))
            .await
            .expect("sent");
        ok.oneshot(request(http::Method::PATCH))
            .await
            .expect("sent");
        let failing = layer.layer(tower::service_fn(|_: http::Request<()>| async {
            Err::<http::Response<()>, _>(std::io::Error::other("connection refused"))
        }));
        let _ = failing.oneshot(request(http::Method::POST)).await;
        assert_eq!(count(&family, "200", "GET"), 2);
        assert_eq!(count(&family, "409", "PATCH"), 1);
        assert_eq!(count(&family, "<error>", "POST"), 1);
    }

    #[tokio::test]
    async fn a_request_dropped_before_its_response_counts_as_an_error() {
        let family = Family::default();
        let layer = CountRequests::new(family.clone(), "127.0.0.1:6443");
        let hanging = layer.layer(tower::service_fn(|_: http::Request<()>| async {
            std::future::pending::<Result<http::Response<()>, std::io::Error>>().await
        }));
        let request = http::Request::builder()
            .method(http::Method::DELETE)
            .body(())
            .expect("request");
        let call = hanging.oneshot(request);
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(1), call).await;
        assert!(timed_out.is_err());
        assert_eq!(count(&family, "<error>", "DELETE"), 1);
    }
}
