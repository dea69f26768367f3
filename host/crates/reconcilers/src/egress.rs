//! Where a tenant's calls may go: the operator's allowlist (`inrun run --tenant-egress
//! host[:port],…`) that every outbound call of a `Blueprint` resource must match — its
//! remote reconciler, its `external` calls (HTTP, Prometheus, PostgreSQL, Redis) and its
//! plugins' HTTP grants.
//!
//! Beyond the list, the addresses a tenant could use to reach what it must not — loopback
//! (the host itself), link-local (cloud metadata such as `169.254.169.254`), the
//! unspecified address and the Kubernetes API server — are refused unless the address
//! itself is listed. Names are checked again at connection time, on what they resolve to
//! (the HTTP clients resolve through [`Egress`]), so a listed name that resolves to the
//! metadata address is still refused.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Why a call may not go where it would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The entry of `--tenant-egress` does not parse.
    #[error("--tenant-egress entry {0:?} is not host or host:port")]
    BadEntry(String),
    /// The URL does not parse or names no host.
    #[error("{0:?} is not a URL with a host")]
    BadUrl(String),
    /// Host and port are not on the list.
    #[error(
        "{host}:{port} is not in the operator's egress allowlist for Blueprint resources (inrun run --tenant-egress)"
    )]
    NotListed {
        /// The host.
        host: String,
        /// The port.
        port: u16,
    },
    /// The host is, or resolves to, an address refused unless listed.
    #[error(
        "{host} is {address}, {what}: refused for Blueprint resources unless --tenant-egress lists that address"
    )]
    Special {
        /// The host as written.
        host: String,
        /// The address it is or resolves to.
        address: IpAddr,
        /// Loopback, link-local, …
        what: &'static str,
    },
    /// The HTTP client that enforces the policy could not be built; nothing is called.
    #[error("building the egress-fenced HTTP client: {0}")]
    Client(String),
    /// A connection string names several hosts, an address to dial instead of its host
    /// (`hostaddr`), or a Unix socket: where it would connect is not one checked host.
    #[error("{url:?} {why}: refused for Blueprint resources")]
    Ambiguous {
        /// The connection string.
        url: String,
        /// What it names besides one host.
        why: &'static str,
    },
    /// The name did not resolve.
    #[error("resolving {host}: {reason}")]
    Resolve {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
}

impl EgressError {
    /// What was refused, without the URL, host or address: for a target read from a
    /// Secret, which must not reach a log, an event or status.
    pub fn redacted(&self) -> &'static str {
        match self {
            EgressError::BadEntry(_) | EgressError::Client(_) => "the egress policy is broken",
            EgressError::BadUrl(_) => "is not a URL with a host",
            EgressError::NotListed { .. } => {
                "names a host:port that is not in the operator's egress allowlist (inrun run --tenant-egress)"
            }
            EgressError::Special { .. } => {
                "names a special-purpose address (loopback, link-local, cloud metadata, the API server), refused unless --tenant-egress lists it"
            }
            EgressError::Resolve { .. } => "names a host that does not resolve",
            EgressError::Ambiguous { why, .. } => why,
        }
    }
}

/// One allowed destination.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allowed {
    /// Lower-case host name or IP address text (IPv6 without brackets).
    host: String,
    /// `None`: any port.
    port: Option<u16>,
}

/// The egress policy for Blueprint resources, with the HTTP clients that enforce it at
/// connection time.
#[derive(Clone)]
pub struct Egress {
    inner: Arc<Inner>,
    /// The fenced clients, or why they could not be built (never a fallback to an
    /// unfenced one).
    http: Result<reqwest::Client, String>,
    plugin_http: Result<reqwest::Client, String>,
}

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    allowed: Vec<Allowed>,
    /// The API server's addresses.
    apiserver: Vec<IpAddr>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("allowed", &self.inner.allowed)
            .field("apiserver", &self.inner.apiserver)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Egress {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl Eq for Egress {}

/// Splits `host[:port]`, `[v6]:port` or a bare IPv6 address.
fn split_host_port(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    if entry.is_empty() || entry.contains('/') || entry.contains('@') {
        return None;
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((host.to_ascii_lowercase(), port));
    }
    if entry.parse::<IpAddr>().is_ok() {
        return Some((entry.to_ascii_lowercase(), None));
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            Some((host.to_ascii_lowercase(), Some(port.parse().ok()?)))
        }
        Some(_) => None,
        None => Some((entry.to_ascii_lowercase(), None)),
    }
}

