//! Components as OCI artifacts: one `application/wasm` layer under an
//! `application/vnd.wasm.config.v0+json` config (the Wasm OCI artifact layout), pulled and
//! pushed with the ORAS project's client. Pulls (what a tenant's registry answers) go
//! through Inrun's own bounded reader ([`registry`]).

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::json;

use super::dockerconfig::Credentials;
use super::https::CONNECT_TIMEOUT;
use super::registry::{self, Failure, Layer, Registry};
use super::{
    Fetched, Location, MAX_MODULE_SIZE, PullSecret, SourceError, SourceOptions, fence, sha256,
};
use crate::egress::Egress;
use inrun_blueprint::location::{LocationError, check_digest};
use inrun_wasm::Module;

/// The config blob's media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The one layer's media type: the component's bytes, as they are.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// What the config blob tells about a component besides its layer; empty lists are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComponentMeta {
    /// Exported interfaces and functions.
    pub exports: Vec<String>,
    /// Imported interfaces.
    pub imports: Vec<String>,
    /// The WIT world it targets, e.g. `inrun:reconciler/reconciler@0.1.0`.
    pub target: Option<String>,
}

/// Credentials for one pull and where they came from, for messages.
pub(super) struct Auth {
    auth: RegistryAuth,
    from: String,
}

impl Auth {
    pub(super) fn anonymous() -> Self {
        Auth {
            auth: RegistryAuth::Anonymous,
            from: "anonymous, no pull secret".into(),
        }
    }

    pub(super) fn from_secret(credentials: Credentials, secret: &PullSecret) -> Self {
        Auth {
            auth: RegistryAuth::Basic(credentials.username, credentials.password),
            from: format!(
                "credentials from secret {}/{}",
                secret.namespace, secret.name
            ),
        }
    }

    pub(super) fn given(credentials: Option<&Credentials>) -> Self {
        match credentials {
            Some(c) => Auth {
                auth: RegistryAuth::Basic(c.username.clone(), c.password.clone()),
                from: format!("as user {}", c.username),
            },
            None => Auth {
                auth: RegistryAuth::Anonymous,
                from: "anonymous".into(),
            },
        }
    }
}

/// The registry host (and port) of `registry/repo:tag`.
pub(super) fn registry_of(reference: &str) -> String {
    reference.split('/').next().unwrap_or_default().to_string()
}

/// A client for one operation: the client keeps the first credentials it sees per
/// registry, so sharing one across pull secrets would mix them up.
fn client(options: &SourceOptions, location: &str) -> Result<Client, SourceError> {
    let config = ClientConfig {
        protocol: ClientProtocol::HttpsExcept(options.insecure_registries.clone()),
        extra_root_certificates: options
            .extra_roots
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(std::time::Duration::from_secs(60)),
        ..ClientConfig::default()
    };
    Client::try_from(config).map_err(|source| SourceError::Registry {
        action: "setting up a registry client for",
        location: location.to_string(),
        source: Box::new(source),
    })
}

/// What a failed registry request becomes, for a pull: an egress refusal, or as
/// [`oci_error`].
fn pull_error(
    action: &'static str,
    location: &str,
    reference: &str,
    auth: &Auth,
) -> impl FnOnce(Failure) -> SourceError {
    let oci = oci_error(action, location, reference, auth);
    let location = location.to_string();
    move |failure| match failure {
        Failure::Registry(source) => oci(source),
        Failure::Egress { what, source } => SourceError::Egress {
            location,
            what,
            source,
        },
    }
}

/// What a registry's error becomes: a refusal of the credentials, or a failed `action`.
fn oci_error(
    action: &'static str,
    location: &str,
    reference: &str,
    auth: &Auth,
) -> impl FnOnce(OciDistributionError) -> SourceError {
    let location = location.to_string();
    let registry = registry_of(reference);
    let credentials = auth.from.clone();
    move |source| {
        let refused = match &source {
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => true,
            OciDistributionError::ServerError { code, .. } => *code == 401 || *code == 403,
            OciDistributionError::RegistryError { envelope, .. } => envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
            _ => false,
        };
        if refused {
            SourceError::Unauthorized {
                location,
                registry,
                credentials,
                source: Box::new(source),
            }
        } else {
            SourceError::Registry {
                action,
                location,
                source: Box::new(source),
            }
        }
    }
}

fn parse_reference(location: &str, reference: &str) -> Result<Reference, SourceError> {
    reference.parse().map_err(|_| {
        SourceError::from(LocationError::BadLocation {
            location: location.to_string(),
            reason: "is not a valid OCI reference".into(),
        })
    })
}

