//! Reading Blueprints from files, directories and strings, and merging their documents.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::{BlueprintError, Problem};
use super::model::Blueprint;
use super::parse::{Document, parse_documents};
use super::validate;

/// Loads one Blueprint from a file or a directory, merging every document found.
///
/// A file may hold several documents separated by `---`; a directory contributes every
/// `*.yaml` / `*.yml` file directly in it, in name order. CRDs are concatenated; at most
/// one document may set `spec.runtime`. The name and `apiVersion` come from the first document.
///
/// # Errors
/// [`BlueprintError::Read`] when the path cannot be read, [`BlueprintError::Empty`] when it
/// holds no documents, and [`BlueprintError::Invalid`] with every problem found otherwise.
pub fn load(path: &Path) -> Result<Blueprint, BlueprintError> {
    let sources = read_sources(path)?;
    merge_and_validate(path, &sources)
}

/// Loads every document under `path` as its own Blueprint, each validated on its own.
///
/// Returns an empty list when the path holds no documents.
///
/// # Errors
/// [`BlueprintError::Read`] when the path cannot be read and [`BlueprintError::Invalid`]
/// with every problem of every document otherwise.
pub fn load_all(path: &Path) -> Result<Vec<Blueprint>, BlueprintError> {
    let sources = match read_sources(path) {
        Err(BlueprintError::Empty { .. }) => return Ok(Vec::new()),
        other => other?,
    };
    let mut problems = Vec::new();
    let mut blueprints = Vec::new();
    for (file, text) in &sources {
        for doc in parse_documents(file, text, &mut problems) {
            problems.extend(validate::blueprint(&doc.blueprint));
            blueprints.push(doc.blueprint);
        }
    }
    finish(blueprints, problems)
}

/// Parses `text` (one or more documents) as if read from a file called `source_name`.
///
/// # Errors
/// As [`load`], without [`BlueprintError::Read`].
pub fn from_str(text: &str, source_name: &str) -> Result<Blueprint, BlueprintError> {
    let file = PathBuf::from(source_name);
    merge_and_validate(&file, &[(file.clone(), text.to_string())])
}

fn finish<T>(value: T, problems: Vec<Problem>) -> Result<T, BlueprintError> {
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(BlueprintError::Invalid { problems })
    }
}

fn merge_and_validate(
    path: &Path,
    sources: &[(PathBuf, String)],
) -> Result<Blueprint, BlueprintError> {
    let mut problems = Vec::new();
    let mut docs = Vec::new();
    for (file, text) in sources {
        docs.extend(parse_documents(file, text, &mut problems));
    }
    if docs.is_empty() && problems.is_empty() {
        return Err(BlueprintError::Empty {
            path: path.to_path_buf(),
        });
    }
    for doc in &docs {
        problems.extend(validate::document(&doc.blueprint));
    }
    let merged = merge(docs, &mut problems);
    if let Some(bp) = &merged {
        problems.extend(validate::crds(&bp.spec.crds));
    }
    match merged {
        Some(mut bp) => {
            if problems.is_empty() {
                for crd in &mut bp.spec.crds {
                    crd.reconcile.hoist_rollout();
                }
            }
            finish(bp, problems)
        }
        None => Err(BlueprintError::Invalid { problems }),
    }
}

/// Concatenates CRDs into the first document; a second `spec.runtime` is a problem.
fn merge(docs: Vec<Document>, problems: &mut Vec<Problem>) -> Option<Blueprint> {
    let mut docs = docs.into_iter();
    let first = docs.next()?;
    let mut runtime_from = first.sets_runtime.then(|| first.blueprint.source.clone());
    let mut merged = first.blueprint;
    for doc in docs {
        if doc.sets_runtime {
            match &runtime_from {
                Some(earlier) => problems.push(Problem::new(
                    &doc.blueprint.source,
                    None,
                    "spec.runtime",
                    format!(
                        "runtime settings are already given in {}; only one document may set spec.runtime",
                        earlier.display()
                    ),
                )),
                None => {
                    runtime_from = Some(doc.blueprint.source.clone());
                    merged.spec.runtime = doc.blueprint.spec.runtime;
                }
            }
        }
        if let Some(sa) = doc.blueprint.spec.service_account {
            if merged.spec.service_account.is_some() {
                problems.push(Problem::new(
                    &doc.blueprint.source,
                    None,
                    "spec.serviceAccount",
                    "the identity is already given in an earlier document; only one document may set spec.serviceAccount",
                ));
            } else {
                merged.spec.service_account = Some(sa);
            }
        }
        merged.spec.crds.extend(doc.blueprint.spec.crds);
    }
    Some(merged)
}

