//! Plugin fetches under a Blueprint's egress rules. Where a fetch connects is decided once,
//! from the URL as the client parses it: its host and port checked against the list,
//! resolved once, every address checked, and the client dials the checked address. Every
//! other URL a fetch is sent to (a layer's redirect, a registry's token realm) is checked
//! before the request, and the client resolves its name through the rules as it connects.

use std::net::{IpAddr, SocketAddr};

use crate::egress::{Egress, EgressError};

/// A host and the address checked for it, which the client dials instead of resolving the
/// name again (a second lookup could answer otherwise).
#[derive(Debug, Clone)]
pub(super) struct Pinned {
    host: String,
    address: SocketAddr,
}

/// The host and port `url` connects to.
fn host_port(url: &reqwest::Url) -> Result<(&str, u16), EgressError> {
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| EgressError::BadUrl(url.to_string()))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| EgressError::BadUrl(url.to_string()))?;
    Ok((host, port))
}

/// `url`'s host checked against `egress`, resolved once and its addresses checked; the
/// one to dial.
///
/// # Errors
/// What [`Egress::pin`] finds: a host:port off the list, a refused address, a name that
/// does not resolve. Nothing has been sent anywhere.
pub(super) async fn pin(egress: &Egress, url: &reqwest::Url) -> Result<Pinned, EgressError> {
    let (host, port) = host_port(url)?;
    let ip = egress.pin(host, port).await?;
    Ok(Pinned {
        host: host.to_string(),
        address: SocketAddr::new(ip, port),
    })
}

/// `builder` held to `egress`: names resolved through the rules, no proxy, and `pinned`'s
/// host dialled at its checked address.
pub(super) fn client(
    builder: reqwest::ClientBuilder,
    egress: &Egress,
    pinned: &Pinned,
) -> reqwest::ClientBuilder {
    let builder = egress.fence(builder);
    let bare = pinned.host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        // An address is dialled as written; nothing resolves it.
        builder
    } else {
        builder.resolve(&pinned.host, pinned.address)
    }
}

/// Whether a request may go to `url` (a redirect, a token realm): without egress rules,
/// anywhere; with them, a listed host and port (an address host also checked against the
/// refused ranges; a name is checked on what it resolves to when the client connects).
///
/// # Errors
/// What [`Egress::check_url`] finds.
pub(super) fn check(egress: Option<&Egress>, url: &reqwest::Url) -> Result<(), EgressError> {
    match egress {
        Some(egress) => egress.check_url(url.as_str()).map(drop),
        None => Ok(()),
    }
}

/// The egress refusal among `error`'s causes, if one stopped it: a redirect the rules
/// refused, or a name that resolved only to refused addresses.
pub(super) fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<EgressError> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<EgressError>() {
            return Some(refused.clone());
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(entries: &[&str]) -> Egress {
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_string()).collect();
        Egress::new(&entries, Vec::new()).expect("policy")
    }

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).expect("url")
    }

    #[tokio::test]
    async fn a_target_is_pinned_only_when_listed_and_on_its_schemes_port() {
        let rules = egress(&["127.0.0.1:5000", "registry.example:443"]);
        let pinned = pin(&rules, &url("http://127.0.0.1:5000/v2/"))
            .await
            .expect("a listed address");
        assert_eq!(pinned.address, "127.0.0.1:5000".parse().expect("addr"));
        // Off the list: refused before any lookup (the name does not resolve anyway).
        assert!(matches!(
            pin(&rules, &url("https://registry.invalid/v2/")).await,
            Err(EgressError::NotListed { port: 443, .. })
        ));
        // http's port is 80, not the listed 443.
        assert!(matches!(
            pin(&rules, &url("http://registry.example/v2/")).await,
            Err(EgressError::NotListed { port: 80, .. })
        ));
    }

    #[test]
    fn hops_are_checked_only_under_egress_rules() {
        let rules = egress(&["storage.example:443"]);
        assert!(check(Some(&rules), &url("https://storage.example/blob")).is_ok());
        assert!(matches!(
            check(Some(&rules), &url("https://169.254.169.254/latest/")),
            Err(EgressError::NotListed { .. })
        ));
        assert!(check(None, &url("https://169.254.169.254/latest/")).is_ok());
    }

    #[test]
    fn a_refusal_is_found_among_the_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] EgressError);
        let inner = EgressError::BadUrl("x".into());
        assert_eq!(refusal(&Outer(inner.clone())), Some(inner));
        assert_eq!(refusal(&std::io::Error::other("plain")), None);
    }
}