/// The reference to ask the registry for: the tag when there is one (a pin is then
/// compared with what the tag names), else the digest.
fn target(location: &str, reference: &str) -> Result<Reference, SourceError> {
    let r = parse_reference(location, reference)?;
    Ok(match r.tag() {
        Some(tag) if r.digest().is_some() => Reference::with_tag(
            r.registry().to_string(),
            r.repository().to_string(),
            tag.to_string(),
        ),
        _ => r,
    })
}

/// What a pull asks for: an OCI image manifest, or Docker's.
fn manifest_accept() -> String {
    format!("{OCI_IMAGE_MEDIA_TYPE}, {IMAGE_MANIFEST_MEDIA_TYPE}")
}

/// Runs one registry operation under [`registry::OPERATION_TIMEOUT`] in all.
async fn in_time<T>(
    shown: &str,
    operation: impl std::future::Future<Output = Result<T, SourceError>>,
) -> Result<T, SourceError> {
    tokio::time::timeout(registry::OPERATION_TIMEOUT, operation)
        .await
        .unwrap_or_else(|_| {
            Err(SourceError::Registry {
                action: "reading",
                location: shown.to_string(),
                source: Box::new(OciDistributionError::GenericError(Some(format!(
                    "the registry took longer than {}s",
                    registry::OPERATION_TIMEOUT.as_secs()
                )))),
            })
        })
}

/// The URL the registry of `reference` is spoken to at ([`registry::base_url`]).
pub(super) fn registry_url(
    options: &SourceOptions,
    shown: &str,
    reference: &str,
) -> Result<reqwest::Url, SourceError> {
    let target = target(shown, reference)?;
    registry::base_url(options, &target).ok_or_else(|| {
        LocationError::BadLocation {
            location: shown.to_string(),
            reason: "names a registry that is not a host".into(),
        }
        .into()
    })
}

/// A reader of `reference`'s repository, and what to ask it for: the tag when there is one
/// (a pin is compared with what it names), else the digest. Under `egress`, the registry
/// is checked and resolved here, once, before anything is sent.
async fn open(
    options: &SourceOptions,
    shown: &str,
    reference: &str,
    auth: &Auth,
    egress: Option<&Egress>,
) -> Result<(Registry, String), SourceError> {
    let target = target(shown, reference)?;
    let base = registry_url(options, shown, reference)?;
    let pinned = match egress {
        Some(egress) => {
            Some(
                fence::pin(egress, &base)
                    .await
                    .map_err(|source| SourceError::Egress {
                        location: shown.to_string(),
                        what: "the registry",
                        source,
                    })?,
            )
        }
        None => None,
    };
    let registry = Registry::new(options, (base, pinned), &target, &auth.auth, egress)?;
    let asked = target
        .digest()
        .or(target.tag())
        .unwrap_or("latest")
        .to_string();
    Ok((registry, asked))
}

/// What one pull or version check is asked for and under which rules.
pub(super) struct Pull<'a> {
    /// The location, as written.
    pub location: &'a Location,
    /// Its OCI reference.
    pub reference: &'a str,
    /// How to sign in.
    pub auth: &'a Auth,
    /// The Blueprint's egress rules; `None`: the operator's own, unrestricted.
    pub egress: Option<&'a Egress>,
}