/// What makes `ip` refused unless listed, if anything.
fn special(ip: IpAddr, apiserver: &[IpAddr]) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if apiserver.contains(&ip) {
        return Some("the Kubernetes API server");
    }
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            // Addresses that carry an IPv4 address to another network: what they reach is
            // that address. NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
            let embedded = match s {
                [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some((hi, lo)),
                [0x2002, hi, lo, ..] => Some((hi, lo)),
                _ => None,
            };
            if let Some((hi, lo)) = embedded {
                let v4 = std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
                return special(IpAddr::V4(v4), apiserver).or(Some("an address embedding IPv4"));
            }
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if v6.is_unicast_link_local() {
                Some("a link-local address (cloud metadata)")
            } else if METADATA_V6.contains(&s) {
                Some("a cloud metadata address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

/// Cloud metadata services over IPv6 (AWS's, in the unique-local range where IPv6
/// clusters also put their Services, so the range itself stays allowed).
const METADATA_V6: [[u16; 8]; 1] = [[0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]];

/// Cloud metadata services outside the link-local range.
const METADATA_V4: [[u8; 4]; 2] = [
    [100, 100, 100, 200], // Alibaba Cloud
    [168, 63, 129, 16],   // Azure WireServer
];

fn special_v4(v4: std::net::Ipv4Addr) -> Option<&'static str> {
    let o = v4.octets();
    if v4.is_loopback() {
        Some("a loopback address")
    } else if v4.is_link_local() {
        Some("a link-local address (cloud metadata)")
    } else if v4.is_unspecified() || v4.is_broadcast() || o[0] == 0 {
        Some("an unspecified address")
    } else if v4.is_multicast() {
        Some("a multicast address")
    } else if METADATA_V4.contains(&o) {
        Some("a cloud metadata address")
    } else {
        None
    }
}

/// The port a URL's scheme implies when it names none.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        "postgres" | "postgresql" => Some(5432),
        "redis" | "rediss" => Some(6379),
        _ => None,
    }
}

impl Egress {
    /// The policy for `entries` (each `host` or `host:port`), with `apiserver` the API
    /// server's addresses.
    ///
    /// # Errors
    /// [`EgressError::BadEntry`] for the first entry that does not parse.
    pub fn new(entries: &[String], apiserver: Vec<IpAddr>) -> Result<Self, EgressError> {
        let allowed = entries
            .iter()
            .flat_map(|e| e.split(','))
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                split_host_port(e)
                    .map(|(host, port)| Allowed { host, port })
                    .ok_or_else(|| EgressError::BadEntry(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inner = Arc::new(Inner { allowed, apiserver });
        let resolver = Arc::new(Fenced(inner.clone()));
        let build = |agent: &str| {
            reqwest::Client::builder()
                .user_agent(format!("{agent}/{}", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .dns_resolver(resolver.clone())
                .build()
                .map_err(|e| e.to_string())
        };
        Ok(Egress {
            http: build("inrun"),
            plugin_http: build("inrun-plugin"),
            inner,
        })
    }

    /// The client for remote reconcilers and external HTTP calls: no redirects, no proxy,
    /// names resolved through the policy.
    ///
    /// # Errors
    /// [`EgressError::Client`] when it could not be built.
    pub fn http(&self) -> Result<reqwest::Client, EgressError> {
        self.http.clone().map_err(EgressError::Client)
    }

    /// The same for plugins granted `capabilities.http`.
    ///
    /// # Errors
    /// [`EgressError::Client`] when it could not be built.
    pub fn plugin_http(&self) -> Result<reqwest::Client, EgressError> {
        self.plugin_http.clone().map_err(EgressError::Client)
    }

    /// Checks `host`:`port` against the list, and a host that is an IP address against
    /// the refused addresses.
    ///
    /// # Errors
    /// [`EgressError::NotListed`] or [`EgressError::Special`].
    pub fn check(&self, host: &str, port: u16) -> Result<(), EgressError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let normal = bare.trim_end_matches('.').to_ascii_lowercase();
        let listed = self
            .inner
            .allowed
            .iter()
            .any(|a| a.host == normal && a.port.is_none_or(|p| p == port));
        if !listed {
            return Err(EgressError::NotListed {
                host: bare.to_string(),
                port,
            });
        }
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.inner.address(bare, ip)?;
        }
        Ok(())
    }

    /// Checks a plugin's `capabilities.http.hosts` entry (`host` or `host:port`; a host
    /// alone is granted on both default ports, 80 and 443).
    ///
    /// # Errors
    /// [`EgressError::BadEntry`] for an entry that does not parse, or what
    /// [`Egress::check`] finds.
    pub fn check_grant(&self, entry: &str) -> Result<(), EgressError> {
        let (host, port) =
            split_host_port(entry).ok_or_else(|| EgressError::BadEntry(entry.to_string()))?;
        match port {
            Some(port) => self.check(&host, port),
            None => self.check(&host, 80).and_then(|()| self.check(&host, 443)),
        }
    }

    /// Checks a URL's host and port (its scheme's port when it names none); returns the
    /// host, without IPv6 brackets.
    ///
    /// # Errors
    /// [`EgressError::BadUrl`], or what [`Egress::check`] finds.
    pub fn check_url(&self, url: &str) -> Result<String, EgressError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| EgressError::BadUrl(url.into()))?;
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| EgressError::BadUrl(url.into()))?;
        let port = parsed
            .port()
            .or_else(|| default_port(parsed.scheme()))
            .ok_or_else(|| EgressError::BadUrl(url.into()))?;
        self.check(host, port)?;
        Ok(host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string())
    }

    /// `host`:`port` checked against the list, then resolved once and every address
    /// checked: the address to connect to, so the client dials exactly what was checked
    /// (a second lookup could answer otherwise: DNS rebinding).
    ///
    /// # Errors
    /// What [`Egress::check`] finds, [`EgressError::Resolve`], or
    /// [`EgressError::Special`] for a refused address.
    pub async fn pin(&self, host: &str, port: u16) -> Result<IpAddr, EgressError> {
        self.check(host, port)?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(ip);
        }
        let found = resolve(bare).await?;
        for addr in &found {
            self.inner.address(bare, addr.ip())?;
        }
        found
            .first()
            .map(SocketAddr::ip)
            .ok_or_else(|| EgressError::Resolve {
                host: bare.to_string(),
                reason: "no address".into(),
            })
    }
}

