//! Errors of the template engine: which template failed, and the cause as a source.

use std::fmt;

/// Where a template came from: a short excerpt of its source and, for templates inside a
/// JSON value, the path to it (`spec.containers[0].image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateOrigin {
    /// The path inside the compiled value; empty for a whole-value, document or condition
    /// template.
    pub path: String,
    /// The start of the template's source, on one line.
    pub excerpt: String,
}

impl TemplateOrigin {
    const EXCERPT_CHARS: usize = 60;

    pub(crate) fn new(path: &str, source: &str) -> TemplateOrigin {
        let one_line: String = source.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut excerpt: String = one_line.chars().take(Self::EXCERPT_CHARS).collect();
        if one_line.chars().count() > Self::EXCERPT_CHARS {
            excerpt.push('…');
        }
        TemplateOrigin {
            path: path.to_owned(),
            excerpt,
        }
    }
}

impl fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.excerpt)?;
        if !self.path.is_empty() {
            write!(f, " at {}", self.path)?;
        }
        Ok(())
    }
}

/// A template failed to compile or to render.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template's syntax is wrong; found when the Blueprint is loaded.
    #[error("template {origin} does not compile (line {line})")]
    Compile {
        /// The template.
        origin: TemplateOrigin,
        /// The line of the template where minijinja stopped (1-based).
        line: usize,
        /// minijinja's error.
        #[source]
        source: minijinja::Error,
    },
    /// Rendering failed: a filter refused its input, `required` found nothing, a call
    /// failed.
    #[error("template {origin} failed to render (line {line})")]
    Render {
        /// The template.
        origin: TemplateOrigin,
        /// The line of the template where rendering failed (1-based).
        line: usize,
        /// minijinja's error.
        #[source]
        source: minijinja::Error,
    },
    /// A documents template rendered text that is not YAML.
    #[error("template {origin} rendered text that is not valid YAML")]
    Yaml {
        /// The template.
        origin: TemplateOrigin,
        /// The YAML parser's error, with the position in the rendered text.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A template rendered a value JSON cannot hold.
    #[error("template {origin} rendered a value that is not JSON: {reason}")]
    NotJson {
        /// The template.
        origin: TemplateOrigin,
        /// Why, e.g. a number that is not finite.
        reason: String,
    },
}

impl TemplateError {
    /// The template that failed.
    pub fn origin(&self) -> &TemplateOrigin {
        match self {
            TemplateError::Compile { origin, .. }
            | TemplateError::Render { origin, .. }
            | TemplateError::Yaml { origin, .. }
            | TemplateError::NotJson { origin, .. } => origin,
        }
    }
}
