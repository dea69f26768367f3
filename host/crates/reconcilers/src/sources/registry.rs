//! Reading a component from an OCI registry with bounds on everything a registry (which a
//! tenant may run) can send: manifests, token replies and error bodies are read only so
//! far, layers to [`MAX_MODULE_SIZE`], every request and the whole pull under a time
//! limit. Environment proxies are never used; a manifest or token request follows no
//! redirect; a layer may be redirected (registries hand blobs to a CDN), over https only
//! unless the registry itself is insecure, three times at most. Under a Blueprint's egress
//! rules the registry is dialled at the address checked for it, and a redirect or token
//! realm goes only to a host the rules allow ([`fence`]). No text of a reply reaches an
//! error: a registry the tenant names may answer with anything, another service's page
//! included.

use std::time::Duration;

use oci_client::Reference;
use oci_client::errors::{OciDistributionError, OciEnvelope, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};

use super::fence::{self, Pinned};
use super::https::CONNECT_TIMEOUT;
use super::{MAX_MODULE_SIZE, SourceError, SourceOptions};
use crate::egress::{Egress, EgressError};

/// The most bytes of a manifest read (registries themselves refuse larger ones).
pub(super) const MANIFEST_MAX: usize = 4 << 20;
/// The most bytes of a token reply read.
const TOKEN_MAX: usize = 64 << 10;
/// The most bytes of an error reply read, for the error codes in it (none of its text is
/// shown).
const ERROR_READ: usize = 4 << 10;
/// How long one read may wait for bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one whole operation (a pull, a version check) may take.
pub(super) const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// Redirects a layer download may follow.
const LAYER_REDIRECTS: usize = 3;

/// Why a request to a registry failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    /// The registry's answer (its status and error codes), or the request's transport.
    #[error(transparent)]
    Registry(#[from] OciDistributionError),
    /// The registry sent the request where the egress rules do not allow; nothing was sent
    /// there.
    #[error("{what} is outside the egress rules")]
    Egress {
        /// Where: a redirect, the token realm.
        what: &'static str,
        /// The rule it broke.
        #[source]
        source: EgressError,
    },
}

/// The URL a registry is spoken to at (`https://host[:port]/`, `http://` for a registry
/// in [`SourceOptions::insecure_registries`]), parsed once by the client's own parser:
/// what the egress rules check and the client dials. `None` for a registry that is not a
/// host.
pub(super) fn base_url(options: &SourceOptions, reference: &Reference) -> Option<reqwest::Url> {
    let host = reference.resolve_registry();
    let scheme = if options.insecure_registries.iter().any(|r| r == host) {
        "http"
    } else {
        "https"
    };
    let url = reqwest::Url::parse(&format!("{scheme}://{host}/")).ok()?;
    (url.path() == "/" && url.query().is_none() && url.username().is_empty()).then_some(url)
}

/// A reader of one repository of one registry, as one identity.
pub(super) struct Registry {
    http: reqwest::Client,
    /// [`base_url`].
    base: reqwest::Url,
    repository: String,
    credentials: Option<(String, String)>,
    /// How requests are signed in, once the registry has said.
    signed: Option<HeaderValue>,
    insecure: bool,
    /// The Blueprint's egress rules; `None`: the operator's own, unrestricted.
    egress: Option<Egress>,
}

