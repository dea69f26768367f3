//! What a plugin may reach beyond its sandbox: the kinds it may read from the cluster and
//! the hosts it may call over HTTP. Nothing is granted by default; the rules here decide
//! each call, and a refusal is an error value the guest sees, never a trap.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

/// Where a cluster read looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Objects of a namespaced kind in this namespace.
    Namespace(&'a str),
    /// Objects of a namespaced kind in every namespace (only `list`).
    AllNamespaces,
    /// Objects of a cluster-scoped kind.
    Cluster,
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Namespace(ns) => write!(f, "namespace {ns}"),
            Scope::AllNamespaces => f.write_str("every namespace"),
            Scope::Cluster => f.write_str("the cluster scope"),
        }
    }
}

/// Reads Kubernetes objects for plugins; the host implements it on its watch cache, and
/// offline (`inrun render`) with a reader that refuses everything.
///
/// Errors are messages for the guest: they say what went wrong without host internals.
#[async_trait]
pub trait ClusterReader: Send + Sync {
    /// The object `name` of `kind` in `api_version` within `scope` (never
    /// [`Scope::AllNamespaces`]), or `None` when it does not exist.
    ///
    /// # Errors
    /// The kind is unknown, its scope is not `scope`'s, or the cache cannot be filled.
    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        name: &str,
    ) -> Result<Option<Value>, String>;

    /// Every object of `kind` in `api_version` within `scope` whose labels have every
    /// `(key, value)` pair of `labels`.
    ///
    /// # Errors
    /// As [`ClusterReader::get`].
    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        labels: &[(String, String)],
    ) -> Result<Vec<Value>, String>;
}

/// A reader for when there is no cluster: every call fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCluster;

const NO_CLUSTER: &str = "no cluster: cluster reads are unavailable in render";

#[async_trait]
impl ClusterReader for NoCluster {
    async fn get(
        &self,
        _api_version: &str,
        _kind: &str,
        _scope: Scope<'_>,
        _name: &str,
    ) -> Result<Option<Value>, String> {
        Err(NO_CLUSTER.into())
    }

    async fn list(
        &self,
        _api_version: &str,
        _kind: &str,
        _scope: Scope<'_>,
        _labels: &[(String, String)],
    ) -> Result<Vec<Value>, String> {
        Err(NO_CLUSTER.into())
    }
}

/// The namespaces a read grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// The CR's own namespace, plus these.
    Own(Vec<String>),
    /// Every namespace.
    Any,
    /// None: the kind is cluster-scoped.
    Cluster,
}

/// One kind a plugin may get and list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadGrant {
    /// `v1` or `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Where.
    pub namespaces: Namespaces,
}

/// Cluster reads: the kinds granted and the reader that serves them.
#[derive(Clone)]
pub struct ClusterGrant {
    /// The kinds, in Blueprint order.
    pub reads: Arc<[ReadGrant]>,
    /// Where objects come from.
    pub reader: Arc<dyn ClusterReader>,
}

/// Outbound HTTP: the hosts granted, and the bounds on each request.
#[derive(Clone)]
pub struct HttpGrant {
    /// `host` or `host:port` entries; a host alone allows the URL scheme's default port.
    pub hosts: Arc<[String]>,
    /// Time for one request, response body included (the call's deadline also applies).
    pub timeout: Duration,
    /// Largest response body accepted, in bytes.
    pub max_response_bytes: usize,
    /// The client: it must not follow redirects (see [`http_client`]).
    pub client: reqwest::Client,
    /// Canned answers (`inrun render --http-fixture`, `inrun test`): when set, a request
    /// the grant allows is answered from here and never sent.
    pub canned: Option<Arc<dyn CannedHttp>>,
}

/// Answers plugin HTTP requests without a network, for testing plugins offline. It is
/// asked only for requests the plugin's grant allows.
pub trait CannedHttp: Send + Sync {
    /// The answer to `method` (upper case) `url`, given as the guest wrote it and as the
    /// host parsed it (`normalized`, e.g. with a `/` path added).
    ///
    /// # Errors
    /// A message for the guest, e.g. that no answer is canned for this request.
    fn respond(&self, method: &str, url: &str, normalized: &str) -> Result<CannedReply, String>;
}

/// A canned HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CannedReply {
    /// The status code.
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Reads keys of Secrets for packages (`credentials`); the host implements it as the
/// identity the Blueprint acts as.
///
/// Errors are messages for the guest, never the value.
#[async_trait]
pub trait SecretReader: Send + Sync {
    /// The value of `key` in the Secret `name` in `namespace`, as text.
    ///
    /// # Errors
    /// A message naming the Secret and key (never the value): missing, refused, not text,
    /// the read failed.
    async fn key(&self, namespace: &str, name: &str, key: &str) -> Result<String, String>;
}