/// Pulls the manifest and its one `application/wasm` layer, checking the manifest against
/// `pin` and the layer against the manifest; every reply read only so far
/// ([`registry`]).
pub(super) async fn pull(
    options: &SourceOptions,
    asked: Pull<'_>,
    pin: Option<&str>,
) -> Result<Fetched, SourceError> {
    let Pull {
        location,
        reference,
        auth,
        egress,
    } = asked;
    let shown = location.to_string();
    in_time(&shown, async {
        let (mut registry, asked) = open(options, &shown, reference, auth, egress).await?;
        let body = registry
            .manifest(&asked, &manifest_accept())
            .await
            .map_err(pull_error(
                "pulling the manifest of",
                &shown,
                reference,
                auth,
            ))?;
        let version = sha256(&body);
        if let Some(pin) = pin
            && pin != version
        {
            return Err(SourceError::DigestMismatch {
                location: shown.clone(),
                expected: pin.to_string(),
                actual: version,
            });
        }
        // The parser's error is not kept: it quotes what it did not expect, and that is the
        // registry's text.
        let manifest: OciImageManifest =
            serde_json::from_slice(&body).map_err(|e| SourceError::UnreadableManifest {
                location: shown.clone(),
                line: e.line(),
                column: e.column(),
            })?;
        let layer = wasm_layer(&shown, &manifest)?;
        let bytes = match registry.layer(&layer.digest).await.map_err(pull_error(
            "pulling the layer of",
            &shown,
            reference,
            auth,
        ))? {
            Layer::Bytes(bytes) => bytes,
            Layer::TooLarge => {
                return Err(SourceError::TooLarge {
                    location: shown.clone(),
                    limit: MAX_MODULE_SIZE,
                });
            }
        };
        let module = Module::new(bytes);
        let actual = module.digest_ref();
        if actual != layer.digest {
            return Err(SourceError::CorruptLayer {
                location: shown.clone(),
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(Fetched { module, version })
    })
    .await
}

/// The one layer, if it is a Wasm component layer of an acceptable size.
fn wasm_layer<'m>(
    location: &str,
    manifest: &'m OciImageManifest,
) -> Result<&'m OciDescriptor, SourceError> {
    let [layer] = manifest.layers.as_slice() else {
        return Err(SourceError::LayerCount {
            location: location.to_string(),
            count: manifest.layers.len(),
        });
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(SourceError::NotWasm {
            location: location.to_string(),
            media_type: layer.media_type.clone(),
        });
    }
    if u64::try_from(layer.size).map_or(true, |n| n > MAX_MODULE_SIZE) {
        return Err(SourceError::TooLarge {
            location: location.to_string(),
            limit: MAX_MODULE_SIZE,
        });
    }
    check_digest(&layer.digest).map_err(|_| SourceError::NotADigest {
        location: location.to_string(),
        what: "the manifest's layer digest",
    })?;
    Ok(layer)
}

/// The digest of the manifest a tag names now, from a HEAD request (a capped GET when
/// the registry does not say).
pub(super) async fn manifest_digest(
    options: &SourceOptions,
    asked: Pull<'_>,
) -> Result<String, SourceError> {
    let Pull {
        location,
        reference,
        auth,
        egress,
    } = asked;
    let shown = location.to_string();
    in_time(&shown, async {
        let (mut registry, asked) = open(options, &shown, reference, auth, egress).await?;
        let digest = registry
            .manifest_digest(&asked, &manifest_accept())
            .await
            .map_err(pull_error(
                "asking for the manifest digest of",
                &shown,
                reference,
                auth,
            ))?;
        check_digest(&digest).map_err(|_| SourceError::NotADigest {
            location: shown.clone(),
            what: "the registry's manifest digest",
        })?;
        Ok(digest)
    })
    .await
}

/// `reference` as an `oci://` location, whether or not it was written with the scheme.
pub fn with_scheme(reference: &str) -> String {
    if reference.starts_with("oci://") {
        reference.to_string()
    } else {
        format!("oci://{reference}")
    }
}

/// Publishes `component` at `reference` (`oci://registry/repo:tag`, the scheme optional) as
/// a Wasm OCI artifact and returns the manifest digest, `sha256:<hex>`.
///
/// The config's `created` is the Unix epoch, so the same component and metadata always
/// give the same digest.
///
/// # Errors
/// [`SourceError::NotAComponent`] for bytes that are not a component;
/// [`SourceError::Location`] for a reference without a tag; [`SourceError::Unauthorized`]
/// or [`SourceError::Registry`] when the registry refuses.
pub async fn push(
    component: &[u8],
    reference: &str,
    meta: &ComponentMeta,
    credentials: Option<&Credentials>,
    options: &SourceOptions,
) -> Result<String, SourceError> {
    let shown = with_scheme(reference);
    let location = Location::parse(&shown, None, std::path::Path::new(""))?;
    let reference = tag_of(&location, &shown)?;
    if !is_component(component) {
        return Err(SourceError::NotAComponent);
    }
    let options = SourceOptions {
        extra_roots: super::split_pem(&options.extra_roots),
        ..options.clone()
    };
    let auth = Auth::given(credentials);
    let client = client(&options, &shown)?;
    let target = parse_reference(&shown, reference)?;
    let failed = |action| oci_error(action, &shown, reference, &auth);
    let artifact = Artifact::of(component, meta, &shown)?;

    client
        .auth(&target, &auth.auth, RegistryOperation::Push)
        .await
        .map_err(failed("signing in to push"))?;
    client
        .push_blob(&target, component.to_vec(), &artifact.layer_digest)
        .await
        .map_err(failed("pushing the component layer to"))?;
    client
        .push_blob(&target, artifact.config, &artifact.config_digest)
        .await
        .map_err(failed("pushing the config to"))?;
    client
        .push_manifest_raw(
            &target,
            artifact.manifest,
            reqwest::header::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(failed("pushing the manifest to"))?;
    Ok(artifact.manifest_digest)
}

/// The reference a push goes to: an `oci://` one, naming a tag, not a digest.
///
/// # Errors
/// [`LocationError::BadLocation`] for another scheme or a digest.
fn tag_of<'a>(location: &'a Location, shown: &str) -> Result<&'a str, SourceError> {
    let Location::Oci { reference, digest } = location else {
        return Err(LocationError::BadLocation {
            location: shown.to_string(),
            reason: "must be an oci:// reference".into(),
        }
        .into());
    };
    if digest.is_some() {
        return Err(LocationError::BadLocation {
            location: shown.to_string(),
            reason: "names a digest; push to a :tag".into(),
        }
        .into());
    }
    Ok(reference)
}

