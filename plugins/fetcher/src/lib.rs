//! Test guest: a reconciler that makes one request through the `http` capability and
//! reports the answer, so end-to-end tests can check which hosts a grant reaches.
//!
//! `spec.url` is fetched with GET (or `spec.method`); the status code, the body as text and
//! the `content-type` header land in `status.code`, `status.body` and `status.contentType`.
//! A refused or failed request fails the reconcile with the host's message. A finalizing CR
//! gets an empty outcome.

use inrun_sdk::http::Request as HttpRequest;
use inrun_sdk::{Outcome, Reconciler, Request};

/// Fetches `spec.url` and reports what came back.
pub struct Fetcher;

impl Reconciler for Fetcher {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        if req.finalizing {
            return Ok(Outcome::new());
        }
        let spec = req.spec();
        let url = spec["url"].as_str().ok_or("spec.url is required")?;
        let method = spec["method"].as_str().unwrap_or("GET");
        let response = HttpRequest::new(method, url)
            .header("x-inrun-cr", req.name())
            .send()?;
        Ok(Outcome::new()
            .status("code", response.status)
            .status("body", response.text())
            .status(
                "contentType",
                response.header("content-type").unwrap_or_default(),
            ))
    }
}

inrun_sdk::export_reconciler!(Fetcher);
