//! Turning YAML text into Blueprint documents, and locating what does not fit the model.

use std::path::Path;

use serde::Deserialize;
use serde_path_to_error::Segment;
use serde_yaml_ng::Value;

use super::error::Problem;
use super::model::Blueprint;

/// One parsed document, before merging.
pub(super) struct Document {
    /// The Blueprint, with its sources filled in.
    pub(super) blueprint: Blueprint,
    /// Whether the document wrote `spec.runtime` itself.
    pub(super) sets_runtime: bool,
}

/// Parses every non-empty document of `text`; problems are added, never fatal to the others.
pub(super) fn parse_documents(
    file: &Path,
    text: &str,
    problems: &mut Vec<Problem>,
) -> Vec<Document> {
    let mut docs = Vec::new();
    for (index, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let mut raw = match Value::deserialize(de) {
            Ok(raw) => raw,
            Err(err) => {
                // After a syntax error the rest of the stream cannot be trusted.
                problems.push(yaml_problem(file, &err));
                break;
            }
        };
        if raw.is_null() {
            continue;
        }
        if let Err(err) = raw.apply_merge() {
            problems.push(yaml_problem(file, &err));
            continue;
        }
        match serde_path_to_error::deserialize::<_, Blueprint>(&raw) {
            Ok(mut blueprint) => {
                blueprint.source = file.to_path_buf();
                for (i, crd) in blueprint.spec.crds.iter_mut().enumerate() {
                    crd.source.file = file.to_path_buf();
                    crd.source.index = i;
                }
                let sets_runtime = raw.get("spec").and_then(|s| s.get("runtime")).is_some();
                docs.push(Document {
                    blueprint,
                    sets_runtime,
                });
            }
            Err(err) => problems.push(shape_problem(file, text, index, &raw, &err)),
        }
    }
    docs
}

fn yaml_problem(file: &Path, err: &serde_yaml_ng::Error) -> Problem {
    let mut problem = Problem::new(file, None, "", err.to_string());
    if let Some(at) = err.location() {
        problem.line = Some(at.line());
        problem.column = Some(at.column());
    }
    problem
}

/// A problem for a document that is valid YAML but not a Blueprint: the field path comes
/// from `serde_path_to_error`, the CRD's kind from the raw document, and the position from
/// parsing the document's text again (only on this error path).
fn shape_problem(
    file: &Path,
    text: &str,
    index: usize,
    raw: &Value,
    err: &serde_path_to_error::Error<serde_yaml_ng::Error>,
) -> Problem {
    let path = err.path();
    let field = if path.iter().next().is_some() {
        path.to_string()
    } else {
        String::new()
    };
    let crd = crd_index(path).and_then(|i| {
        raw.get("spec")?
            .get("crds")?
            .get(i)?
            .get("kind")?
            .as_str()
            .map(str::to_string)
    });
    let mut problem = Problem::new(file, crd.as_deref(), field, err.inner().to_string());
    let located = serde_yaml_ng::Deserializer::from_str(text)
        .nth(index)
        .and_then(|de| Blueprint::deserialize(de).err())
        .and_then(|e| e.location());
    if let Some(at) = located {
        problem.message = format!(
            "{} at line {} column {}",
            problem.message,
            at.line(),
            at.column()
        );
        problem.line = Some(at.line());
        problem.column = Some(at.column());
    }
    problem
}

/// `i` when the path starts with `spec.crds[i]`.
fn crd_index(path: &serde_path_to_error::Path) -> Option<usize> {
    let mut segments = path.iter();
    match (segments.next(), segments.next(), segments.next()) {
        (
            Some(Segment::Map { key: spec }),
            Some(Segment::Map { key: crds }),
            Some(Segment::Seq { index }),
        ) if spec == "spec" && crds == "crds" => Some(*index),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::load;
    use crate::testing::{HEADER, error_lines, fixture, problems};

    #[test]
    fn an_unknown_field_names_file_crd_field_and_line() {
        let err = load(&fixture("bad/unknown-field.yaml")).expect_err("unknown field is refused");
        let file = fixture("bad/unknown-field.yaml");
        let expected = format!(
            "{}: crd WebApp: spec.crds[0].reconcile.prune.kep: unknown field `kep`, expected one of `enabled`, `keep`, `allowEmpty` at line 12 column 11",
            file.display()
        );
        assert_eq!(problems(err), [expected]);
    }

    #[test]
    fn a_wrong_type_names_the_field() {
        let text = format!(
            "{HEADER}spec:\n  crds:\n    - {{ group: demo.inrun.dev, version: v1, kind: WebApp, workers: many }}\n"
        );
        let lines = error_lines(&text);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("blueprints/web.yaml: crd WebApp: spec.crds[0].workers: invalid type: string \"many\", expected u32"), "{}", lines[0]);
    }

    #[test]
    fn a_bad_duration_names_the_field() {
        let text = format!(
            "{HEADER}spec:\n  crds:\n    - {{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: {{ requeue: {{ after: 30 }} }} }}\n"
        );
        let lines = error_lines(&text);
        assert!(
            lines[0].starts_with(
                "blueprints/web.yaml: crd WebApp: spec.crds[0].reconcile.requeue.after: "
            ),
            "{}",
            lines[0]
        );
        let text = format!("{HEADER}spec:\n  runtime: {{ backoff: {{ base: 1d }} }}\n");
        let lines = error_lines(&text);
        assert!(
            lines[0].starts_with(
                "blueprints/web.yaml: spec.runtime.backoff.base: invalid duration \"1d\""
            ),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn a_bad_quantity_names_the_field() {
        let text = format!(
            "{HEADER}spec:\n  crds:\n    - {{ group: demo.inrun.dev, version: v1, kind: Job, reconcile: {{ default: false, constructor: {{ location: ./job.wasm, limits: {{ memory: 64MB }} }} }} }}\n"
        );
        let lines = error_lines(&text);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("blueprints/web.yaml: crd Job: spec.crds[0].reconcile.constructor.limits.memory: invalid size \"64MB\""), "{}", lines[0]);
    }

    #[test]
    fn a_syntax_error_carries_line_and_column() {
        let err = load(&fixture("bad/syntax.yaml")).expect_err("broken YAML is refused");
        let problem = &err.problems()[0];
        assert_eq!(problem.file, fixture("bad/syntax.yaml"));
        assert!(
            problem.line.is_some() && problem.column.is_some(),
            "{problem:?}"
        );
        assert!(problem.to_string().contains("line"), "{problem}");
    }
}