impl Registry {
    /// A reader of `reference`'s repository at `base` ([`base_url`]), signing in with
    /// `auth` when asked to; under `egress`, dialling the registry at `pinned` (the
    /// address checked for it) and sending nothing where the rules do not allow.
    pub(super) fn new(
        options: &SourceOptions,
        (base, pinned): (reqwest::Url, Option<Pinned>),
        reference: &Reference,
        auth: &RegistryAuth,
        egress: Option<&Egress>,
    ) -> Result<Self, SourceError> {
        let insecure = base.scheme() == "http";
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .https_only(!insecure)
            .redirect(layer_redirects(insecure, egress.cloned()));
        if let (Some(egress), Some(pinned)) = (egress, &pinned) {
            builder = fence::client(builder, egress, pinned);
        }
        for (index, pem) in options.extra_roots.iter().enumerate() {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|source| SourceError::BadRoot { index, source })?;
            builder = builder.add_root_certificate(cert);
        }
        let credentials = match auth {
            RegistryAuth::Basic(user, password) => Some((user.clone(), password.clone())),
            _ => None,
        };
        Ok(Registry {
            http: builder.build().map_err(SourceError::Client)?,
            base,
            repository: reference.repository().to_string(),
            credentials,
            signed: None,
            insecure,
            egress: egress.cloned(),
        })
    }

    /// The manifest `reference` names (a tag or a digest), read to [`MANIFEST_MAX`].
    pub(super) async fn manifest(
        &mut self,
        reference: &str,
        accept: &str,
    ) -> Result<Vec<u8>, Failure> {
        let url = self.url("manifests", reference);
        let response = self.send(Method::GET, &url, accept).await?;
        read_capped(response, MANIFEST_MAX, Past::Refused, url.as_str()).await
    }

    /// The digest of the manifest `reference` names: the registry's
    /// `Docker-Content-Digest` on a HEAD, else the sha256 of the manifest itself.
    pub(super) async fn manifest_digest(
        &mut self,
        reference: &str,
        accept: &str,
    ) -> Result<String, Failure> {
        let url = self.url("manifests", reference);
        let response = self.send(Method::HEAD, &url, accept).await?;
        let told = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match told {
            Some(digest) => Ok(digest),
            None => Ok(super::sha256(&self.manifest(reference, accept).await?)),
        }
    }

    /// The layer `digest`, streamed to at most [`MAX_MODULE_SIZE`] bytes.
    pub(super) async fn layer(&mut self, digest: &str) -> Result<Layer, Failure> {
        let url = self.url("blobs", digest);
        let response = self.send(Method::GET, &url, "*/*").await?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_MODULE_SIZE)
        {
            return Ok(Layer::TooLarge);
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transport(url.as_str(), REDIRECT, &e))?
        {
            if (bytes.len() + chunk.len()) as u64 > MAX_MODULE_SIZE {
                return Ok(Layer::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Layer::Bytes(bytes))
    }

    /// `/v2/<repository>/<what>/<reference>` on the registry's [`base_url`]: the host is
    /// never taken from anything but the base.
    fn url(&self, what: &str, reference: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        url.set_path(&format!("/v2/{}/{what}/{reference}", self.repository));
        url
    }

    /// Sends a request, signing in once when the registry asks (Basic, or a Bearer token
    /// from the realm it names); anything but success is an error naming the status.
    async fn send(
        &mut self,
        method: Method,
        url: &reqwest::Url,
        accept: &str,
    ) -> Result<Response, Failure> {
        let mut response = self.request(method.clone(), url, accept).await?;
        if response.status() == StatusCode::UNAUTHORIZED && self.signed.is_none() {
            let challenge = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(Challenge::parse);
            self.signed = match challenge {
                Some(Challenge::Bearer {
                    realm,
                    service,
                    scope,
                }) => {
                    let scope =
                        scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                    let token = self
                        .token(url.as_str(), &realm, service.as_deref(), &scope)
                        .await?;
                    Some(header(&format!("Bearer {token}"), url.as_str())?)
                }
                Some(Challenge::Basic) => match &self.credentials {
                    Some((user, password)) => Some(header(&basic(user, password), url.as_str())?),
                    None => return Err(unauthorized(url.as_str()).into()),
                },
                None => return Err(unauthorized(url.as_str()).into()),
            };
            response = self.request(method, url, accept).await?;
        }
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(unauthorized(url.as_str()).into());
        }
        Err(failure(response, url.as_str()).await)
    }

    async fn request(
        &self,
        method: Method,
        url: &reqwest::Url,
        accept: &str,
    ) -> Result<Response, Failure> {
        let mut request = self
            .http
            .request(method, url.clone())
            .header(ACCEPT, accept);
        if let Some(signed) = &self.signed {
            request = request.header(AUTHORIZATION, signed.clone());
        }
        request
            .send()
            .await
            .map_err(|e| transport(url.as_str(), REDIRECT, &e))
    }

    /// A Bearer token from `realm`, asked with the credentials (if any). The realm is the
    /// registry's choice: it must be https (or the insecure registry's own scheme) and,
    /// under egress rules, a host they allow. Messages name only the realm's host: the
    /// rest of it is the registry's text.
    async fn token(
        &self,
        url: &str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, Failure> {
        let realm_url = self.realm_url(realm, service, scope)?;
        let shown = format!("the token realm at {}", host_of(&realm_url));
        let mut request = self.http.get(realm_url);
        if let Some((user, password)) = &self.credentials {
            request = request.header(AUTHORIZATION, header(&basic(user, password), url)?);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport(&shown, REALM, &e))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(unauthorized(url).into());
        }
        if !status.is_success() {
            return Err(failure(response, &shown).await);
        }
        let body = read_capped(response, TOKEN_MAX, Past::Refused, &shown).await?;
        let reply: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            OciDistributionError::GenericError(Some(
                "the registry's token reply is not JSON".into(),
            ))
        })?;
        ["token", "access_token"]
            .iter()
            .find_map(|k| reply.get(k).and_then(|t| t.as_str()))
            .map(str::to_string)
            .ok_or_else(|| {
                OciDistributionError::GenericError(Some(
                    "the registry's token reply holds no token".into(),
                ))
                .into()
            })
    }

    /// The token request's URL: the realm, with the service and scope asked for.
    /// Credentials go to the realm: over https, or in the clear only to the insecure
    /// registry's own host.
    fn realm_url(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<reqwest::Url, Failure> {
        let mut realm_url = reqwest::Url::parse(realm).map_err(|_| {
            OciDistributionError::GenericError(Some(
                "the registry's token realm is not a URL".into(),
            ))
        })?;
        if realm_url.scheme() != "https"
            && !(self.insecure && realm_url.host_str() == self.base.host_str())
        {
            return Err(OciDistributionError::GenericError(Some(format!(
                "the registry's token realm at {} is not https",
                host_of(&realm_url)
            )))
            .into());
        }
        fence::check(self.egress.as_ref(), &realm_url).map_err(|source| Failure::Egress {
            what: REALM,
            source,
        })?;
        {
            let mut query = realm_url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        Ok(realm_url)
    }
}

/// A layer's redirects: only from a layer's own URL, three at most, never from https to
/// http unless the registry is insecure, and under `egress` only to a host it allows.
fn layer_redirects(insecure: bool, egress: Option<Egress>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        // A layer's path ends `/blobs/sha256:…`; no repository or tag holds a `:`.
        let from_layer = attempt
            .previous()
            .first()
            .is_some_and(|first| first.path().contains("/blobs/sha256:"));
        let downgrade = attempt.url().scheme() != "https" && !insecure;
        if !from_layer || downgrade || attempt.previous().len() > LAYER_REDIRECTS {
            return attempt.stop();
        }
        match fence::check(egress.as_ref(), attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    })
}

