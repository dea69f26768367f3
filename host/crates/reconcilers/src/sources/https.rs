//! Downloading a component from an `https://` URL, capped at [`MAX_MODULE_SIZE`] bytes.

use std::time::Duration;

use super::{MAX_MODULE_SIZE, SourceError, SourceOptions};

/// How long connecting may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// An HTTPS-only client trusting the system's CAs and `options.extra_roots`, without
/// environment proxies.
pub(super) fn client(options: &SourceOptions) -> Result<reqwest::Client, SourceError> {
    let mut builder = reqwest::Client::builder()
        // Environment proxies are not the tenant's to use, nor a way around anything.
        .no_proxy()
        .https_only(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(DOWNLOAD_TIMEOUT)
        // A redirect may not leave https (https_only), and a pinned digest guards the rest.
        .redirect(reqwest::redirect::Policy::limited(5));
    for (index, pem) in options.extra_roots.iter().enumerate() {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|source| SourceError::BadRoot { index, source })?;
        builder = builder.add_root_certificate(cert);
    }
    builder.build().map_err(SourceError::Client)
}

/// GETs `url` into memory, refusing more than [`MAX_MODULE_SIZE`] bytes whatever the
/// server says its length is.
pub(super) async fn download(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, SourceError> {
    let failed = |source| SourceError::Http {
        location: url.to_string(),
        source,
    };
    let too_large = || SourceError::TooLarge {
        location: url.to_string(),
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
