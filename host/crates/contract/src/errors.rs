//! Error reporting helpers shared by the CLI and events.

use std::error::Error;

/// An error and its causes on one line, `outer: inner: root`, skipping a cause whose text
/// the previous message already contains.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_joins_causes_on_one_line() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(super::chain(&e), "outer: disk full");
    }
}
