//! Error reporting helpers shared by the CLI and events.

use std::error::Error;

/// An error and its causes on one line, `outer: inner: root`: what each level says, in
/// order. A cause the line already ends with is not printed again: third-party errors
/// (kube's, tokio-postgres') say their cause inside their own message and also keep it as
/// their source. The host's own error types never do ([`repeated_cause`] finds one that
/// does, for their tests), so this hides no repeat of theirs.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// The first message in `err`'s chain that contains the message of its own source (the
/// cause said twice, once in the text and once as the source), `None` when no level
/// repeats its cause. For tests of the host's error types.
pub fn repeated_cause(err: &(dyn Error + 'static)) -> Option<String> {
    let mut level: &(dyn Error + 'static) = err;
    while let Some(cause) = level.source() {
        let (text, inner) = (level.to_string(), cause.to_string());
        if !inner.is_empty() && text.contains(&inner) {
            return Some(text);
        }
        level = cause;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{chain, repeated_cause};

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    /// A type as third-party crates write them: it prints its source and keeps it as the
    /// source.
    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeating(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("reading the Blueprint")]
    struct Wrapping(#[source] Repeating);

    #[test]
    fn chain_joins_causes_on_one_line() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(chain(&e), "outer: disk full");
    }

    #[test]
    fn a_third_party_cause_said_in_its_message_is_printed_once() {
        let e = Wrapping(Repeating(std::io::Error::other("disk full")));
        assert_eq!(chain(&e), "reading the Blueprint: outer: disk full");
    }

    #[test]
    fn repeated_cause_names_the_level_that_says_its_source_again() {
        let e = Wrapping(Repeating(std::io::Error::other("disk full")));
        assert_eq!(repeated_cause(&e).as_deref(), Some("outer: disk full"));
        assert_eq!(
            repeated_cause(&Outer(std::io::Error::other("disk full"))),
            None
        );
    }
}