impl Egress {
    /// `builder` made to resolve every name through the policy (refused addresses dropped,
    /// a name left with none fails) and to use no proxy from the environment: for clients
    /// built with options of their own (trusted roots, timeouts, redirects), such as plugin
    /// fetches. A host written as an address is not resolved at all, so the caller checks
    /// each URL it sends to, redirects included ([`Egress::check_url`]).
    pub fn fence(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        builder
            .no_proxy()
            .dns_resolver(Arc::new(Fenced(self.inner.clone())))
    }
}

impl Inner {
    /// Whether the list names `ip` itself (on any port: the port is checked with the host).
    fn lists_address(&self, ip: IpAddr) -> bool {
        let text = ip.to_string();
        self.allowed.iter().any(|a| a.host == text)
    }

    /// Whether `ip`, which `host` is or resolves to, may be connected to.
    fn address(&self, host: &str, ip: IpAddr) -> Result<(), EgressError> {
        match special(ip, &self.apiserver) {
            Some(what) if !self.lists_address(ip) => Err(EgressError::Special {
                host: host.to_string(),
                address: ip,
                what,
            }),
            _ => Ok(()),
        }
    }
}

async fn resolve(host: &str) -> Result<Vec<SocketAddr>, EgressError> {
    tokio::net::lookup_host((host, 0))
        .await
        .map(Iterator::collect)
        .map_err(|e| EgressError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })
}

/// A resolver that drops addresses the policy refuses; a name left with none fails.
struct Fenced(Arc<Inner>);

impl reqwest::dns::Resolve for Fenced {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let mut allowed = Vec::new();
            let mut refused = None;
            for addr in resolve(&host).await? {
                match policy.address(&host, addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(e) => refused = Some(e),
                }
            }
            match (allowed.is_empty(), refused) {
                (true, Some(e)) => Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(entries: &[&str]) -> Egress {
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_string()).collect();
        Egress::new(&entries, vec!["10.96.0.1".parse().expect("ip")]).expect("policy")
    }

    #[test]
    fn entries_parse_as_host_or_host_and_port() {
        assert_eq!(
            split_host_port("API.example:8443"),
            Some(("api.example".into(), Some(8443)))
        );
        assert_eq!(
            split_host_port("api.example"),
            Some(("api.example".into(), None))
        );
        assert_eq!(split_host_port("[::1]:80"), Some(("::1".into(), Some(80))));
        assert_eq!(split_host_port("fe80::1"), Some(("fe80::1".into(), None)));
        for bad in ["", "http://x", "x:", "x:99999", "a@b", "[::1]x", "a:b:c"] {
            assert_eq!(split_host_port(bad), None, "{bad:?}");
        }
        assert!(matches!(
            Egress::new(&["ok.example, http://x".into()], vec![]),
            Err(EgressError::BadEntry(e)) if e.contains("http://x")
        ));
    }

