//! A failed Kubernetes API call, told the way a status message or an event should be.

/// A failed API call: `<message> (<reason>, HTTP <code>)` for a refusal of the API server,
/// the client's error chain for anything else; never the client's debug dump of the reply
/// (which kube's own `Display` appends). The one way a `kube::Error` becomes the source of
/// an error a user reads.
#[derive(Debug)]
pub struct ApiFailure(pub kube::Error);

impl ApiFailure {
    /// The text of `e`, as [`ApiFailure`] tells it.
    pub fn text(e: &kube::Error) -> String {
        match e {
            kube::Error::Api(status) => {
                let reason = if status.reason.is_empty() {
                    String::new()
                } else {
                    format!("{}, ", status.reason)
                };
                format!("{} ({reason}HTTP {})", status.message, status.code)
            }
            other => inrun_contract::errors::chain(other),
        }
    }

    /// The API server's status code, for a refusal.
    pub fn code(&self) -> Option<u16> {
        match &self.0 {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }
}

impl From<kube::Error> for ApiFailure {
    fn from(e: kube::Error) -> Self {
        ApiFailure(e)
    }
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&Self::text(&self.0))
    }
}

impl std::error::Error for ApiFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_told_by_its_message_reason_and_code_without_the_debug_dump() {
        let status =
            kube::core::Status::failure("secrets \"db\" not found", "NotFound").with_code(404);
        let text = ApiFailure(kube::Error::Api(Box::new(status))).to_string();
        assert_eq!(text, "secrets \"db\" not found (NotFound, HTTP 404)");
    }
}
