//! What remote reconcilers and external calls share over HTTP: the client, and one-line
//! excerpts of a body for error messages (replies are read under the tenant's budget by
//! [`crate::replies`]).

/// Longest excerpt of a reply body put in an error message, in characters.
pub const EXCERPT_MAX: usize = 200;

/// The start of a body as text, at most [`EXCERPT_MAX`] characters on one line.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        "(empty body)".into()
    } else {
        truncate(&one_line, EXCERPT_MAX)
    }
}

/// `text` cut at `max` characters, marked with an ellipsis when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        text.chars().take(max).collect::<String>() + "…"
    } else {
        text.to_string()
    }
}

/// The HTTP client shared by remote reconcilers and external calls: rustls, and
///
/// - **no redirects**: a 3xx is the endpoint's answer, an error naming its status. A
///   redirect would carry the call, its Request and its bearer token to a host the
///   Blueprint never named;
/// - **no proxy from the environment** (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`): calls go
///   where the Blueprint says, not through whatever the host's environment holds.
///
/// # Errors
/// The client's error when TLS cannot be set up.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("inrun/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_bounded_line() {
        let long = "x\n".repeat(1000);
        let e = excerpt(long.as_bytes());
        assert!(e.chars().count() <= EXCERPT_MAX + 1);
        assert!(!e.contains('\n'));
        assert_eq!(excerpt(b""), "(empty body)");
    }
}