/// `scheme://host[:port]` of a URL the registry chose: the rest of it is the registry's
/// text.
fn host_of(url: &reqwest::Url) -> String {
    match url.port() {
        Some(port) => format!(
            "{}://{}:{port}",
            url.scheme(),
            url.host_str().unwrap_or_default()
        ),
        None => format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default()),
    }
}

/// What [`Failure::Egress`] names for a request the registry redirected.
const REDIRECT: &str = "a redirect";
/// What [`Failure::Egress`] names for the token request.
const REALM: &str = "the registry's token realm";

/// A layer as read.
pub(super) enum Layer {
    Bytes(Vec<u8>),
    TooLarge,
}

/// What a registry's `WWW-Authenticate` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// `Bearer realm="…",service="…",scope="…"` or `Basic realm="…"`; anything else (or a
    /// Bearer challenge without a realm) is `None` of them: treated as Basic.
    fn parse(header: &str) -> Challenge {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Challenge::Basic;
        }
        let mut realm = None;
        let mut service = None;
        let mut scope = None;
        for (key, value) in params(rest) {
            match key.to_ascii_lowercase().as_str() {
                "realm" => realm = Some(value),
                "service" => service = Some(value),
                "scope" => scope = Some(value),
                _ => {}
            }
        }
        match realm {
            Some(realm) => Challenge::Bearer {
                realm,
                service,
                scope,
            },
            None => Challenge::Basic,
        }
    }
}

/// `key="value",key=value` pairs; commas inside quotes stay in the value.
fn params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (quoted[..end].to_string(), &quoted[end + 1..]),
                None => (quoted.to_string(), ""),
            }
        } else {
            match after.find(',') {
                Some(end) => (after[..end].trim().to_string(), &after[end..]),
                None => (after.trim().to_string(), ""),
            }
        };
        out.push((key, value));
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    out
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn header(value: &str, url: &str) -> Result<HeaderValue, OciDistributionError> {
    HeaderValue::from_str(value).map_err(|_| {
        OciDistributionError::GenericError(Some(format!(
            "credentials for {url} cannot be sent in a header"
        )))
    })
}

