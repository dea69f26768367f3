//! Parsers for the flag values clap does not know: durations, sizes, Lease names and
//! ServiceAccounts.

/// A duration as `30s`, `1m30s` or `500ms`; `0` alone needs no unit.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    inrun::duration::parse(text).map_err(|e| e.to_string())
}

/// A size in bytes, as Kubernetes writes quantities (`256Mi`, `4096`).
pub(crate) fn parse_quantity(text: &str) -> Result<usize, String> {
    let q = inrun::blueprint::Quantity::parse(text).map_err(|e| e.to_string())?;
    usize::try_from(q.bytes()).map_err(|e| e.to_string())
}

/// A sharding ring's name: a DNS label of at most 40 characters, room left for the
/// suffix of its Leases' names.
pub(crate) fn parse_ring_name(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 40
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a ring name: lowercase letters, digits and '-', starting and \
             ending with a letter or digit, at most 40 characters"
        ))
    }
}

/// A Lease's name: a lowercase DNS subdomain (RFC 1123), as Kubernetes requires.
pub(crate) fn parse_lease_name(text: &str) -> Result<String, String> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if text.len() <= 253 && text.split('.').all(label) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a Lease name: lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters"
        ))
    }
}

/// A ServiceAccount as `namespace/name`.
pub(crate) fn parse_service_account(
    text: &str,
) -> Result<inrun::blueprint::ServiceAccountRef, inrun::blueprint::AccountError> {
    inrun::blueprint::ServiceAccountRef::parse(text)
}

/// A ServiceAccount per Blueprint, as `namespace/…{name}…`.
pub(crate) fn parse_account_pattern(
    text: &str,
) -> Result<inrun::blueprint::AccountPattern, inrun::blueprint::AccountError> {
    inrun::blueprint::AccountPattern::parse(text)
}
