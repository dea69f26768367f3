//! The parts of an `apiVersion`: its group and version (the core group is `""`).

/// The group and version of `api_version`: `("apps", "v1")`, `("", "v1")` for the core
/// group.
pub fn split(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// The group of `api_version`; the core group is `""`.
pub fn group_of(api_version: &str) -> &str {
    split(api_version).0
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_core_group_is_empty_and_others_are_before_the_slash() {
        assert_eq!(super::split("v1"), ("", "v1"));
        assert_eq!(super::split("apps/v1"), ("apps", "v1"));
        assert_eq!(super::group_of("example.com/v1alpha1"), "example.com");
        assert_eq!(super::group_of("v1"), "");
    }
}
