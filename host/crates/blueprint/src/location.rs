//! Where a plugin's bytes live, as a Blueprint writes it: a path, a pinned https:// URL or
//! an oci:// reference.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a plugin location (and its digest) could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// The location is not a path, an `https://` URL or an `oci://` reference.
    #[error("location {location:?} {reason}")]
    BadLocation {
        /// The location, as written.
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `https://` location without a digest.
    #[error(
        "{location} needs a digest (sha256:<64 hex digits>): an https:// location must be pinned"
    )]
    MissingDigest {
        /// The location.
        location: String,
    },
    /// A digest that is not `sha256:` and 64 lowercase hex digits.
    #[error("digest {digest:?} is not sha256: followed by 64 lowercase hex digits")]
    BadDigest {
        /// The digest, as written.
        digest: String,
    },
    /// A digest next to a local path.
    #[error("{location} is a file; a digest pins only https:// and oci:// locations")]
    DigestOnFile {
        /// The location.
        location: String,
    },
    /// An `@sha256:` reference and the `digest` field disagree.
    #[error("{location} names digest {in_reference} but the digest field says {field}")]
    ConflictingDigest {
        /// The location.
        location: String,
        /// The digest in the reference.
        in_reference: String,
        /// The digest field.
        field: String,
    },
}

/// A plugin `location` (and its `digest`), parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// A local file; a relative path is resolved against the Blueprint file's directory.
    File(PathBuf),
    /// An `https://` URL; the digest is required, so the bytes can never change unseen.
    Https {
        /// The URL, as written.
        url: String,
        /// `sha256:<hex>` of the component's bytes.
        digest: String,
    },
    /// An OCI artifact in a registry.
    Oci {
        /// `registry/repo:tag` or `registry/repo@sha256:...`, without `oci://`.
        reference: String,
        /// `sha256:<hex>` of the manifest: from the reference's `@sha256:...` or the
        /// Blueprint's `digest` field.
        digest: Option<String>,
    },
}

impl Location {
    /// Parses a Blueprint `location` plus its optional `digest` field; relative paths
    /// resolve against `base_dir`.
    ///
    /// # Errors
    /// [`LocationError::BadLocation`] for an unknown scheme, `http://`, a URL with credentials
    /// or an OCI reference without registry or tag; [`LocationError::MissingDigest`] for
    /// `https://` without a digest; [`LocationError::BadDigest`] for a malformed digest;
    /// [`LocationError::DigestOnFile`] for a digest on a path;
    /// [`LocationError::ConflictingDigest`] when an `@sha256:` reference and the digest field
    /// disagree.
    pub fn parse(
        location: &str,
        digest: Option<&str>,
        base_dir: &Path,
    ) -> Result<Location, LocationError> {
        let bad = |reason: &str| LocationError::BadLocation {
            location: location.to_string(),
            reason: reason.to_string(),
        };
        if location.trim().is_empty() {
            return Err(bad("is empty"));
        }
        if let Some(d) = digest {
            check_digest(d)?;
        }
        if let Some(reference) = location.strip_prefix("oci://") {
            return oci(location, reference, digest);
        }
        if location.starts_with("https://") {
            return https(location, digest);
        }
        if location.starts_with("http://") {
            return Err(bad(
                "uses plain http://; use https:// with a digest, or an oci:// reference",
            ));
        }
        if has_scheme(location) {
            return Err(bad("has an unknown scheme; use a path, https:// or oci://"));
        }
        if digest.is_some() {
            return Err(LocationError::DigestOnFile {
                location: location.to_string(),
            });
        }
        let path = Path::new(location);
        Ok(Location::File(if path.is_absolute() {
            path.to_path_buf()
        } else {
            base_dir.join(path)
        }))
    }

    /// True when the bytes can never change (https, oci@sha256, or any location with a
    /// digest).
    pub fn is_pinned(&self) -> bool {
        match self {
            Location::File(_) => false,
            Location::Https { .. } => true,
            Location::Oci { digest, .. } => digest.is_some(),
        }
    }

    /// The pin, `sha256:<hex>`, when there is one.
    pub fn digest(&self) -> Option<&str> {
        match self {
            Location::File(_) => None,
            Location::Https { digest, .. } => Some(digest),
            Location::Oci { digest, .. } => digest.as_deref(),
        }
    }