/// A Wasm OCI artifact's config and manifest, serialized, with the digests the registry
/// checks them by.
struct Artifact {
    layer_digest: String,
    config: Vec<u8>,
    config_digest: String,
    manifest: Vec<u8>,
    manifest_digest: String,
}

impl Artifact {
    /// The artifact for `component`: its config (created at the Unix epoch, so the same
    /// component and metadata give the same digest) and a manifest of one layer.
    ///
    /// # Errors
    /// [`SourceError::BadManifest`] when the config or manifest cannot be serialized.
    fn of(component: &[u8], meta: &ComponentMeta, shown: &str) -> Result<Self, SourceError> {
        let bad = |source| SourceError::BadManifest {
            location: shown.to_string(),
            source,
        };
        let layer_digest = sha256(component);
        let mut config = json!({
            "created": "1970-01-01T00:00:00Z",
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        });
        if meta != &ComponentMeta::default() {
            config["component"] = json!({
                "exports": meta.exports,
                "imports": meta.imports,
                "target": meta.target,
            });
        }
        let config = serde_json::to_vec(&config).map_err(bad)?;
        let config_digest = sha256(&config);
        let manifest = OciImageManifest {
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
            config: descriptor(WASM_CONFIG_MEDIA_TYPE, &config_digest, config.len()),
            layers: vec![descriptor(
                WASM_LAYER_MEDIA_TYPE,
                &layer_digest,
                component.len(),
            )],
            ..OciImageManifest::default()
        };
        let manifest = serde_json::to_vec(&manifest).map_err(bad)?;
        Ok(Artifact {
            manifest_digest: sha256(&manifest),
            layer_digest,
            config,
            config_digest,
            manifest,
        })
    }
}

fn descriptor(media_type: &str, digest: &str, size: usize) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.to_string(),
        digest: digest.to_string(),
        size: i64::try_from(size).unwrap_or(i64::MAX),
        ..OciDescriptor::default()
    }
}

/// A component binary: the Wasm magic, then the component-model version and layer
/// (`0d 00 01 00`); a core module has `01 00 00 00` there.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_told_from_core_modules() {
        assert!(is_component(b"\0asm\x0d\x00\x01\x00rest"));
        assert!(!is_component(b"\0asm\x01\x00\x00\x00"));
        assert!(!is_component(b"\0asm"));
    }

    #[test]
    fn only_a_single_wasm_layer_is_accepted() {
        let d = sha256(b"x");
        let mut m = OciImageManifest {
            layers: vec![descriptor("application/vnd.oci.image.layer.v1.tar", &d, 1)],
            ..OciImageManifest::default()
        };
        let err = wasm_layer("oci://r.example.com/a:1", &m).expect_err("tar layer");
        assert!(
            matches!(&err, SourceError::NotWasm { media_type, .. } if media_type == "application/vnd.oci.image.layer.v1.tar"),
            "{err:?}"
        );
        // The registry's text is kept for the caller, never put in the message.
        assert!(!err.to_string().contains("tar"), "{err}");
        m.layers = vec![descriptor(WASM_LAYER_MEDIA_TYPE, &d, 1); 2];
        assert!(matches!(
            wasm_layer("x", &m),
            Err(SourceError::LayerCount { count: 2, .. })
        ));
        m.layers = vec![descriptor(
            WASM_LAYER_MEDIA_TYPE,
            &d,
            (MAX_MODULE_SIZE + 1) as usize,
        )];
        assert!(matches!(
            wasm_layer("x", &m),
            Err(SourceError::TooLarge { .. })
        ));
        m.layers = vec![descriptor(
            WASM_LAYER_MEDIA_TYPE,
            "sha256:a registry's page",
            1,
        )];
        let err = wasm_layer("x", &m).expect_err("not a digest");
        assert!(!err.to_string().contains("page"), "{err}");
        m.layers = vec![descriptor(WASM_LAYER_MEDIA_TYPE, &d, 1)];
        assert!(wasm_layer("x", &m).is_ok());
    }

    #[test]
    fn a_tag_with_a_pin_is_asked_for_by_tag() {
        let d = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let t = target("x", &format!("127.0.0.1:5000/a/b:1@{d}")).expect("target");
        assert_eq!((t.tag(), t.digest()), (Some("1"), None));
        let t = target("x", &format!("127.0.0.1:5000/a/b@{d}")).expect("target");
        assert_eq!(t.digest(), Some(d));
    }
}
