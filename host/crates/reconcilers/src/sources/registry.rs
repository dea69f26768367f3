//! Reading a component from an OCI registry with bounds on everything a registry (which a
//! tenant may run) can send: manifests, token replies and error bodies are read only so
//! far, layers to [`MAX_MODULE_SIZE`], every request and the whole pull under a time
//! limit. Environment proxies are never used; a manifest or token request follows no
//! redirect; a layer may be redirected (registries hand blobs to a CDN), over https only
//! unless the registry itself is insecure, three times at most.

use std::time::Duration;

use oci_client::Reference;
use oci_client::errors::{OciDistributionError, OciEnvelope};
use oci_client::secrets::RegistryAuth;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};

use super::https::CONNECT_TIMEOUT;
use super::{MAX_MODULE_SIZE, SourceError, SourceOptions};

/// The most bytes of a manifest read (registries themselves refuse larger ones).
pub(super) const MANIFEST_MAX: usize = 4 << 20;
/// The most bytes of a token reply read.
const TOKEN_MAX: usize = 64 << 10;
/// The most bytes of an error reply read, and shown.
const ERROR_EXCERPT: usize = 200;
/// How long one read may wait for bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one whole operation (a pull, a version check) may take.
pub(super) const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// Redirects a layer download may follow.
const LAYER_REDIRECTS: usize = 3;

/// A reader of one repository of one registry, as one identity.
pub(super) struct Registry {
    http: reqwest::Client,
    /// `https://host[:port]` (or `http://` for an insecure registry).
    base: String,
    repository: String,
    credentials: Option<(String, String)>,
    /// How requests are signed in, once the registry has said.
    signed: Option<HeaderValue>,
    insecure: bool,
}

impl Registry {
    /// A reader of `reference`'s repository, signing in with `auth` when asked to.
    pub(super) fn new(
        options: &SourceOptions,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Self, SourceError> {
        let host = reference.resolve_registry().to_string();
        let insecure = options.insecure_registries.contains(&host);
        let scheme = if insecure { "http" } else { "https" };
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .https_only(!insecure)
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                // A layer's path ends `/blobs/sha256:…`; no repository or tag holds a `:`.
                let from_layer = attempt
                    .previous()
                    .first()
                    .is_some_and(|first| first.path().contains("/blobs/sha256:"));
                let downgrade = attempt.url().scheme() != "https" && !insecure;
                if !from_layer || downgrade || attempt.previous().len() > LAYER_REDIRECTS {
                    attempt.stop()
                } else {
                    attempt.follow()
                }
            }));
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
            base: format!("{scheme}://{host}"),
            repository: reference.repository().to_string(),
            credentials,
            signed: None,
            insecure,
        })
    }

    /// The manifest `reference` names (a tag or a digest), read to [`MANIFEST_MAX`].
    pub(super) async fn manifest(
        &mut self,
        reference: &str,
        accept: &str,
    ) -> Result<Vec<u8>, OciDistributionError> {
        let url = self.url("manifests", reference);
        let response = self.send(Method::GET, &url, accept).await?;
        read_capped(response, MANIFEST_MAX, Past::Refused, &url).await
    }

    /// The digest of the manifest `reference` names: the registry's
    /// `Docker-Content-Digest` on a HEAD, else the sha256 of the manifest itself.
    pub(super) async fn manifest_digest(
        &mut self,
        reference: &str,
        accept: &str,
    ) -> Result<String, OciDistributionError> {
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
    pub(super) async fn layer(&mut self, digest: &str) -> Result<Layer, OciDistributionError> {
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
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&url, &e))? {
            if (bytes.len() + chunk.len()) as u64 > MAX_MODULE_SIZE {
                return Ok(Layer::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Layer::Bytes(bytes))
    }

    fn url(&self, what: &str, reference: &str) -> String {
        format!("{}/v2/{}/{what}/{reference}", self.base, self.repository)
    }

    /// Sends a request, signing in once when the registry asks (Basic, or a Bearer token
    /// from the realm it names); anything but success is an error with an excerpt of the
    /// reply.
    async fn send(
        &mut self,
        method: Method,
        url: &str,
        accept: &str,
    ) -> Result<Response, OciDistributionError> {
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
                    let token = self.token(url, &realm, service.as_deref(), &scope).await?;
                    Some(header(&format!("Bearer {token}"), url)?)
                }
                Some(Challenge::Basic) => match &self.credentials {
                    Some((user, password)) => Some(header(&basic(user, password), url)?),
                    None => return Err(unauthorized(url)),
                },
                None => return Err(unauthorized(url)),
            };
            response = self.request(method, url, accept).await?;
        }
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(unauthorized(url));
        }
        Err(failure(response, url).await)
    }

    async fn request(
        &self,
        method: Method,
        url: &str,
        accept: &str,
    ) -> Result<Response, OciDistributionError> {
        let mut request = self.http.request(method, url).header(ACCEPT, accept);
        if let Some(signed) = &self.signed {
            request = request.header(AUTHORIZATION, signed.clone());
        }
        request.send().await.map_err(|e| transport(url, &e))
    }

    /// A Bearer token from `realm`, asked with the credentials (if any). The realm is the
    /// registry's choice: it must be https (or the insecure registry's own scheme).
    async fn token(
        &self,
        url: &str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, OciDistributionError> {
        let realm_url = self.realm_url(realm, service, scope)?;
        let mut request = self.http.get(realm_url.as_str());
        if let Some((user, password)) = &self.credentials {
            request = request.header(AUTHORIZATION, header(&basic(user, password), url)?);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport(realm_url.as_str(), &e))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(unauthorized(url));
        }
        if !status.is_success() {
            return Err(failure(response, realm_url.as_str()).await);
        }
        let body = read_capped(response, TOKEN_MAX, Past::Refused, realm_url.as_str()).await?;
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
    ) -> Result<reqwest::Url, OciDistributionError> {
        let mut realm_url = reqwest::Url::parse(realm).map_err(|_| {
            OciDistributionError::GenericError(Some(format!(
                "the registry's token realm {:?} is not a URL",
                excerpt(realm)
            )))
        })?;
        let registry_host = reqwest::Url::parse(&self.base)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string));
        if realm_url.scheme() != "https"
            && !(self.insecure && realm_url.host_str().map(str::to_string) == registry_host)
        {
            return Err(OciDistributionError::GenericError(Some(format!(
                "the registry's token realm {realm_url} is not https"
            ))));
        }
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