/// The files to read: `path` itself, or the YAML files directly in it, sorted.
fn read_sources(path: &Path) -> Result<Vec<(PathBuf, String)>, BlueprintError> {
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BlueprintError::Read { path, source }
    };
    let files = if fs::metadata(path).map_err(read_err(path))?.is_dir() {
        let mut files = Vec::new();
        for entry in fs::read_dir(path).map_err(read_err(path))? {
            let file = entry.map_err(read_err(path))?.path();
            if is_yaml_file(&file) {
                files.push(file);
            }
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    if files.is_empty() {
        return Err(BlueprintError::Empty {
            path: path.to_path_buf(),
        });
    }
    files
        .into_iter()
        .map(|file| {
            let text = fs::read_to_string(&file).map_err(read_err(&file))?;
            Ok((file, text))
        })
        .collect()
}

fn is_yaml_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e == "yaml" || e == "yml");
    !hidden && yaml && path.is_file()
}

#[cfg(test)]
mod tests {
    use crate::testing::{HEADER, error_lines, fixture, problems};
    use std::time::Duration;

    use super::*;
    use crate::crd::Scope;
    use crate::reconcile::ReconcilerKind;

    #[test]
    fn the_full_example_parses() {
        let bp = load(&fixture("good/full.yaml")).expect("full example loads");
        assert_eq!(bp.metadata.name, "demo");
        let rt = &bp.spec.runtime;
        assert_eq!(rt.finalizers.timeout, Some(Duration::from_secs(300)));
        assert!(rt.leader_election.enabled);
        let web = &bp.spec.crds[0];
        assert_eq!(web.api_version(), "demo.inrun.dev/v1alpha1");
        assert_eq!(web.workers(rt), 4);
        assert_eq!(web.reconcile.kind(), ReconcilerKind::Hooks);
        assert_eq!(
            web.reconcile.hooks[0].limits.memory.map(|q| q.bytes()),
            Some(32 << 20)
        );
        assert_eq!(web.reconcile.external.len(), 4);
        assert_eq!(
            web.reconcile.requeue.as_ref().map(|r| r.or_when.len()),
            Some(1)
        );
        let serve = web.serve.as_ref().expect("serve block");
        assert_eq!(
            serve.targets[0].reconcile.kind(),
            ReconcilerKind::Constructor
        );
        assert_eq!(serve.targets[1].reconcile.kind(), ReconcilerKind::Remote);
        assert_eq!(web.source.file, fixture("good/full.yaml"));
        let db = &bp.spec.crds[1];
        assert_eq!(
            (db.scope, db.plural()),
            (Scope::Cluster, "databases".to_string())
        );
        assert_eq!(db.source.index, 1);
    }

    #[test]
    fn a_minimal_blueprint_gets_the_defaults() {
        let text = format!(
            "{HEADER}spec:\n  crds:\n    - {{ group: demo.inrun.dev, version: v1, kind: WebApp }}\n"
        );
        let bp = from_str(&text, "web.yaml").expect("minimal Blueprint loads");
        let rt = &bp.spec.runtime;
        assert_eq!((rt.workers, rt.health_port), (2, 8081));
        assert_eq!(rt.backoff.base, Duration::from_secs(1));
        assert_eq!(rt.backoff.max, Duration::from_secs(300));
        assert_eq!(rt.finalizers.timeout, None);
        assert!(!rt.leader_election.enabled);
        let crd = &bp.spec.crds[0];
        assert_eq!(crd.scope, Scope::Namespaced);
        assert_eq!(crd.plural(), "webapps");
        assert_eq!(crd.crd_name(), "webapps.demo.inrun.dev");
        assert_eq!(crd.workers(rt), 2);
        assert!(crd.reconcile.default);
        assert_eq!(crd.reconcile.kind(), ReconcilerKind::Declarative);
        assert_eq!(crd.serve, None);
    }