    /// A short plugin name: file stem, last URL path segment without .wasm, last repo path
    /// segment.
    pub fn name(&self) -> String {
        let name = match self {
            Location::File(path) => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Location::Https { url, .. } => {
                let path = url::Url::parse(url)
                    .ok()
                    .map(|u| u.path().to_string())
                    .unwrap_or_default();
                let last = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or_default();
                last.strip_suffix(".wasm").unwrap_or(last).to_string()
            }
            Location::Oci { reference, .. } => {
                let repo = reference.split('@').next().unwrap_or_default();
                let last = repo.rsplit('/').next().unwrap_or_default();
                // A colon in the last segment starts the tag (the registry's port is in
                // the first segment, which is never the last).
                last.split(':').next().unwrap_or_default().to_string()
            }
        };
        if name.is_empty() {
            "plugin".to_string()
        } else {
            name
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Https { url, .. } => f.write_str(url),
            Location::Oci { reference, digest } => match digest {
                Some(d) if !reference.contains('@') => write!(f, "oci://{reference}@{d}"),
                _ => write!(f, "oci://{reference}"),
            },
        }
    }
}

/// Checks `sha256:` followed by 64 lowercase hex digits.
///
/// # Errors
/// [`LocationError::BadDigest`] naming the digest.
pub fn check_digest(digest: &str) -> Result<(), LocationError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(LocationError::BadDigest {
            digest: digest.to_string(),
        })
    }
}

fn has_scheme(location: &str) -> bool {
    location.split_once("://").is_some_and(|(scheme, _)| {
        let mut chars = scheme.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// An `https://` URL with a host, no credentials, and a digest.
fn https(location: &str, digest: Option<&str>) -> Result<Location, LocationError> {
    let bad = |reason: &str| LocationError::BadLocation {
        location: location.to_string(),
        reason: reason.to_string(),
    };
    let url = url::Url::parse(location).map_err(|_| bad("is not a valid URL"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // The message shows the URL without them.
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        return Err(LocationError::BadLocation {
            location: shown.to_string(),
            reason: "holds credentials; https:// plugin locations are fetched without any".into(),
        });
    }
    let digest = digest.ok_or_else(|| LocationError::MissingDigest {
        location: location.to_string(),
    })?;
    Ok(Location::Https {
        url: location.to_string(),
        digest: digest.to_string(),
    })
}

/// `registry/repo:tag`, `registry/repo@sha256:...` or both; the registry must be named
/// (a host with a dot or a port, or `localhost`) so no default registry is ever implied.
fn oci(location: &str, reference: &str, digest: Option<&str>) -> Result<Location, LocationError> {
    let bad = |reason: &str| LocationError::BadLocation {
        location: location.to_string(),
        reason: reason.to_string(),
    };
    let (name, in_reference) = match reference.split_once('@') {
        Some((name, d)) => {
            check_digest(d)?;
            (name, Some(d))
        }
        None => (reference, None),
    };
    let (registry, repo) = name
        .split_once('/')
        .ok_or_else(|| bad("must be oci://registry/repository:tag"))?;
    if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
        return Err(bad(
            "must name its registry host first, e.g. oci://registry.example.com/team/plugin:1.0",
        ));
    }
    let (repo, tag) = match repo.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
        _ => (repo, None),
    };
    if tag.is_none() && in_reference.is_none() {
        return Err(bad("needs a :tag or an @sha256: digest"));
    }
    if !repository_chars_ok(repo) {
        return Err(bad(
            "has an invalid repository name (lowercase letters, digits, '.', '_', '-', '/')",
        ));
    }
    if tag.is_some_and(|tag| !tag_ok(tag)) {
        return Err(bad("has an invalid tag"));
    }
    if !repository_edges_ok(repo) || !registry_ok(registry) {
        return Err(bad("is not a valid OCI reference"));
    }
    Ok(Location::Oci {
        reference: reference.to_string(),
        digest: one_digest(location, in_reference, digest)?,
    })
}

/// Repository components of lowercase letters, digits, `.`, `_` and `-`, none empty.
fn repository_chars_ok(repo: &str) -> bool {
    !repo.is_empty()
        && repo.split('/').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        })
}

