//! Registry credentials from a `kubernetes.io/dockerconfigjson` Secret's
//! `.dockerconfigjson`: `{"auths": {"host:port": {"auth": base64(user:pass)}}}` or
//! `{"username": ..., "password": ...}` in place of `auth`.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;

/// A user name and password (or token) for a registry. Debug output hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// A `.dockerconfigjson` text holding these credentials for `registry`, as a
    /// `kubernetes.io/dockerconfigjson` Secret would.
    pub fn to_docker_config(&self, registry: &str) -> String {
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.username, self.password));
        serde_json::json!({ "auths": { registry: { "auth": auth } } }).to_string()
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The credentials for `registry` (`host` or `host:port`) in a `.dockerconfigjson` text.
/// Keys may carry a scheme or a path (`https://host:port/v1/`); hosts compare without case.
///
/// # Errors
/// What is wrong, in words that never include a value from the text.
pub(super) fn credentials_for(text: &str, registry: &str) -> Result<Credentials, String> {
    let config: DockerConfig = serde_json::from_str(text)
        .map_err(|_| "its .dockerconfigjson is not JSON with an \"auths\" map".to_string())?;
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| host_of(key).eq_ignore_ascii_case(registry))
        .map(|(_, entry)| entry)
        .ok_or_else(|| format!("has no credentials for registry {registry}"))?;
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Credentials {
            username: username.clone(),
            password: password.clone(),
        });
    }
    let bad = || format!("the auth entry for registry {registry} is not base64 of user:password");
    let auth = entry.auth.as_deref().ok_or_else(|| {
        format!("the entry for registry {registry} has neither auth nor username and password")
    })?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| bad())?;
    let text = String::from_utf8(decoded).map_err(|_| bad())?;
    let (username, password) = text.split_once(':').ok_or_else(bad)?;
    Ok(Credentials {
        username: username.to_string(),
        password: password.to_string(),
    })
}

/// `https://host:port/v1/` → `host:port`.
fn host_of(key: &str) -> &str {
    let rest = key.split_once("://").map_or(key, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_entries_decode_to_user_and_password() {
        let creds = Credentials {
            username: "alice".into(),
            password: "pa:ss".into(),
        };
        let text = creds.to_docker_config("127.0.0.1:5000");
        assert_eq!(credentials_for(&text, "127.0.0.1:5000"), Ok(creds.clone()));
        assert!(!format!("{creds:?}").contains("pa:ss"));
    }

    #[test]
    fn keys_with_scheme_and_path_match_their_host() {
        let text = r#"{"auths": {"https://Registry.Example.com/v1/": {"username": "u", "password": "p"}}}"#;
        let creds = credentials_for(text, "registry.example.com").expect("found");
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("u", "p")
        );
    }

    #[test]
    fn problems_are_named_without_values() {
        let other = r#"{"auths": {"a.example.com": {"auth": "c2VjcmV0"}}}"#;
        assert_eq!(
            credentials_for(other, "b.example.com"),
            Err("has no credentials for registry b.example.com".into())
        );
        let no_colon = credentials_for(other, "a.example.com").expect_err("no colon");
        assert!(!no_colon.contains("secret") && !no_colon.contains("c2VjcmV0"));
        let not_json = credentials_for("{\"auths\": \"topsecret\"}", "a").expect_err("not json");
        assert!(!not_json.contains("topsecret"), "{not_json}");
    }
}
