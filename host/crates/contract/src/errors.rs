//! Error reporting helpers shared by the CLI and events.

use std::error::Error;

/// An error and its causes on one line, `outer: inner: root`: exactly what each level
/// says, in order. An error type must not repeat its source in its own message, or the
/// cause is printed twice.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    /// A type that breaks the rule: it prints its source and keeps it as the source.
    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeating(#[source] std::io::Error);

    #[test]
    fn chain_joins_causes_on_one_line() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(super::chain(&e), "outer: disk full");
    }

    #[test]
    fn chain_prints_what_each_level_says_without_hiding_a_repeat() {
        let e = Repeating(std::io::Error::other("disk full"));
        assert_eq!(super::chain(&e), "outer: disk full: disk full");
    }
}