/// A package's credentials: the Secrets (by name, in the CR's namespace) and the keys of
/// each it may read, and who reads them.
#[derive(Clone)]
pub struct CredentialGrant {
    /// Secret name and the keys granted of it, in Blueprint order.
    pub secrets: Arc<[(String, Vec<String>)]>,
    /// Who reads them.
    pub reader: Arc<dyn SecretReader>,
}

impl CredentialGrant {
    /// Whether `key` of the Secret `name` is granted.
    pub fn allows(&self, name: &str, key: &str) -> bool {
        self.secrets
            .iter()
            .any(|(n, keys)| n == name && keys.iter().any(|k| k == key))
    }
}

/// Everything one plugin reference may use beyond its sandbox. Cheap to clone.
///
/// # Guarantees
/// `Grants::default()` grants nothing: every `cluster`, `http` and `credentials` call is
/// refused.
#[derive(Clone, Default)]
pub struct Grants {
    /// Cluster reads, if any.
    pub cluster: Option<ClusterGrant>,
    /// Outbound HTTP, if any.
    pub http: Option<HttpGrant>,
    /// Keys of Secrets a package may read, if any.
    pub credentials: Option<CredentialGrant>,
}

impl fmt::Debug for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grants")
            .field("read", &self.cluster.as_ref().map(|c| &c.reads))
            .field("http", &self.http.as_ref().map(|h| &h.hosts))
            .field(
                "credentials",
                &self.credentials.as_ref().map(|c| &c.secrets),
            )
            .finish()
    }
}

/// A client for plugin HTTP: rustls, no redirects (a redirect could lead to a host the
/// grant does not list), no proxy from the environment.
///
/// # Errors
/// reqwest cannot build the TLS backend.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("inrun-plugin/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Grants {
    /// Where a read of `kind` with the guest's `namespace` argument looks, when granted.
    ///
    /// `cr_namespace` is the CR's namespace (`None` for a cluster-scoped CR). `listing`
    /// allows `"*"` for every namespace.
    ///
    /// # Errors
    /// A message for the guest, naming the plugin, the kind and what was not granted.
    pub(super) fn read_scope<'a>(
        &self,
        plugin: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&'a str>,
        cr_namespace: Option<&'a str>,
        listing: bool,
    ) -> Result<Scope<'a>, String> {
        let what = format!("{kind} ({api_version})");
        let Some(grant) = self.cluster.as_ref().and_then(|c| {
            c.reads
                .iter()
                .find(|r| r.api_version == api_version && r.kind == kind)
        }) else {
            return Err(format!(
                "reading {what} is not granted to plugin {plugin}: it is not in capabilities.cluster.read"
            ));
        };
        let refuse = |ns: &str| {
            Err(format!(
                "reading {what} in namespace {ns} is not granted to plugin {plugin}: add it to the grant's namespaces"
            ))
        };
        match (&grant.namespaces, namespace) {
            (Namespaces::Cluster, None) => Ok(Scope::Cluster),
            (Namespaces::Cluster, Some(ns)) => Err(format!(
                "{what} is granted to plugin {plugin} as cluster-scoped, so it takes no namespace (got {ns:?})"
            )),
            (Namespaces::Any, Some("*")) if listing => Ok(Scope::AllNamespaces),
            (Namespaces::Own(_), Some("*")) if listing => refuse("*"),
            (_, Some("*")) => Err(format!(
                "reading {what}: \"*\" (every namespace) works only for list"
            )),
            (_, None) => match cr_namespace {
                Some(own) => Ok(Scope::Namespace(own)),
                None => Err(format!(
                    "reading {what}: the CR is cluster-scoped, so name a namespace"
                )),
            },
            (Namespaces::Any, Some(ns)) => Ok(Scope::Namespace(ns)),
            (Namespaces::Own(listed), Some(ns)) => {
                if cr_namespace == Some(ns) || listed.iter().any(|l| l == ns) {
                    Ok(Scope::Namespace(ns))
                } else {
                    refuse(ns)
                }
            }
        }
    }
}

