//! A tenant's writes to the API server at a rate of its own: a token rate per tenant in
//! front of its client, so a tenant whose CRs change a thousand times a second queues
//! behind its own writes while other tenants' writes go on. Reads and watches are not
//! counted.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use inrun_wasm::TokenRate;
use kube::Client;

/// `client`, its writes (POST, PUT, PATCH, DELETE) at most `per_second` a second with
/// bursts of a second's worth; `0` leaves it as it is.
pub fn limited(client: Client, per_second: u32) -> Client {
    match WriteRate::new(per_second) {
        Some(rate) => rate.limit(client),
        None => client,
    }
}

/// One tenant's write rate, shared by every client that writes on its behalf (its own, and
/// the host's where the host writes for it, as with its identity locks), so all of them
/// together stay within it.
#[derive(Clone)]
pub struct WriteRate(Arc<Mutex<TokenRate>>);

impl std::fmt::Debug for WriteRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteRate").finish_non_exhaustive()
    }
}

impl WriteRate {
    /// `per_second` writes a second with bursts of a second's worth; `None` for `0` (no
    /// limit).
    pub fn new(per_second: u32) -> Option<Self> {
        (per_second > 0)
            .then(|| WriteRate(Arc::new(Mutex::new(TokenRate::new(per_second, per_second)))))
    }

    /// `client`, its writes taken from this rate.
    pub fn limit(&self, client: Client) -> Client {
        limit(client, self.0.clone())
    }
}

fn limit(client: Client, rate: Arc<Mutex<TokenRate>>) -> Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (client, rate) = (client.clone(), rate.clone());
        async move {
            if is_write(request.method()) {
                loop {
                    let wait = rate
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take(Instant::now());
                    match wait {
                        Ok(()) => break,
                        Err(wait) => tokio::time::sleep(wait).await,
                    }
                }
            }
            client.send(request).await
        }
    });
    Client::new(service, namespace)
}

fn is_write(method: &http::Method) -> bool {
    [
        http::Method::POST,
        http::Method::PUT,
        http::Method::PATCH,
        http::Method::DELETE,
    ]
    .contains(method)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clients_of_one_rate_share_its_writes() {
        // Two clients whose every request is answered at once; one rate of 2 a second.
        let answer = || {
            let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .body(kube::client::Body::from(b"{}".to_vec()))
                        .expect("response"),
                )
            });
            Client::new(service, "default")
        };
        let rate = WriteRate::new(2).expect("a rate");
        let (a, b) = (rate.limit(answer()), rate.limit(answer()));
        let write = |c: &Client| {
            let c = c.clone();
            async move {
                c.send(
                    http::Request::post("/x")
                        .body(kube::client::Body::empty())
                        .expect("request"),
                )
                .await
            }
        };
        let started = Instant::now();
        // The burst (2) taken by one client, the other's write waits for the next token.
        write(&a).await.expect("a");
        write(&a).await.expect("a");
        write(&b).await.expect("b");
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(400),
            "b waited for a's rate: {:?}",
            started.elapsed()
        );
        assert!(WriteRate::new(0).is_none(), "0 is no limit");
    }

    #[test]
    fn only_writes_are_counted() {
        assert!(is_write(&http::Method::PATCH));
        assert!(is_write(&http::Method::DELETE));
        assert!(!is_write(&http::Method::GET));
    }
}
