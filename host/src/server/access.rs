//! Who may read the console.
//!
//! - **Host check.** A request must name, in its `Host` header, an address or name the
//!   console answers to: the address it is bound to (any address literal when bound to
//!   `0.0.0.0`/`::`), `localhost` and the loopback addresses when it listens on loopback,
//!   and the names the operator lists (`--console-host`). A web page whose own name an
//!   attacker rebinds to the console's address (DNS rebinding, for instance onto a
//!   `kubectl port-forward` on the operator's machine) sends its own name, and is refused
//!   (421). An address literal cannot be rebound, so it needs no listing.
//! - **Token.** With a token (`--console-token-file`), every route but the static page
//!   needs `Authorization: Bearer <token>` (401 otherwise), compared in constant time. The
//!   page asks for the token once and keeps it for its tab. Off loopback the token is
//!   required: [`ConsoleAccess::new`] refuses to open the console to the network without
//!   one.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The shortest token accepted: anything shorter could be guessed over the network.
pub const TOKEN_MIN_LEN: usize = 16;

/// Why the console's access could not be set up as asked.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// Bound off loopback with no token: anyone on the network could read every tenant.
    #[error(
        "the console would listen on {address}, off loopback, without a token: give --console-token-file (a file holding the token its readers send as `Authorization: Bearer`), or keep --console-address on loopback and reach it with kubectl port-forward"
    )]
    TokenRequired {
        /// The console's address.
        address: IpAddr,
    },
    /// The token file could not be read.
    #[error("reading the console token {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token is too short, or holds what an HTTP header cannot carry.
    #[error(
        "the console token in {} must be at least {TOKEN_MIN_LEN} visible ASCII characters, without spaces",
        path.display()
    )]
    BadToken {
        /// The file.
        path: PathBuf,
    },
    /// A `--console-host` entry that is not a bare host name or address.
    #[error(
        "--console-host {name:?}: expected a host name or address, without scheme, port or path"
    )]
    BadName {
        /// What was given.
        name: String,
    },
}

/// What the console lets through: the names its `Host` header may carry and the token its
/// requests must send.
#[derive(Clone)]
pub struct ConsoleAccess {
    address: IpAddr,
    names: Vec<String>,
    token: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for ConsoleAccess {
    // Never the token: this may end up in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleAccess")
            .field("address", &self.address)
            .field("names", &self.names)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

impl ConsoleAccess {
    /// Access for a console listening on `address`, answering also to `names`, with an
    /// optional bearer `token` (as [`ConsoleAccess::read_token`] reads it).
    ///
    /// # Errors
    /// [`AccessError::TokenRequired`] when `address` is not loopback and there is no token;
    /// [`AccessError::BadName`] for a name with a scheme, port or path.
    pub fn new(
        address: IpAddr,
        names: &[String],
        token: Option<String>,
    ) -> Result<ConsoleAccess, AccessError> {
        if token.is_none() && !address.is_loopback() {
            return Err(AccessError::TokenRequired { address });
        }
        let names = names
            .iter()
            .map(|name| {
                host_of(name)
                    .filter(|h| h.len() == name.trim().trim_end_matches('.').len())
                    .ok_or_else(|| AccessError::BadName { name: name.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ConsoleAccess {
            address,
            names,
            token: token.map(|t| Arc::from(t.into_bytes())),
        })
    }

    /// Access for a console on `127.0.0.1` with no token and no extra names (tests, and
    /// the default).
    pub fn loopback() -> ConsoleAccess {
        ConsoleAccess {
            address: IpAddr::from([127, 0, 0, 1]),
            names: Vec::new(),
            token: None,
        }
    }

    /// The token in `path`, without the whitespace around it (a trailing newline).
    ///
    /// # Errors
    /// [`AccessError::Read`] when the file cannot be read; [`AccessError::BadToken`] when
    /// the token is shorter than [`TOKEN_MIN_LEN`] or not visible ASCII.
    pub fn read_token(path: &Path) -> Result<String, AccessError> {
        let text = std::fs::read_to_string(path).map_err(|source| AccessError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let token = text.trim();
        if token.len() < TOKEN_MIN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AccessError::BadToken {
                path: path.to_path_buf(),
            });
        }
        Ok(token.to_string())
    }

    /// Whether a request sent to `host` (a `Host` header's host, normalised by
    /// [`host_of`]) is for this console.
    fn answers_to(&self, host: &str) -> bool {
        let covers_loopback = self.address.is_loopback() || self.address.is_unspecified();
        if self.names.iter().any(|n| n == host) {
            return true;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                ip == self.address
                    || self.address.is_unspecified()
                    || (covers_loopback && ip.is_loopback())
            }
            Err(_) => covers_loopback && host == "localhost",
        }
    }

    /// Whether `authorization` carries the token (always, when there is none).
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().as_bytes());
        given.is_some_and(|given| same(token, given))
    }
}

/// Whether `given` equals `expected`, in time that depends on `expected`'s length only: a
/// caller timing the answers learns nothing of how much of a guess was right.
fn same(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = expected.len() ^ given.len();
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(0);
        diff |= usize::from(e ^ g);
    }
    std::hint::black_box(diff) == 0
}

