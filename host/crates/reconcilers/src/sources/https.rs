//! Downloading a component from an `https://` URL, capped at [`MAX_MODULE_SIZE`] bytes.

use std::time::Duration;

use super::{MAX_MODULE_SIZE, SourceError, SourceOptions, fence};
use crate::egress::{Egress, EgressError};

/// How long connecting may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// Redirects a download may follow.
const REDIRECTS: usize = 5;

/// HTTPS only, trusting the system's CAs and `options.extra_roots`, without environment
/// proxies; redirects are the caller's to set.
fn builder(options: &SourceOptions) -> Result<reqwest::ClientBuilder, SourceError> {
    let mut builder = reqwest::Client::builder()
        // Environment proxies are not the tenant's to use, nor a way around anything.
        .no_proxy()
        .https_only(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(DOWNLOAD_TIMEOUT);
    for (index, pem) in options.extra_roots.iter().enumerate() {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|source| SourceError::BadRoot { index, source })?;
        builder = builder.add_root_certificate(cert);
    }
    Ok(builder)
}

/// The client for fetches under no egress rules (the operator's own Blueprint, the CLI).
pub(super) fn client(options: &SourceOptions) -> Result<reqwest::Client, SourceError> {
    builder(options)?
        // A redirect may not leave https (https_only), and a pinned digest guards the rest.
        .redirect(reqwest::redirect::Policy::limited(REDIRECTS))
        .build()
        .map_err(SourceError::Client)
}

/// A client for one download of `url` under `egress`, and the URL as it parsed: the host
/// checked and resolved once, here, and dialled at that address; each redirect only to a
/// host the rules allow.
///
/// # Errors
/// [`SourceError::Egress`] when the host is off the list, at a refused address or does
/// not resolve (nothing is sent); what building a client may fail with.
pub(super) async fn fenced(
    options: &SourceOptions,
    egress: &Egress,
    url: &str,
) -> Result<(reqwest::Client, reqwest::Url), SourceError> {
    let refused = |source| SourceError::Egress {
        location: url.to_string(),
        what: "the host",
        source,
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| refused(EgressError::BadUrl(url.into())))?;
    let pinned = fence::pin(egress, &parsed).await.map_err(refused)?;
    let hops = egress.clone();
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > REDIRECTS {
            return attempt.error("too many redirects");
        }
        match fence::check(Some(&hops), attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    });
    let client = fence::client(builder(options)?.redirect(redirects), egress, &pinned)
        .build()
        .map_err(SourceError::Client)?;
    Ok((client, parsed))
}

/// GETs `url` into memory, refusing more than [`MAX_MODULE_SIZE`] bytes whatever the
/// server says its length is. Errors name `shown` (the location), never a URL the server
/// redirected to, nor anything it sent.
pub(super) async fn download(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    shown: &str,
) -> Result<Vec<u8>, SourceError> {
    let failed = |source: reqwest::Error| match fence::refusal(&source) {
        Some(refused) => SourceError::Egress {
            location: shown.to_string(),
            what: "a redirect",
            source: refused,
        },
        None => SourceError::Http {
            location: shown.to_string(),
            source: source.without_url(),
        },
    };
    let too_large = || SourceError::TooLarge {
        location: shown.to_string(),
        limit: MAX_MODULE_SIZE,
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(failed)?;
    if response
        .content_length()
        .is_some_and(|n| n > MAX_MODULE_SIZE)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if (bytes.len() + chunk.len()) as u64 > MAX_MODULE_SIZE {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