/// Parses an equality label selector: `a=b,c==d`. Empty text selects everything.
///
/// # Errors
/// A message naming the first term that is not `key=value` (set-based terms such as
/// `a in (b)`, `!a` or `a!=b` are refused).
pub fn parse_label_selector(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let refuse = || {
            Err(format!(
                "label selector term {term:?}: only equality terms (key=value) are supported"
            ))
        };
        if term.contains("!=") || term.starts_with('!') {
            return refuse();
        }
        let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) else {
            return refuse();
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || key.contains(char::is_whitespace) || value.contains([' ', '(', ')']) {
            return refuse();
        }
        out.push((key.to_string(), value.to_string()));
    }
    Ok(out)
}

/// Whether `url`'s host and port are listed in `hosts`. Hosts compare case-insensitively;
/// an entry without a port allows only the scheme's default port.
pub(super) fn host_allowed(hosts: &[String], url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let Some(port) = url.port_or_known_default() else {
        return false;
    };
    let default_port = url.port().is_none_or(|p| Some(p) == default_port(url));
    hosts.iter().any(|entry| {
        let entry = entry.trim().to_ascii_lowercase();
        match split_host_port(&entry) {
            (h, Some(p)) => h == host && p == port,
            (h, None) => h == host && default_port,
        }
    })
}