/// The host a `Host` header (or a URI's authority) names: without the port or the
/// brackets of an IPv6 literal, lower case, without a trailing dot; `None` when it is not
/// one (empty, a path, a stray bracket).
pub(super) fn host_of(authority: &str) -> Option<String> {
    let authority = authority.trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || port(after.strip_prefix(':')?)) {
            return None;
        }
        inside
    } else {
        match authority.rsplit_once(':') {
            Some((host, p)) if port(p) => host,
            Some(_) => return None,
            None => authority,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._:".contains(c);
    (!host.is_empty() && host.chars().all(allowed)).then_some(host)
}

fn port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a request whose `Host` names nothing this console answers to (421), or that
/// names none at all (400).
pub(super) async fn check_host(
    State(access): State<Arc<ConsoleAccess>>,
    request: Request,
    next: Next,
) -> Response {
    // HTTP/2 carries the host as the URI's authority rather than a header.
    let named = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(ToString::to_string));
    let Some(named) = named else {
        return refusal(StatusCode::BAD_REQUEST, "a request must name its host\n");
    };
    match host_of(&named) {
        Some(host) if access.answers_to(&host) => next.run(request).await,
        _ => refusal(
            StatusCode::MISDIRECTED_REQUEST,
            "this console answers to its own address, localhost on loopback, and the names given with --console-host; not to the host this request names\n",
        ),
    }
}

/// Refuses a request without the console's bearer token (401), when it has one.
pub(super) async fn check_token(
    State(access): State<Arc<ConsoleAccess>>,
    request: Request,
    next: Next,
) -> Response {
    if access.admits(request.headers().get(header::AUTHORIZATION)) {
        return next.run(request).await;
    }
    let mut response = refusal(
        StatusCode::UNAUTHORIZED,
        "the console needs its token: send `Authorization: Bearer <token>` (the page asks for it)\n",
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"inrun console\""),
    );
    response
}

fn refusal(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_header_is_read_without_port_brackets_case_or_trailing_dot() {
        for (given, host) in [
            ("localhost:8082", Some("localhost")),
            ("LocalHost.", Some("localhost")),
            ("127.0.0.1:8082", Some("127.0.0.1")),
            ("[::1]:8082", Some("::1")),
            ("[::1]", Some("::1")),
            ("console.example.com", Some("console.example.com")),
            ("", None),
            ("[::1", None),
            ("[::1]x", None),
            ("evil.example:port", None),
            ("a/b", None),
        ] {
            assert_eq!(host_of(given).as_deref(), host, "{given:?}");
        }
    }

    #[test]
    fn on_loopback_it_answers_to_loopback_names_and_listed_ones_only() {
        let access = ConsoleAccess::new(
            IpAddr::from([127, 0, 0, 1]),
            &["Console.Example.com".to_string()],
            None,
        )
        .expect("access");
        for host in ["localhost", "127.0.0.1", "::1", "console.example.com"] {
            assert!(access.answers_to(host), "{host}");
        }
        for host in ["rebound.example", "10.0.0.5", "localhost.evil.example"] {
            assert!(!access.answers_to(host), "{host}");
        }
    }

    #[test]
    fn bound_to_one_address_it_answers_to_that_address_and_not_localhost() {
        let access = ConsoleAccess::new(
            IpAddr::from([10, 0, 0, 5]),
            &[],
            Some("0123456789abcdef".into()),
        )
        .expect("access");
        assert!(access.answers_to("10.0.0.5"));
        for host in ["10.0.0.6", "localhost", "127.0.0.1", "rebound.example"] {
            assert!(!access.answers_to(host), "{host}");
        }
        let any = ConsoleAccess::new(
            IpAddr::from([0, 0, 0, 0]),
            &[],
            Some("0123456789abcdef".into()),
        )
        .expect("access");
        for host in ["10.0.0.6", "localhost", "::1"] {
            assert!(any.answers_to(host), "{host}");
        }
        assert!(!any.answers_to("rebound.example"));
    }

    #[test]
    fn off_loopback_a_token_is_required_and_names_are_bare() {
        let err = ConsoleAccess::new(IpAddr::from([0, 0, 0, 0]), &[], None)
            .expect_err("no token off loopback");
        assert!(err.to_string().contains("--console-token-file"), "{err}");
        for name in ["https://x.example", "x.example:8082", "x.example/path", ""] {
            assert!(
                ConsoleAccess::new(IpAddr::from([127, 0, 0, 1]), &[name.to_string()], None)
                    .is_err(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn a_token_file_is_trimmed_and_a_short_or_spaced_token_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").expect("write");
        assert_eq!(
            ConsoleAccess::read_token(&path).expect("token"),
            "0123456789abcdef0123"
        );
        for bad in ["short\n", "0123456789 abcdef0123", ""] {
            std::fs::write(&path, bad).expect("write");
            assert!(ConsoleAccess::read_token(&path).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tokens_compare_equal_only_when_every_byte_and_the_length_match() {
        assert!(same(b"0123456789abcdef", b"0123456789abcdef"));
        for given in [
            &b"0123456789abcdeF"[..],
            b"0123456789abcde",
            b"0123456789abcdef0",
            b"",
        ] {
            assert!(!same(b"0123456789abcdef", given), "{given:?}");
        }
    }
}