    #[test]
    fn only_listed_hosts_and_ports_pass() {
        let e = egress(&["api.example:443", "metrics.example"]);
        assert!(e.check_url("https://api.example/v1").is_ok());
        assert!(e.check_url("https://API.example.:443/v1").is_ok());
        assert!(e.check_url("http://metrics.example:9090/api").is_ok());
        assert!(matches!(
            e.check_url("http://api.example/v1"),
            Err(EgressError::NotListed { port: 80, .. })
        ));
        assert!(matches!(
            e.check_url("https://evil.example/"),
            Err(EgressError::NotListed { .. })
        ));
        assert!(matches!(e.check_url("no url"), Err(EgressError::BadUrl(_))));
        assert!(egress(&[]).check_url("https://api.example/").is_err());
        // A plugin grant of a host alone needs both default ports.
        assert!(e.check_grant("metrics.example").is_ok());
        assert!(e.check_grant("api.example:443").is_ok());
        assert!(matches!(
            e.check_grant("api.example"),
            Err(EgressError::NotListed { port: 80, .. })
        ));
        assert!(egress(&["[::1]:8080"]).check_grant("[::1]:8080").is_ok());
        assert!(matches!(
            e.check_grant("a:b:c"),
            Err(EgressError::BadEntry(_))
        ));
    }

    #[test]
    fn loopback_link_local_and_the_api_server_are_refused_unless_listed_as_addresses() {
        let e = egress(&["169.254.169.254", "127.0.0.1:9000", "10.96.0.1:443"]);
        assert!(
            e.check_url("http://169.254.169.254/latest/meta-data")
                .is_ok()
        );
        assert!(e.check_url("http://127.0.0.1:9000/").is_ok());
        assert!(e.check_url("https://10.96.0.1/").is_ok());
        let strict = egress(&["metadata.example", "localhost"]);
        for (ip, what) in [
            ("169.254.169.254", "link-local"),
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.96.0.1", "API server"),
            ("fd00:ec2::254", "metadata"),
            ("100.100.100.200", "metadata"),
            ("168.63.129.16", "metadata"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
            ("64:ff9b::a60:1", "API server"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
        ] {
            let err = strict
                .inner
                .address("metadata.example", ip.parse().expect("ip"));
            assert!(
                matches!(&err, Err(EgressError::Special { what: w, .. }) if w.contains(what)),
                "{ip}: {err:?}"
            );
        }
        assert!(
            strict
                .inner
                .address("x", "93.184.216.34".parse().expect("ip"))
                .is_ok()
        );
        // In-cluster services live in private ranges: a listed name may resolve there.
        for ip in ["10.1.2.3", "192.168.1.5", "2001:db8::5", "fd00:10:96::a"] {
            assert!(
                strict.inner.address("x", ip.parse().expect("ip")).is_ok(),
                "{ip}"
            );
        }
    }

    #[tokio::test]
    async fn a_pinned_address_is_the_checked_one_and_an_unlisted_host_is_never_resolved() {
        let e = egress(&["db.example:5432", "127.0.0.1"]);
        assert_eq!(
            e.pin("127.0.0.1", 6379).await.expect("a listed address"),
            "127.0.0.1".parse::<IpAddr>().expect("ip")
        );
        // Refused before any lookup: a name that cannot resolve is told as unlisted.
        assert!(matches!(
            e.pin("unresolvable.invalid", 5432).await,
            Err(EgressError::NotListed { .. })
        ));
        assert!(matches!(
            e.pin("db.example", 5433).await,
            Err(EgressError::NotListed { .. })
        ));
    }

    #[tokio::test]
    async fn a_listed_name_that_resolves_to_loopback_is_refused_at_connection_time() {
        let e = egress(&["localhost:5432"]);
        assert!(e.check_url("postgres://u@localhost:5432/db").is_ok());
        let err = e
            .pin("localhost", 5432)
            .await
            .expect_err("localhost is loopback");
        assert!(matches!(err, EgressError::Special { .. }), "{err}");
        // The HTTP client resolves through the policy as well.
        let call = e
            .http()
            .expect("client")
            .get("http://localhost:5432/")
            .send()
            .await;
        let message = inrun_contract::errors::chain(&call.expect_err("refused"));
        assert!(message.contains("loopback"), "{message}");
    }
}