    #[test]
    fn a_directory_merges_its_yaml_files_in_name_order() {
        let bp = load(&fixture("good/split")).expect("split Blueprint loads");
        let kinds: Vec<_> = bp.spec.crds.iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["Cache", "Queue", "Worker"]);
        assert_eq!(bp.spec.runtime.workers, 3);
        assert_eq!(
            bp.spec.crds[2].source.file,
            fixture("good/split/20-apps.yaml")
        );
        assert_eq!(bp.spec.crds[2].source.index, 0);
        assert_eq!(bp.spec.crds[2].reconcile.kind(), ReconcilerKind::Remote);
    }

    #[test]
    fn load_all_keeps_each_document_separate() {
        let all = load_all(&fixture("good/split")).expect("split documents load");
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].spec.runtime.workers, 3);
        assert_eq!(all[1].spec.runtime.workers, 2);
        assert_eq!(all[2].spec.crds[0].kind, "Worker");
    }

    #[test]
    fn a_service_account_is_checked_and_set_by_one_document_only() {
        let text = format!(
            "{HEADER}spec:\n  serviceAccount: {{ namespace: team-a, name: tenant }}\n---\n{HEADER}spec:\n  serviceAccount: {{ namespace: team-b, name: other }}\n"
        );
        let err = from_str(&text, "blueprints/web.yaml").expect_err("two identities");
        assert!(
            err.to_string()
                .contains("spec.serviceAccount: the identity is already given"),
            "{err}"
        );
        let one = from_str(
            &format!("{HEADER}spec:\n  serviceAccount: {{ namespace: team-a, name: tenant }}\n"),
            "web.yaml",
        )
        .expect("one identity");
        let sa = one.spec.service_account.expect("set");
        assert_eq!(sa.username(), "system:serviceaccount:team-a:tenant");
        let bad = from_str(
            &format!("{HEADER}spec:\n  serviceAccount: {{ namespace: Team_A, name: tenant }}\n"),
            "web.yaml",
        )
        .expect_err("a bad namespace");
        assert!(
            bad.to_string().contains(
                "web.yaml: spec.serviceAccount: namespace \"Team_A\" must be a lowercase DNS label"
            ),
            "{bad}"
        );
        assert!(crate::model::ServiceAccountRef::parse("team-a/tenant").is_ok());
        assert!(crate::model::ServiceAccountRef::parse("tenant").is_err());
        assert!(crate::model::ServiceAccountRef::parse("team-a/").is_err());
    }

    #[test]
    fn a_requeue_floor_below_100ms_is_refused_and_1s_is_the_default() {
        let err = from_str(
            &format!("{HEADER}spec:\n  runtime: {{ minRequeue: 10ms }}\n"),
            "web.yaml",
        )
        .expect_err("too short");
        assert!(
            err.to_string()
                .contains("web.yaml: spec.runtime.minRequeue: must be at least 100ms"),
            "{err}"
        );
        let bp = from_str(&format!("{HEADER}spec: {{}}\n"), "web.yaml").expect("defaults");
        assert_eq!(
            bp.spec.runtime.min_requeue,
            std::time::Duration::from_secs(1)
        );
    }

    #[test]
    fn only_one_document_may_set_runtime() {
        let text = format!(
            "{HEADER}spec:\n  runtime: {{ workers: 1 }}\n---\n{HEADER}spec:\n  runtime: {{ workers: 3 }}\n"
        );
        let lines = error_lines(&text);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("blueprints/web.yaml: spec.runtime: runtime settings are already given in blueprints/web.yaml"), "{}", lines[0]);
    }

    #[test]
    fn shape_errors_in_several_files_are_all_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        let doc = |kind: &str| {
            format!(
                "{HEADER}spec:\n  crds:\n    - {{ group: demo.inrun.dev, version: v1, kind: {kind}, bogus: 1 }}\n"
            )
        };
        fs::write(dir.path().join("a.yaml"), doc("Alpha")).expect("write a");
        fs::write(dir.path().join("b.yml"), doc("Beta")).expect("write b");
        fs::write(dir.path().join(".hidden.yaml"), "{").expect("write hidden");
        let lines = problems(load(dir.path()).expect_err("both files are refused"));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("a.yaml: crd Alpha: spec.crds[0].bogus: unknown field `bogus`"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("b.yml: crd Beta: spec.crds[0].bogus: unknown field `bogus`"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn empty_and_missing_paths_are_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(matches!(
            load(dir.path()),
            Err(BlueprintError::Empty { .. })
        ));
        assert!(load_all(dir.path()).expect("empty directory").is_empty());
        fs::write(dir.path().join("empty.yaml"), "# nothing yet\n").expect("write");
        assert!(matches!(
            load(dir.path()),
            Err(BlueprintError::Empty { .. })
        ));
        let missing = dir.path().join("missing.yaml");
        assert!(matches!(load(&missing), Err(BlueprintError::Read { .. })));
    }

    #[test]
    fn a_loaded_blueprint_serializes_back_to_an_equal_one() {
        let bp = load(&fixture("good/full.yaml")).expect("full example loads");
        let text = serde_yaml_ng::to_string(&bp).expect("serializes");
        let again = from_str(&text, "again.yaml").expect("reloads");
        assert_eq!(again.spec.runtime, bp.spec.runtime);
        assert_eq!(again.spec.crds.len(), bp.spec.crds.len());
        for (a, b) in again.spec.crds.iter().zip(&bp.spec.crds) {
            assert_eq!(
                (&a.reconcile, &a.serve, &a.emit),
                (&b.reconcile, &b.serve, &b.emit)
            );
        }
    }
}