fn unauthorized(url: &str) -> OciDistributionError {
    OciDistributionError::UnauthorizedError {
        url: url.to_string(),
    }
}

/// The error a request that got no answer makes: an egress refusal on its way (`what`:
/// where it was going), or how it failed, naming `url`.
fn transport(url: &str, what: &'static str, error: &reqwest::Error) -> Failure {
    if let Some(source) = fence::refusal(error) {
        return Failure::Egress { what, source };
    }
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_redirect() {
        "was redirected where it may not go"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    OciDistributionError::GenericError(Some(format!("request to {url} {what}"))).into()
}

/// The error a failed reply makes: its status and the error codes the distribution spec
/// defines, if the registry sent an error envelope; `UNAUTHORIZED` or `DENIED` is a
/// refusal of the credentials. Never text from the body: a server the tenant names may
/// answer with anything, another service's page included, and errors reach status.
async fn failure(response: Response, url: &str) -> Failure {
    let code = response.status().as_u16();
    let body = read_capped(response, ERROR_READ, Past::Cut, url)
        .await
        .unwrap_or_default();
    let codes: Vec<String> = serde_json::from_slice::<OciEnvelope>(&body)
        .map(|envelope| {
            envelope
                .errors
                .iter()
                .filter_map(|e| spec_code(&e.code))
                .collect()
        })
        .unwrap_or_default();
    if codes.iter().any(|c| c == "UNAUTHORIZED" || c == "DENIED") {
        return unauthorized(url).into();
    }
    let message = if codes.is_empty() {
        "no error code; the reply's body is not shown".to_string()
    } else {
        format!(
            "error codes {}; the reply's body is not shown",
            codes.join(", ")
        )
    };
    OciDistributionError::ServerError {
        code,
        url: url.to_string(),
        message,
    }
    .into()
}

/// The code's name, when it is one the distribution spec defines (a registry's own codes
/// are its text, not shown).
fn spec_code(code: &OciErrorCode) -> Option<String> {
    match code {
        OciErrorCode::Other(_) => None,
        known => serde_json::to_value(known)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string)),
    }
}

/// What a reply larger than the cap becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Past {
    /// An error, read no further.
    Refused,
    /// Cut at the cap (an error reply, read only for its error codes).
    Cut,
}

/// The body of `response`, at most `max` bytes; past that, as `past` says, without reading
/// on.
async fn read_capped(
    mut response: Response,
    max: usize,
    past: Past,
    url: &str,
) -> Result<Vec<u8>, Failure> {
    let cut = past == Past::Cut;
    let too_large = || {
        OciDistributionError::GenericError(Some(format!(
            "the reply from {url} is larger than {max} bytes"
        )))
    };
    if !cut && response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large().into());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| transport(url, REDIRECT, &e))?
    {
        if body.len() + chunk.len() > max {
            if cut {
                body.extend_from_slice(&chunk[..max - body.len()]);
                return Ok(body);
            }
            return Err(too_large().into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_as_registries_write_them() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#
            ),
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull,push".into()),
            }
        );
        assert_eq!(
            Challenge::parse(r#"bearer realm=https://auth.example/token, service=r"#),
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("r".into()),
                scope: None,
            }
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry""#),
            Challenge::Basic
        );
        // No realm: nowhere to ask for a token.
        assert_eq!(Challenge::parse("Bearer service=x"), Challenge::Basic);
        assert_eq!(Challenge::parse(""), Challenge::Basic);
    }

    #[test]
    fn only_the_specs_error_codes_are_named() {
        assert_eq!(
            spec_code(&OciErrorCode::ManifestUnknown).as_deref(),
            Some("MANIFEST_UNKNOWN")
        );
        assert_eq!(spec_code(&OciErrorCode::Other("a page".into())), None);
    }

    #[test]
    fn a_registry_is_spoken_to_at_its_host_alone() {
        let options = SourceOptions {
            insecure_registries: vec!["127.0.0.1:5000".into()],
            extra_roots: Vec::new(),
        };
        let at = |r: &str| base_url(&options, &r.parse().expect("reference")).map(String::from);
        assert_eq!(
            at("127.0.0.1:5000/a/b:1").as_deref(),
            Some("http://127.0.0.1:5000/")
        );
        assert_eq!(
            at("registry.example/a:1").as_deref(),
            Some("https://registry.example/")
        );
    }
}
