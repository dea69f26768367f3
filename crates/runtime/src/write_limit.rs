//! A tenant's writes to the API server at a rate of its own: a token bucket per tenant in
//! front of its client, so a tenant whose CRs change a thousand times a second queues
//! behind its own writes while other tenants' writes go on. Reads and watches are not
//! counted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;

/// `client`, its writes (POST, PUT, PATCH, DELETE) at most `per_second` a second with
/// bursts of a second's worth; `0` leaves it as it is.
pub fn limited(client: Client, per_second: u32) -> Client {
    if per_second == 0 {
        return client;
    }
    let bucket = Arc::new(Mutex::new(Bucket::new(per_second)));
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
                        None => break,
                        Some(wait) => tokio::time::sleep(wait).await,
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

/// Tokens at `rate` a second, holding a second's worth at most.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32) -> Self {
        let rate = f64::from(rate);
        Bucket {
            rate,
            tokens: rate,
            at: Instant::now(),
        }
    }

    /// Takes a token (`None`), or says how long until one is there.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_a_second_then_one_write_per_token() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10);
        assert_eq!((0..20).filter(|_| bucket.take(start).is_none()).count(), 10);
        let wait = bucket.take(start).expect("empty");
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::ZERO,
            "{wait:?}"
        );
        assert!(bucket.take(start + Duration::from_millis(100)).is_none());
        // Idle time never fills it past a second's worth.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| bucket.take(later).is_none()).count(), 10);
    }

    #[test]
    fn only_writes_are_counted() {
        assert!(is_write(&http::Method::PATCH));
        assert!(is_write(&http::Method::DELETE));
        assert!(!is_write(&http::Method::GET));
    }
}