fn default_port(url: &reqwest::Url) -> Option<u16> {
    match url.scheme() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// `host:port` → (`host`, port); IPv6 addresses keep their brackets (`[::1]:80`).
fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if entry.starts_with('[') {
        return match entry.split_once("]:") {
            Some((h, p)) => (&entry[..=h.len()], p.parse().ok()),
            None => (entry, None),
        };
    }
    match entry.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

/// Checks a URL a plugin wants to fetch: http or https, no user info, a listed host.
///
/// # Errors
/// A message for the guest naming the plugin and what is wrong.
pub(super) fn check_url(
    plugin: &str,
    grant: Option<&HttpGrant>,
    url: &str,
) -> Result<reqwest::Url, String> {
    let Some(grant) = grant else {
        return Err(format!(
            "outbound HTTP is not granted to plugin {plugin}: it has no capabilities.http"
        ));
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("URL {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "URL {url:?}: only http and https are allowed, not {}",
            parsed.scheme()
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "URL {url:?}: a user name or password in the URL is not allowed; send a header instead"
        ));
    }
    if !host_allowed(&grant.hosts, &parsed) {
        let host = parsed.host_str().unwrap_or_default();
        let port = parsed.port_or_known_default().unwrap_or_default();
        return Err(format!(
            "HTTP to {host}:{port} is not granted to plugin {plugin}: it is not in capabilities.http.hosts"
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(namespaces: Namespaces) -> Grants {
        Grants {
            credentials: None,
            cluster: Some(ClusterGrant {
                reads: vec![ReadGrant {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespaces,
                }]
                .into(),
                reader: Arc::new(NoCluster),
            }),
            http: None,
        }
    }

    fn scope<'a>(
        g: &Grants,
        kind: &str,
        ns: Option<&'a str>,
        listing: bool,
    ) -> Result<Scope<'a>, String> {
        g.read_scope("p", "v1", kind, ns, Some("team-a"), listing)
    }

    fn http(hosts: &[&str]) -> HttpGrant {
        HttpGrant {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            timeout: Duration::from_secs(5),
            max_response_bytes: 1 << 20,
            client: reqwest::Client::new(),
            canned: None,
        }
    }

    fn url_ok(hosts: &[&str], url: &str) -> Result<(), String> {
        check_url("p", Some(&http(hosts)), url).map(drop)
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let none = Grants::default();
        let err = scope(&none, "ConfigMap", None, false).unwrap_err();
        assert!(
            err.contains("ConfigMap (v1) is not granted to plugin p"),
            "{err}"
        );
        let err = check_url("p", none.http.as_ref(), "http://127.0.0.1/").unwrap_err();
        assert!(err.contains("not granted to plugin p"), "{err}");
    }

    #[test]
    fn a_kind_not_listed_is_refused_by_name() {
        let g = reads(Namespaces::Own(vec![]));
        let err = scope(&g, "Secret", None, false).unwrap_err();
        assert!(
            err.starts_with("reading Secret (v1) is not granted"),
            "{err}"
        );
        let err = g
            .read_scope("p", "v2", "ConfigMap", None, Some("a"), false)
            .unwrap_err();
        assert!(err.contains("ConfigMap (v2)"), "{err}");
    }

    #[test]
    fn reads_default_to_the_crs_own_namespace_only() {
        let g = reads(Namespaces::Own(vec![]));
        assert_eq!(
            scope(&g, "ConfigMap", None, false),
            Ok(Scope::Namespace("team-a"))
        );
        assert_eq!(
            scope(&g, "ConfigMap", Some("team-a"), false),
            Ok(Scope::Namespace("team-a"))
        );
        let err = scope(&g, "ConfigMap", Some("other"), false).unwrap_err();
        assert!(err.contains("in namespace other is not granted"), "{err}");
        assert!(scope(&g, "ConfigMap", Some("*"), true).is_err());
    }

    #[test]
    fn listed_namespaces_are_added_to_the_crs_own() {
        let g = reads(Namespaces::Own(vec!["shared".into()]));
        assert_eq!(
            scope(&g, "ConfigMap", Some("shared"), false),
            Ok(Scope::Namespace("shared"))
        );
        assert_eq!(
            scope(&g, "ConfigMap", None, true),
            Ok(Scope::Namespace("team-a"))
        );
        assert!(scope(&g, "ConfigMap", Some("kube-system"), false).is_err());
    }

    #[test]
    fn any_namespace_allows_listing_them_all_but_get_needs_one() {
        let g = reads(Namespaces::Any);
        assert_eq!(
            scope(&g, "ConfigMap", Some("kube-system"), false),
            Ok(Scope::Namespace("kube-system"))
        );
        assert_eq!(
            scope(&g, "ConfigMap", Some("*"), true),
            Ok(Scope::AllNamespaces)
        );
        let err = scope(&g, "ConfigMap", Some("*"), false).unwrap_err();
        assert!(err.contains("only for list"), "{err}");
    }

    #[test]
    fn cluster_scoped_grants_take_no_namespace() {
        let g = reads(Namespaces::Cluster);
        assert_eq!(scope(&g, "ConfigMap", None, false), Ok(Scope::Cluster));
        assert!(scope(&g, "ConfigMap", Some("team-a"), false).is_err());
    }

    #[test]
    fn a_cluster_scoped_cr_must_name_the_namespace_it_reads() {
        let g = reads(Namespaces::Own(vec!["shared".into()]));
        assert!(
            g.read_scope("p", "v1", "ConfigMap", None, None, false)
                .is_err()
        );
        assert_eq!(
            g.read_scope("p", "v1", "ConfigMap", Some("shared"), None, false),
            Ok(Scope::Namespace("shared"))
        );
    }

    #[test]
    fn hosts_match_exactly_after_parsing_and_ignore_case() {
        assert!(url_ok(&["127.0.0.1:8080"], "http://127.0.0.1:8080/x?y=1").is_ok());
        assert!(url_ok(&["API.example.com"], "https://api.EXAMPLE.com/v1").is_ok());
        assert!(url_ok(&["api.example.com"], "http://api.example.com:80/").is_ok());
        assert!(url_ok(&["[::1]:9000"], "http://[::1]:9000/").is_ok());
        let err = url_ok(&["127.0.0.1:8080"], "http://127.0.0.1:8081/").unwrap_err();
        assert!(
            err.contains("HTTP to 127.0.0.1:8081 is not granted to plugin p"),
            "{err}"
        );
        assert!(url_ok(&["api.example.com"], "https://api.example.com:8443/").is_err());
        assert!(url_ok(&["api.example.com"], "https://api.example.com.evil.test/").is_err());
        assert!(url_ok(&["example.com"], "https://sub.example.com/").is_err());
    }

    #[test]
    fn urls_with_user_info_or_other_schemes_are_refused() {
        let hosts = ["127.0.0.1:8080", "evil.test"];
        let err = url_ok(&hosts, "http://127.0.0.1:8080@evil.test/").unwrap_err();
        assert!(err.contains("user name or password"), "{err}");
        assert!(url_ok(&hosts, "http://user@127.0.0.1:8080/").is_err());
        let err = url_ok(&hosts, "file:///etc/passwd").unwrap_err();
        assert!(err.contains("only http and https"), "{err}");
        assert!(url_ok(&hosts, "not a url").is_err());
    }

    #[test]
    fn label_selectors_take_equality_terms_only() {
        assert_eq!(
            parse_label_selector("app=web, tier==front"),
            Ok(vec![
                ("app".into(), "web".into()),
                ("tier".into(), "front".into())
            ])
        );
        assert_eq!(parse_label_selector(""), Ok(vec![]));
        for bad in ["app!=web", "!app", "app", "app in (a,b)", "=x"] {
            let err = parse_label_selector(bad).unwrap_err();
            assert!(err.contains("only equality terms"), "{bad}: {err}");
        }
    }
}
