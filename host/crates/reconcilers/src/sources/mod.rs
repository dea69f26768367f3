//! Where plugin components come from: local files, `https://` URLs pinned by digest, and
//! OCI registries (with credentials from a `kubernetes.io/dockerconfigjson` Secret).
//!
//! [`Location::parse`] turns a Blueprint `location` and `digest` into a [`Location`];
//! [`Sources::fetch`] downloads it (checking the digest when there is one) and
//! [`Sources::version`] tells cheaply whether it changed. [`push`] publishes a component
//! to a registry in the layout the pull side accepts: see `docs/plugins.md`.
//!
//! A tenant's fetches go where its other calls may ([`Sources::with_egress`]): a registry
//! or https host the rules allow, dialled at the address checked for it, and a redirect
//! or token realm only to a host they allow. No error holds text a server sent.

mod dockerconfig;
mod fence;
mod files;
mod https;
mod oci;
mod registry;

use std::fmt;
use std::sync::Arc;

use inrun_wasm::Module;
use sha2::{Digest, Sha256};

use crate::egress::{Egress, EgressError};
use crate::secrets::{SecretError, Secrets};

pub use dockerconfig::Credentials;
pub use inrun_blueprint::location::{Location, LocationError};
pub use oci::{ComponentMeta, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, push, with_scheme};

/// Makes ring the process's TLS provider, once, before the first pull or push: the OCI
/// client (reqwest underneath) is built without a provider of its own, and ring is the one
/// the rest of the host uses. `inrun` calls it at start; a program that embeds [`Sources`]
/// or [`push`] calls it first. A provider already installed is kept.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The largest component fetched; a server sending more is cut off, not buffered.
pub const MAX_MODULE_SIZE: u64 = 64 << 20;

/// The Secret key holding registry credentials (type `kubernetes.io/dockerconfigjson`).
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Why a location could not be parsed or fetched. Messages never hold a secret value.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The location (or its digest) does not parse.
    #[error(transparent)]
    Location(#[from] LocationError),
    /// The fetched bytes (or, for OCI, the manifest) do not have the pinned digest.
    #[error("{location}: expected digest {expected}, got {actual}")]
    DigestMismatch {
        /// The location.
        location: String,
        /// The pin.
        expected: String,
        /// What was fetched.
        actual: String,
    },
    /// A registry served a layer whose bytes do not match its manifest.
    #[error(
        "{location}: the component layer hashes to {actual}, not {expected} as its manifest says"
    )]
    CorruptLayer {
        /// The location.
        location: String,
        /// The digest in the manifest.
        expected: String,
        /// The digest of the bytes.
        actual: String,
    },
    /// More than [`MAX_MODULE_SIZE`] bytes.
    #[error("{location} is larger than {limit} bytes")]
    TooLarge {
        /// The location.
        location: String,
        /// The cap.
        limit: u64,
    },
    /// A local file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An `https://` download failed.
    #[error("downloading {location}")]
    Http {
        /// The location.
        location: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The registry refused the credentials (or their absence).
    #[error("registry {registry} refused access to {location} ({credentials})")]
    Unauthorized {
        /// The location.
        location: String,
        /// The registry host.
        registry: String,
        /// Which credentials were used: `anonymous`, or where they came from.
        credentials: String,
        /// The registry's answer.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// Talking to the registry failed.
    #[error("{action} {location}")]
    Registry {
        /// What was being done (`pulling`, `pushing`, ...).
        action: &'static str,
        /// The location.
        location: String,
        /// Why.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// Where the fetch would go (the source's host, a registry's redirect or token realm)
    /// is outside the Blueprint's egress rules; nothing was sent there.
    #[error("{location}: {what} is outside the egress rules")]
    Egress {
        /// The location.
        location: String,
        /// Where: `the host`, `the registry`, `a redirect`, `the registry's token realm`.
        what: &'static str,
        /// The rule it broke.
        #[source]
        source: EgressError,
    },
    /// The registry's manifest does not parse as an OCI image manifest.
    #[error(
        "{location}: the registry's manifest is not an OCI image manifest (at line {line}, column {column})"
    )]
    UnreadableManifest {
        /// The location.
        location: String,
        /// Where parsing stopped: its line,
        line: usize,
        /// and column.
        column: usize,
    },
    /// A digest the registry sent is not `sha256:<64 hex>`.
    #[error("{location}: {what} is not sha256: followed by 64 lowercase hex digits")]
    NotADigest {
        /// The location.
        location: String,
        /// Which digest.
        what: &'static str,
    },
    /// A manifest to push could not be written.
    #[error("{location}: the registry's manifest is not an OCI image manifest")]
    BadManifest {
        /// The location.
        location: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The artifact does not hold exactly one layer.
    #[error(
        "{location}: the artifact has {count} layers; a Wasm component artifact has exactly one"
    )]
    LayerCount {
        /// The location.
        location: String,
        /// How many it has.
        count: usize,
    },
    /// The layer is not `application/wasm`.
    #[error(
        "{location}: the layer's media type is not {WASM_LAYER_MEDIA_TYPE}; publish components with `inrun plugin push`"
    )]
    NotWasm {
        /// The location.
        location: String,
        /// The layer's media type (the registry's text: not in the message, which may
        /// reach status).
        media_type: String,
    },
    /// Reading the pull secret failed.
    #[error("reading the pull secret for {location}")]
    PullSecret {
        /// The location.
        location: String,
        /// Why.
        #[source]
        source: Box<SecretError>,
    },
    /// The pull secret's `.dockerconfigjson` is not usable.
    #[error("pull secret {namespace}/{name}: {problem}")]
    BadPullSecret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong (never a value from it).
        problem: String,
    },
    /// `inrun plugin push` was given something that is not a Wasm component.
    #[error("the file to push is not a Wasm component (a core module or other bytes)")]
    NotAComponent,
    /// A CA certificate in [`SourceOptions::extra_roots`] is not PEM.
    #[error("extra CA certificate {index} is not a PEM certificate")]
    BadRoot {
        /// Its position in the list.
        index: usize,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP client could not be built.
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
}