/// A tag of at most 128 letters, digits, `.`, `_` and `-`.
fn tag_ok(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The distribution spec's grammar: every repository component starts and ends with a
/// letter or digit.
fn repository_edges_ok(repo: &str) -> bool {
    repo.split('/').all(|part| {
        part.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
            && part
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// The registry is a host name or address with an optional port.
fn registry_ok(registry: &str) -> bool {
    let (host, port) = registry.rsplit_once(':').unwrap_or((registry, "1"));
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-".contains(&b))
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
}

/// The digest of the reference or of the `digest` field; both must agree when both are set.
fn one_digest(
    location: &str,
    in_reference: Option<&str>,
    field: Option<&str>,
) -> Result<Option<String>, LocationError> {
    match (in_reference, field) {
        (Some(a), Some(b)) if a != b => Err(LocationError::ConflictingDigest {
            location: location.to_string(),
            in_reference: a.to_string(),
            field: b.to_string(),
        }),
        (a, b) => Ok(a.or(b).map(str::to_string)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn parse(location: &str, digest: Option<&str>) -> Result<Location, LocationError> {
        Location::parse(location, digest, Path::new("/bp"))
    }

    fn err(location: &str, digest: Option<&str>) -> String {
        parse(location, digest)
            .map(|l| format!("unexpectedly parsed as {l:?}"))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn relative_paths_resolve_against_the_blueprint_directory() {
        assert_eq!(
            parse("./plugins/webapp.wasm", None).ok(),
            Some(Location::File("/bp/./plugins/webapp.wasm".into()))
        );
        assert_eq!(
            parse("/abs/h.wasm", None).ok(),
            Some(Location::File("/abs/h.wasm".into()))
        );
        let file = parse("h.wasm", None).expect("file");
        assert!(!file.is_pinned());
        assert_eq!(file.name(), "h");
        assert_eq!(file.to_string(), "/bp/h.wasm");
    }

    #[test]
    fn https_needs_a_well_formed_digest() {
        let loc = parse("https://plugins.example.com/v1/webapp.wasm?x=1", Some(D1))
            .expect("https with digest");
        assert!(loc.is_pinned());
        assert_eq!(loc.name(), "webapp");
        assert_eq!(loc.digest(), Some(D1));
        assert!(err("https://h.example.com/a.wasm", None).contains("needs a digest"));
        assert!(err("https://h.example.com/a.wasm", Some("sha256:ABC")).contains("sha256:ABC"));
        assert!(err("https://h.example.com/a.wasm", Some(&D1.to_uppercase())).contains("64"));
        assert!(err("https://u:secret@h.example.com/a.wasm", Some(D1)).contains("credentials"));
        assert!(!err("https://u:secret@h.example.com/a.wasm", Some(D1)).contains("secret@"));
    }

    #[test]
    fn plain_http_and_unknown_schemes_are_refused() {
        assert!(err("http://h.example.com/a.wasm", Some(D1)).contains("plain http://"));
        assert!(err("ftp://h.example.com/a.wasm", None).contains("unknown scheme"));
        assert!(err("", None).contains("empty"));
    }

    #[test]
    fn a_digest_on_a_file_is_refused() {
        assert!(err("./a.wasm", Some(D1)).contains("is a file"));
    }

    #[test]
    fn oci_references_name_a_registry_and_a_tag_or_digest() {
        let tag = parse("oci://127.0.0.1:5000/team/webapp:1.0", None).expect("tag");
        assert_eq!(
            tag,
            Location::Oci {
                reference: "127.0.0.1:5000/team/webapp:1.0".into(),
                digest: None
            }
        );
        assert!(!tag.is_pinned());
        assert_eq!(tag.name(), "webapp");
        assert_eq!(tag.to_string(), "oci://127.0.0.1:5000/team/webapp:1.0");

        let by_digest =
            parse(&format!("oci://registry.example.com/webapp@{D1}"), None).expect("digest");
        assert!(by_digest.is_pinned());
        assert_eq!(by_digest.digest(), Some(D1));
        assert_eq!(by_digest.name(), "webapp");

        let pinned_tag = parse("oci://localhost/webapp:2", Some(D2)).expect("tag + digest");
        assert_eq!(pinned_tag.digest(), Some(D2));
        assert_eq!(
            pinned_tag.to_string(),
            format!("oci://localhost/webapp:2@{D2}")
        );

        assert!(err("oci://webapp:1.0", None).contains("registry"));
        assert!(err("oci://team/webapp:1.0", None).contains("registry host"));
        assert!(err("oci://127.0.0.1:5000/webapp", None).contains(":tag"));
        assert!(err("oci://127.0.0.1:5000/WebApp:1", None).contains("repository"));
        assert!(err("oci://127.0.0.1:5000/webapp:bad tag", None).contains("tag"));
        assert!(err("oci://127.0.0.1:5000/webapp@sha256:12", None).contains("sha256:12"));
        let conflict = err(&format!("oci://127.0.0.1:5000/webapp@{D1}"), Some(D2));
        assert!(conflict.contains(D1) && conflict.contains(D2), "{conflict}");
    }
}
