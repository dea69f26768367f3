//! A tenant's writes to the API server at a rate of its own: a token bucket per tenant in
//! front of its client, so a tenant whose CRs change a thousand times a second queues
//! behind its own writes while other tenants' writes go on. Reads and watches are not
//! counted.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use inrun_wasm::TokenBucket;
use kube::Client;

/// `client`, its writes (POST, PUT, PATCH, DELETE) at most `per_second` a second with
/// bursts of a second's worth; `0` leaves it as it is.
pub fn limited(client: Client, per_second: u32) -> Client {
    if per_second == 0 {
        return client;
    }
    let bucket = Arc::new(Mutex::new(TokenBucket::new(per_second, per_second)));
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (client, bucket) = (client.clone(), bucket.clone());
        async move {
            if is_write(request.method()) {
                loop {
                    let wait = bucket
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

    #[test]
    fn only_writes_are_counted() {
        assert!(is_write(&http::Method::PATCH));
        assert!(is_write(&http::Method::DELETE));
        assert!(!is_write(&http::Method::GET));
    }
}