/// A `kubernetes.io/dockerconfigjson` Secret holding registry credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PullSecret {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl From<&inrun_blueprint::PullSecretRef> for PullSecret {
    fn from(r: &inrun_blueprint::PullSecretRef) -> Self {
        PullSecret {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// A component's bytes and the identity of what was fetched.
#[derive(Clone)]
pub struct Fetched {
    /// The component, with the sha256 its fetch computed to name or verify it.
    pub module: Module,
    /// `sha256:<hex>`: of the bytes for files and https; the manifest digest for OCI.
    pub version: String,
}

impl fmt::Debug for Fetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("size", &self.module.len())
            .field("version", &self.version)
            .finish()
    }
}

/// How to reach https servers and registries.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// Registries (`host:port`) spoken to over plain http.
    pub insecure_registries: Vec<String>,
    /// PEM CA certificates trusted for https and registries, besides the system's.
    pub extra_roots: Vec<Vec<u8>>,
}

/// How a fetch signs in to a registry.
#[derive(Clone, Copy)]
enum Access<'a> {
    /// With the credentials in this pull secret, if any.
    Secret(Option<&'a PullSecret>),
    /// With these credentials, if any.
    Given(Option<&'a Credentials>),
}

/// Fetches plugin components. Cheap to clone.
#[derive(Clone)]
pub struct Sources {
    http: reqwest::Client,
    secrets: Arc<dyn Secrets>,
    options: Arc<SourceOptions>,
    files: Arc<files::FileDigests>,
    /// Where fetches may go; `None`: anywhere (the operator's own Blueprint, the CLI).
    egress: Option<Egress>,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sources")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// Reads pull secrets through `secrets`; trusts `options.extra_roots` besides the
    /// system's CAs.
    ///
    /// # Errors
    /// [`SourceError::BadRoot`] for a CA that is not PEM; [`SourceError::Client`] when
    /// the HTTP client cannot be built.
    pub fn new(secrets: Arc<dyn Secrets>, options: SourceOptions) -> Result<Self, SourceError> {
        let options = SourceOptions {
            extra_roots: split_pem(&options.extra_roots),
            ..options
        };
        let http = https::client(&options)?;
        Ok(Sources {
            http,
            secrets,
            options: Arc::new(options),
            files: Arc::default(),
            egress: None,
        })
    }

    /// The same sources held to `egress`, the rules of the Blueprint whose plugins they
    /// fetch (the operator's `--tenant-egress` for a Blueprint resource), as its other
    /// calls are: a registry or https host off the list, or at a refused address, is never
    /// connected to, and neither is a redirect or token realm the list does not allow.
    /// `None`: anywhere.
    #[must_use]
    pub fn with_egress(&self, egress: Option<Egress>) -> Self {
        Sources {
            egress,
            ..self.clone()
        }
    }

    /// Whether `location`'s host and port are within the egress rules, judged on the URL
    /// the fetch would connect to, before anything is resolved or sent. A fetch checks
    /// again, on what the host resolves to.
    ///
    /// # Errors
    /// [`SourceError::Egress`] naming the rule; [`SourceError::Location`] for a registry
    /// that is not a host.
    pub fn allowed(&self, location: &Location) -> Result<(), SourceError> {
        let Some(egress) = &self.egress else {
            return Ok(());
        };
        let shown = location.to_string();
        let (url, what) = match location {
            Location::File(_) => return Ok(()),
            Location::Https { url, .. } => (url.clone(), "the host"),
            Location::Oci { reference, .. } => (
                oci::registry_url(&self.options, &shown, reference)?.to_string(),
                "the registry",
            ),
        };
        egress
            .check_url(&url)
            .map(drop)
            .map_err(|source| SourceError::Egress {
                location: shown,
                what,
                source,
            })
    }

    /// The same sources reading pull secrets through `secrets` (a tenant's identity).
    #[must_use]
    pub fn with_secrets(&self, secrets: Arc<dyn Secrets>) -> Self {
        Sources {
            secrets,
            ..self.clone()
        }
    }

    /// Fetches the bytes (checking the digest when pinned: a mismatch is
    /// [`SourceError::DigestMismatch`] naming expected and actual).
    ///
    /// # Errors
    /// [`SourceError`] naming the location: unreadable file, failed download, refused
    /// credentials, a layer that is not `application/wasm`, more than
    /// [`MAX_MODULE_SIZE`] bytes, or a digest mismatch.
    pub async fn fetch(
        &self,
        location: &Location,
        pull: Option<&PullSecret>,
    ) -> Result<Fetched, SourceError> {
        self.fetch_by(location, Access::Secret(pull)).await
    }

    /// Like [`Sources::fetch`], signing in to a registry with `credentials` given directly
    /// (as on the command line) instead of a pull secret; `None` is anonymous.
    ///
    /// # Errors
    /// As [`Sources::fetch`].
    pub async fn fetch_as(
        &self,
        location: &Location,
        credentials: Option<&Credentials>,
    ) -> Result<Fetched, SourceError> {
        self.fetch_by(location, Access::Given(credentials)).await
    }

    async fn fetch_by(
        &self,
        location: &Location,
        access: Access<'_>,
    ) -> Result<Fetched, SourceError> {
        match location {
            Location::File(path) => {
                let (bytes, before) = self.files.read(path).await?;
                let module = Module::new(bytes);
                let version = module.digest_ref();
                self.files.read_as(path, before, &version).await;
                Ok(Fetched { module, version })
            }
            Location::Https { url, digest } => {
                let module = Module::new(self.download(url).await?);
                let version = module.digest_ref();
                if &version != digest {
                    return Err(SourceError::DigestMismatch {
                        location: location.to_string(),
                        expected: digest.clone(),
                        actual: version,
                    });
                }
                Ok(Fetched { module, version })
            }
            Location::Oci { reference, digest } => {
                let auth = self.auth(location, reference, access).await?;
                let asked = oci::Pull {
                    location,
                    reference,
                    auth: &auth,
                    egress: self.egress.as_ref(),
                };
                oci::pull(&self.options, asked, digest.as_deref()).await
            }
        }
    }

    /// An `https://` location's bytes: through the shared client, or under egress rules
    /// through one that dials the host at the address checked for it.
    async fn download(&self, url: &str) -> Result<Vec<u8>, SourceError> {
        match &self.egress {
            None => https::download(&self.http, url.to_string(), url).await,
            Some(egress) => {
                let (client, parsed) = https::fenced(&self.options, egress, url).await?;
                https::download(&client, parsed, url).await
            }
        }
    }

    /// Cheaply tells the current version without downloading the module where possible:
    /// sha256 of a file's content (hashed again only when its metadata changed); for an OCI tag, the manifest digest (a HEAD request);
    /// for pinned locations the pin.
    ///
    /// # Errors
    /// [`SourceError`] when the file cannot be read or the registry not asked.
    pub async fn version(
        &self,
        location: &Location,
        pull: Option<&PullSecret>,
    ) -> Result<String, SourceError> {
        if let Some(pin) = location.digest() {
            return Ok(pin.to_string());
        }
        match location {
            Location::File(path) => self.files.version(path).await,
            Location::Oci { reference, .. } => {
                let auth = self.auth(location, reference, Access::Secret(pull)).await?;
                let asked = oci::Pull {
                    location,
                    reference,
                    auth: &auth,
                    egress: self.egress.as_ref(),
                };
                oci::manifest_digest(&self.options, asked).await
            }
            // Pinned, handled above.
            Location::Https { digest, .. } => Ok(digest.clone()),
        }
    }

    async fn auth(
        &self,
        location: &Location,
        reference: &str,
        access: Access<'_>,
    ) -> Result<oci::Auth, SourceError> {
        let secret = match access {
            Access::Given(credentials) => return Ok(oci::Auth::given(credentials)),
            Access::Secret(None) => return Ok(oci::Auth::anonymous()),
            Access::Secret(Some(secret)) => secret,
        };
        let text = self
            .secrets
            .get(&secret.namespace, &secret.name, DOCKER_CONFIG_KEY)
            .await
            .map_err(|source| SourceError::PullSecret {
                location: location.to_string(),
                source: Box::new(source),
            })?;
        let registry = oci::registry_of(reference);
        let credentials = dockerconfig::credentials_for(&text, &registry).map_err(|problem| {
            SourceError::BadPullSecret {
                namespace: secret.namespace.clone(),
                name: secret.name.clone(),
                problem,
            }
        })?;
        Ok(oci::Auth::from_secret(credentials, secret))
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Splits PEM bundles into one PEM text per certificate (the OCI client reads only the
/// first certificate of a bundle). Text that holds no certificate is kept as it is, so
/// building the client reports it.
fn split_pem(roots: &[Vec<u8>]) -> Vec<Vec<u8>> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    for root in roots {
        let text = String::from_utf8_lossy(root);
        let mut certs = Vec::new();
        let mut rest = text.as_ref();
        while let (Some(begin), Some(end)) =
            (rest.find("-----BEGIN CERTIFICATE-----"), rest.find(END))
        {
            if end < begin {
                rest = &rest[end + END.len()..];
                continue;
            }
            certs.push(format!("{}\n", &rest[begin..end + END.len()]).into_bytes());
            rest = &rest[end + END.len()..];
        }
        if certs.is_empty() {
            out.push(root.clone());
        } else {
            out.extend(certs);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_bundles_split_into_one_text_per_certificate() {
        let bundle = b"junk\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n".to_vec();
        let split = split_pem(&[bundle, b"not pem".to_vec()]);
        assert_eq!(split.len(), 3);
        assert!(String::from_utf8_lossy(&split[1]).contains("BBB"));
        assert_eq!(split[2], b"not pem");
    }

    #[test]
    fn sha256_is_prefixed_lowercase_hex() {
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
