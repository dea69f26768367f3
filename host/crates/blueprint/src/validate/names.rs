//! The shapes of names Kubernetes and templates accept: DNS labels, groups, versions, kinds.

/// RFC 1123 label: at most 63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !s.is_empty()
        && s.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A CRD group: a subdomain with at least one dot (`demo.inrun.dev`).
pub fn is_api_group(s: &str) -> bool {
    s.contains('.') && is_dns_subdomain(s)
}

/// `v1`, `v1alpha1`, `v2beta3`: numbers without leading zeros.
pub fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let (major, rest) = split_number(rest);
    if !is_positive(major) {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    let Some(minor) = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
    else {
        return false;
    };
    let (minor, tail) = split_number(minor);
    is_positive(minor) && tail.is_empty()
}

fn split_number(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

fn is_positive(digits: &str) -> bool {
    !digits.is_empty() && !digits.starts_with('0')
}

/// UpperCamelCase kind: an ASCII capital, then letters and digits, at most 63.
pub fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// `v1` (core) or `group/version`, as written in `apiVersion`.
pub fn is_api_version(s: &str) -> bool {
    match s.split_once('/') {
        Some((group, version)) => is_dns_subdomain(group) && is_dns_label(version),
        None => is_dns_label(s),
    }
}

/// A name templates can reach as `.external.<name>`: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label, annotation or finalizer key: `[prefix/]name`, name at most 63 of
/// `[A-Za-z0-9-_.]` and alphanumeric at both ends, prefix a DNS subdomain.
pub fn is_qualified_name(s: &str) -> bool {
    let name = match s.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns_subdomain(prefix) {
                return false;
            }
            name
        }
        None => s,
    };
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A Secret data key: `[-._a-zA-Z0-9]+`.
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A path into an object as Inrun writes them: `.spec.image`, `.metadata.managedFields`.
pub fn is_field_path(s: &str) -> bool {
    s.len() > 1 && s.starts_with('.') && !s.split('.').skip(1).any(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_kubernetes_pattern() {
        for good in ["v1", "v1alpha1", "v2beta3", "v10"] {
            assert!(is_version(good), "{good}");
        }
        for bad in [
            "1",
            "v0",
            "v01",
            "v1alpha",
            "v1gamma1",
            "v1beta0",
            "V1",
            "v1alpha1x",
        ] {
            assert!(!is_version(bad), "{bad}");
        }
    }

    #[test]
    fn groups_need_a_dot_and_lowercase_labels() {
        assert!(is_api_group("demo.inrun.dev"));
        assert!(!is_api_group("demo"));
        assert!(!is_api_group("Demo.inrun.dev"));
        assert!(!is_api_group("demo..dev"));
        assert!(!is_api_group("-demo.dev"));
    }

    #[test]
    fn kinds_are_upper_camel_case() {
        assert!(is_kind("WebApp"));
        assert!(is_kind("S3Bucket"));
        assert!(!is_kind("webApp"));
        assert!(!is_kind("Web-App"));
        assert!(!is_kind(""));
    }

    #[test]
    fn api_versions_are_core_or_grouped() {
        assert!(is_api_version("v1"));
        assert!(is_api_version("apps/v1"));
        assert!(!is_api_version("apps/"));
        assert!(!is_api_version("/v1"));
        assert!(!is_api_version("a/b/c"));
    }

    #[test]
    fn qualified_names_allow_a_domain_prefix() {
        assert!(is_qualified_name("example.com/extra"));
        assert!(is_qualified_name("inrun.dev/target"));
        assert!(is_qualified_name("target"));
        assert!(!is_qualified_name("Example.com/x"));
        assert!(!is_qualified_name("example.com/"));
        assert!(!is_qualified_name("example.com/-x"));
    }

    #[test]
    fn identifiers_and_field_paths() {
        assert!(is_identifier("price_2"));
        assert!(!is_identifier("2price"));
        assert!(!is_identifier("my-price"));
        assert!(is_field_path(".spec.target"));
        assert!(!is_field_path("spec.target"));
        assert!(!is_field_path(".spec..target"));
        assert!(!is_field_path("."));
    }
}
