//! Outbound HTTP through the host, for a plugin whose Blueprint entry grants
//! `capabilities.http` for the host:
//!
//! ```yaml
//! constructor:
//!   location: ./my-plugin.wasm
//!   capabilities:
//!     http:
//!       hosts: ["api.example.com", "127.0.0.1:8080"]
//!       timeout: 5s
//!       maxResponseSize: 1Mi
//! ```
//!
//! Only `http://` and `https://` URLs on a listed host (and port) are reached; anything
//! else is an `Err` saying it is "not granted". Redirects are not followed: a 3xx comes
//! back as the [`Response`].
//!
//! ```no_run
//! use inrun_sdk::http::{self, Request};
//! use inrun_sdk::json;
//!
//! # fn f() -> Result<(), String> {
//! let quota: serde_json::Value = http::get("https://api.example.com/quota")?.json()?;
//! let created = Request::post("https://api.example.com/things")
//!     .header("authorization", "Bearer …")
//!     .json(&json!({"name": "shop"}))
//!     .send()?;
//! if !created.is_success() {
//!     return Err(format!("creating the thing: HTTP {}: {}", created.status, created.text()));
//! }
//! # Ok(()) }
//! ```
//!
//! Compiled for a native target (a plugin's unit tests), every request fails: there is no
//! host.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// An HTTP request, built with [`Request::get`], [`Request::post`] or [`Request::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `"GET"`.
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Header names and values, in order. `host`, `content-length`, `transfer-encoding`
    /// and `connection` are the host's to set.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
}

impl Request {
    /// A request with `method` to `url`, no headers and no body.
    pub fn new(method: &str, url: &str) -> Self {
        Request {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// A GET request.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A POST request.
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Sets a JSON body and its `content-type`.
    #[must_use]
    pub fn json(self, value: &Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// Sends the request; see [`fetch`].
    ///
    /// # Errors
    /// As [`fetch`].
    pub fn send(&self) -> Result<Response, String> {
        fetch(self)
    }
}

/// What the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lowercase) and values, in the order received.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON into `T`.
    ///
    /// # Errors
    /// The body is not JSON, or does not fit `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "the response from HTTP {} is not the JSON expected: {e}",
                self.status
            )
        })
    }
}

/// Sends `req` through the host and waits for the whole response.
///
/// # Errors
/// The host is not granted (scheme, host or port not allowed), the request is malformed,
/// the server cannot be reached, the grant's timeout or the call's deadline passes, or the
/// body is larger than the grant's `maxResponseSize`. An HTTP error status is not an
/// error: check [`Response::status`].
pub fn fetch(req: &Request) -> Result<Response, String> {
    imp::fetch(req)
}

/// Sends a GET request to `url`.
///
/// # Errors
/// As [`fetch`].
pub fn get(url: &str) -> Result<Response, String> {
    fetch(&Request::get(url))
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{Request, Response};
    use crate::bindings::reconciler::inrun::reconciler0_1_0::http as wit;

    pub fn fetch(req: &Request) -> Result<Response, String> {
        let out = wit::fetch(&wit::Request {
            method: req.method.clone(),
            url: req.url.clone(),
            headers: req.headers.clone(),
            body: req.body.clone(),
        })?;
        Ok(Response {
            status: out.status,
            headers: out.headers,
            body: out.body,
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::{Request, Response};

    pub fn fetch(_req: &Request) -> Result<Response, String> {
        Err("no host: outbound HTTP works only inside the Inrun host".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_request_carries_its_content_type_and_body() {
        let req = Request::post("http://h/x").json(&json!({"a": 1}));
        assert_eq!(req.method, "POST");
        assert_eq!(
            req.headers,
            [("content-type".to_owned(), "application/json".to_owned())]
        );
        assert_eq!(req.body.as_deref(), Some(br#"{"a":1}"#.as_slice()));
    }

    #[test]
    fn a_response_reads_headers_in_any_case_and_parses_json() {
        let res = Response {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"ok":true}"#.to_vec(),
        };
        assert!(res.is_success());
        assert_eq!(res.header("Content-Type"), Some("application/json"));
        assert_eq!(res.json::<Value>(), Ok(json!({"ok": true})));
        assert_eq!(res.text(), r#"{"ok":true}"#);
    }

    #[test]
    fn requests_fail_clearly_without_a_host() {
        assert!(get("http://h/").unwrap_err().starts_with("no host"));
    }
}
