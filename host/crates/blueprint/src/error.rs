//! Why a Blueprint could not be loaded: located problems, collected rather than stopping early.

use std::fmt;
use std::path::{Path, PathBuf};

/// One thing wrong in a Blueprint, named by file, CRD and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or the name given to [`super::from_str`]).
    pub file: PathBuf,
    /// The kind of the CRD the problem is in, when it is in one.
    pub crd: Option<String>,
    /// The field path, e.g. `spec.crds[0].reconcile.prune.keep[1]`; empty for the whole document.
    pub field: String,
    /// What is wrong, with `at line L column C` when the parser knew where.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
}

impl Problem {
    /// A problem with no position in the text.
    pub fn new(
        file: &Path,
        crd: Option<&str>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            file: file.to_path_buf(),
            crd: crd.map(str::to_string),
            field: field.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(crd) = &self.crd {
            write!(f, "crd {crd}: ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Why [`super::load`] and friends failed.
#[derive(Debug, thiserror::Error)]
pub enum BlueprintError {
    /// A file or directory could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The path held no YAML documents (an empty file, or a directory without `*.yaml`).
    #[error("{}: no Blueprint documents found", path.display())]
    Empty {
        /// The file or directory.
        path: PathBuf,
    },
    /// YAML syntax, shape or rule problems; every one found, one per line.
    #[error("{}", Lines(problems))]
    Invalid {
        /// At least one problem.
        problems: Vec<Problem>,
    },
}

impl BlueprintError {
    /// The located problems (empty for read errors).
    pub fn problems(&self) -> &[Problem] {
        match self {
            BlueprintError::Invalid { problems } => problems,
            _ => &[],
        }
    }
}

struct Lines<'a>(&'a [Problem]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_names_file_crd_and_field() {
        let p = Problem::new(
            Path::new("blueprints/web.yaml"),
            Some("WebApp"),
            "spec.crds[0].workers",
            "must be at least 1",
        );
        assert_eq!(
            p.to_string(),
            "blueprints/web.yaml: crd WebApp: spec.crds[0].workers: must be at least 1"
        );
    }

    #[test]
    fn invalid_shows_one_problem_per_line() {
        let file = Path::new("b.yaml");
        let err = BlueprintError::Invalid {
            problems: vec![
                Problem::new(file, None, "kind", "must be Blueprint"),
                Problem::new(file, None, "", "empty"),
            ],
        };
        assert_eq!(
            err.to_string(),
            "b.yaml: kind: must be Blueprint\nb.yaml: empty"
        );
        assert_eq!(err.problems().len(), 2);
    }
}
