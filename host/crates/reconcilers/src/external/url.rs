//! An `http` call's URL template: rendered whole, or, for a URL that carries a token, each
//! templated part rendered alone and percent-encoded.

use super::CallError;
use super::render::render_text;
use inrun_template::{CompiledValue, Context};

/// An `http` call's URL template.
pub(super) enum UrlTemplate {
    /// Rendered as one text.
    Whole(CompiledValue),
    /// A token-bearing URL: literal text and `{{ }}` expressions, each rendered alone and
    /// percent-encoded, so that whoever writes the CR fills in a path segment or a query
    /// value but cannot add `/`, `?`, `#` or `&`, nor make a segment `..`: the token goes
    /// only where the Blueprint's author wrote.
    Encoded(Vec<UrlPart>),
}

/// A piece of a token-bearing URL.
pub(super) enum UrlPart {
    Literal(String),
    Value(CompiledValue),
}

impl UrlTemplate {
    pub(super) fn render(&self, ctx: &Context) -> Result<String, CallError> {
        match self {
            UrlTemplate::Whole(t) => render_text(t, ctx, "url"),
            UrlTemplate::Encoded(parts) => {
                let mut url = String::new();
                for part in parts {
                    match part {
                        UrlPart::Literal(text) => url.push_str(text),
                        UrlPart::Value(t) => {
                            let value = render_text(t, ctx, "url")?;
                            url.push_str(
                                &url_encoded(&value)
                                    .map_err(|why| CallError::BadUrlPart(why.to_string()))?,
                            );
                        }
                    }
                }
                Ok(url)
            }
        }
    }
}

/// `text` split into literal parts (`Ok`) and `{{ … }}` expressions (`Err`, markers
/// included, so each compiles as a template of its own).
pub(super) fn url_parts(text: &str) -> Vec<Result<&str, &str>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        if start > 0 {
            parts.push(Ok(&rest[..start]));
        }
        parts.push(Err(&rest[start..start + len + 2]));
        rest = &rest[start + len + 2..];
    }
    if !rest.is_empty() {
        parts.push(Ok(rest));
    }
    parts
}

/// `value` percent-encoded but for RFC 3986's unreserved characters; refused when it is a
/// dot segment (`.`, `..`), which URL parsers resolve whatever its encoding.
fn url_encoded(value: &str) -> Result<String, &'static str> {
    if value == "." || value == ".." {
        return Err("a templated part of a URL that carries a token may not be `.` or `..`");
    }
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod url_templates {
    use super::*;

    #[test]
    fn a_token_bearing_urls_templated_parts_are_encoded_and_dot_segments_refused() {
        assert_eq!(
            url_parts("https://api.example/v1/teams/{{ .spec.team }}/x?q={{ .spec.q }}"),
            vec![
                Ok("https://api.example/v1/teams/"),
                Err("{{ .spec.team }}"),
                Ok("/x?q="),
                Err("{{ .spec.q }}"),
            ]
        );
        assert_eq!(
            url_encoded("../../admin/users?x=1#f&y").unwrap(),
            "..%2F..%2Fadmin%2Fusers%3Fx%3D1%23f%26y"
        );
        assert_eq!(url_encoded("team-a_1.x~").unwrap(), "team-a_1.x~");
        assert!(url_encoded("..").is_err());
        assert!(url_encoded(".").is_err());
        // Encoded, the parsed URL keeps the path the Blueprint wrote.
        let url = format!(
            "https://api.example/v1/teams/{}",
            url_encoded("../admin").unwrap()
        );
        let parsed = reqwest::Url::parse(&url).unwrap();
        assert_eq!(parsed.path(), "/v1/teams/..%2Fadmin");
    }
}