fn transport(url: &str, error: &reqwest::Error) -> OciDistributionError {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_redirect() {
        "was redirected where it may not go"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    OciDistributionError::GenericError(Some(format!("request to {url} {what}")))
}

/// The error a failed reply makes: the registry's error envelope if it sent one, else its
/// status and the first [`ERROR_EXCERPT`] bytes of its body.
async fn failure(response: Response, url: &str) -> OciDistributionError {
    let code = response.status().as_u16();
    let body = read_capped(response, ERROR_EXCERPT, Past::Cut, url)
        .await
        .unwrap_or_default();
    if let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(&body)
        && !envelope.errors.is_empty()
    {
        return OciDistributionError::RegistryError {
            envelope,
            url: url.to_string(),
        };
    }
    OciDistributionError::ServerError {
        code,
        url: url.to_string(),
        message: excerpt(&String::from_utf8_lossy(&body)).to_string(),
    }
}

fn excerpt(text: &str) -> &str {
    let mut end = text.len().min(ERROR_EXCERPT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a reply larger than the cap becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Past {
    /// An error, read no further.
    Refused,
    /// Cut at the cap (an excerpt of an error page).
    Cut,
}

/// The body of `response`, at most `max` bytes; past that, as `past` says, without reading
/// on.
async fn read_capped(
    mut response: Response,
    max: usize,
    past: Past,
    url: &str,
) -> Result<Vec<u8>, OciDistributionError> {
    let cut = past == Past::Cut;
    let too_large = || {
        OciDistributionError::GenericError(Some(format!(
            "the reply from {url} is larger than {max} bytes"
        )))
    };
    if !cut && response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(url, &e))? {
        if body.len() + chunk.len() > max {
            if cut {
                body.extend_from_slice(&chunk[..max - body.len()]);
                return Ok(body);
            }
            return Err(too_large());
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
    fn excerpts_cut_on_a_character_boundary() {
        let text = "é".repeat(300);
        let cut = excerpt(&text);
        assert!(cut.len() <= ERROR_EXCERPT);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
