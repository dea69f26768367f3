//! `inrun test`: golden cases for a Blueprint and its plugins. A case is a directory with
//! a `cr.yaml`, optional fixtures (`observed.yaml`, `http.yaml`, `external.yaml`), an
//! optional `case.yaml`, and `expected.yaml`, what `inrun render` prints for it. Nothing
//! live is called: a plugin request or an external call without a fixture fails.

mod diff;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::assemble::{Assembly, Services};
use crate::pass::fixtures::{ExternalFixture, Fixtures, HttpFixture};
use crate::reconcilers::ReconcilerKind;
use crate::render::{self, RenderInput};
use crate::secrets::StaticSecrets;
use crate::wasm::Engine;

/// The file that makes a directory a case.
pub const CR_FILE: &str = "cr.yaml";
/// The Blueprint a case uses unless its `case.yaml` names one: the nearest one above it.
pub const BLUEPRINT_FILE: &str = "blueprint.yaml";
/// The moment every case renders at unless its `case.yaml` says `now`, so deletion
/// timestamps and times left are the same on every run.
pub const DEFAULT_NOW: &str = "2025-01-01T00:00:00Z";

/// Why a case could not be run (as opposed to running and differing).
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// A file of the case could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `case.yaml` or `expected.yaml` is not what it should be.
    #[error("{}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A field of `case.yaml` is not usable.
    #[error("{}: {field}: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// No Blueprint: none named, none found above the case.
    #[error(
        "no {BLUEPRINT_FILE} in {} or a directory above it up to {}; name one in case.yaml (blueprint)",
        case.display(),
        top.display()
    )]
    NoBlueprint {
        /// The case directory.
        case: PathBuf,
        /// Where the search stopped.
        top: PathBuf,
    },
    /// A fixture file is bad.
    #[error(transparent)]
    Fixture(#[from] crate::pass::fixtures::FixtureError),
    /// The CR or observed objects could not be read.
    #[error(transparent)]
    Input(crate::render::RenderError),
    /// The Blueprint does not load.
    #[error("loading the Blueprint")]
    Blueprint(#[source] crate::blueprint::BlueprintError),
    /// The CR is reconciled by a remote reconciler, which a case cannot run without calling it.
    #[error(
        "{crd} is reconciled by a remote reconciler, which would call its endpoint; `inrun test` calls nothing live"
    )]
    Remote {
        /// The CRD.
        crd: String,
    },
    /// The output could not be turned into data.
    #[error("converting the output")]
    Output(#[source] serde_json::Error),
    /// Serialising the output failed.
    #[error("writing the output as YAML")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// `expected.yaml` is missing (run with `--update` to write it).
    #[error("{} is missing; `inrun test --update` writes it", .0.display())]
    NoExpected(PathBuf),
}

/// `case.yaml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    /// The Blueprint, relative to the case directory.
    #[serde(default)]
    blueprint: Option<PathBuf>,
    /// The serve target.
    #[serde(default)]
    target: Option<String>,
    /// Render as if the CR were being deleted.
    #[serde(default)]
    finalizing: bool,
    /// `namespace/name/key=value`.
    #[serde(default)]
    secrets: Vec<String>,
    /// The moment the case renders at (RFC 3339).
    #[serde(default)]
    now: Option<String>,
}

/// How one case ended.
#[derive(Debug)]
pub enum Verdict {
    /// The output is what `expected.yaml` holds.
    Passed,
    /// `expected.yaml` was (re)written with the output.
    Updated,
    /// The output differs: a unified diff, expected against got, of canonical YAML.
    Differs(String),
    /// The case could not be run.
    Broken(CaseError),
}

/// Every case under `dir`: each directory holding a `cr.yaml` (not looked into further),
/// sorted by path.
///
/// # Errors
/// A directory that cannot be listed.
pub fn discover(dir: &Path) -> Result<Vec<PathBuf>, CaseError> {
    let mut cases = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        if d.join(CR_FILE).is_file() {
            cases.push(d);
            continue;
        }
        let entries = std::fs::read_dir(&d).map_err(|source| CaseError::Io {
            path: d.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| CaseError::Io {
                path: d.clone(),
                source,
            })?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
    cases.sort();
    Ok(cases)
}

/// Where `inrun test DIR` looks, given the current directory `cwd`: DIR itself (with `..`
/// and symbolic links resolved) and the highest directory a case's Blueprint is looked for
/// in. That is `cwd` when DIR is `cwd` or under it, else DIR's parent (DIR itself when it
/// is `/`), so `inrun test ../project/tests` finds `../project/blueprint.yaml` and nothing
/// above `../project`, and no case takes a Blueprint from `/` or the current directory.
///
/// # Errors
/// DIR or `cwd` does not exist (or cannot be resolved).
pub fn search_bounds(dir: &Path, cwd: &Path) -> Result<(PathBuf, PathBuf), CaseError> {
    let resolve = |p: &Path| {
        std::fs::canonicalize(p).map_err(|source| CaseError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let cwd = resolve(cwd)?;
    let root = resolve(&cwd.join(dir))?;
    let top = if root.starts_with(&cwd) {
        cwd
    } else {
        root.parent().unwrap_or(&root).to_path_buf()
    };
    Ok((root, top))
}

/// The nearest `blueprint.yaml` in `case` or a directory above it, stopping at `top`
/// (included) when `case` is under it.
fn find_blueprint(case: &Path, top: &Path) -> Result<PathBuf, CaseError> {
    for dir in case.ancestors() {
        let candidate = dir.join(BLUEPRINT_FILE);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if dir == top {
            break;
        }
    }
    Err(CaseError::NoBlueprint {
        case: case.to_path_buf(),
        top: top.to_path_buf(),
    })
}

fn read_spec(case: &Path) -> Result<CaseSpec, CaseError> {
    let path = case.join("case.yaml");
    if !path.exists() {
        return Ok(CaseSpec::default());
    }
    let text = std::fs::read_to_string(&path).map_err(|source| CaseError::Io {
        path: path.clone(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(CaseSpec::default());
    }
    serde_yaml_ng::from_str(&text).map_err(|source| CaseError::Parse {
        path,
        what: "a mapping with blueprint, target, finalizing, secrets, now",
        source,
    })
}

/// The case's output as `inrun render` prints it, as data: a failed render is
/// `{error: <message>}`, so a case may expect a failure.
async fn render_case(engine: &Engine, case: &Path, top: &Path) -> Result<Value, CaseError> {
    let spec = read_spec(case)?;
    let spec_path = || case.join("case.yaml");
    let blueprint = match &spec.blueprint {
        Some(p) => case.join(p),
        None => find_blueprint(case, top)?,
    };
    let mut secrets = StaticSecrets::new();
    for s in &spec.secrets {
        secrets = secrets.parse(s).map_err(|e| CaseError::Field {
            path: spec_path(),
            field: "secrets",
            message: e.to_string(),
        })?;
    }
    let now = match &spec.now {
        Some(t) => t.as_str(),
        None => DEFAULT_NOW,
    };
    let now = now
        .parse::<render::Timestamp>()
        .map_err(|e| CaseError::Field {
            path: spec_path(),
            field: "now",
            message: format!("{now:?} is not an RFC 3339 time: {e}"),
        })?;
    let mut input = RenderInput::from_file(&case.join(CR_FILE)).map_err(CaseError::Input)?;
    input.now = Some(now);
    let file = |name: &str| Some(case.join(name)).filter(|p| p.exists());
    if let Some(observed) = file("observed.yaml") {
        input = input.observing(&observed).map_err(CaseError::Input)?;
    }
    let fixtures = Fixtures {
        // Without observed.yaml children are not observed (as `inrun render` without
        // --observed) and the cluster holds nothing: reads answer not-found.
        observed: Some(input.observed.clone().unwrap_or_default()),
        http: Some(match file("http.yaml") {
            Some(p) => HttpFixture::from_file(&p)?,
            None => HttpFixture::empty("http.yaml (missing from the case)"),
        }),
        external: Some(match file("external.yaml") {
            Some(p) => ExternalFixture::from_file(&p)?,
            None => ExternalFixture::empty("external.yaml (missing from the case)"),
        }),
    };
    let services = fixtures.serve(Services::new(Arc::new(secrets)));
    let assembly = Assembly::load_with(&blueprint, engine, &services)
        .await
        .map_err(CaseError::Blueprint)?;
    refuse_remote(&assembly, &input.object)?;
    match render::render(&assembly, input, spec.target.as_deref(), spec.finalizing).await {
        Ok(out) => serde_json::to_value(&out).map_err(CaseError::Output),
        Err(e) => Ok(serde_json::json!({"error": crate::errors::chain(&e)})),
    }
}

/// Refuses a CR whose CRD has a remote reconciler (default or a serve target's).
fn refuse_remote(assembly: &Assembly, cr: &Value) -> Result<(), CaseError> {
    let text = |p: &str| cr.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let Some(crd) = assembly.crd_for(text("/apiVersion"), text("/kind")) else {
        // The render names the unknown kind.
        return Ok(());
    };
    let remote = std::iter::once(&crd.default)
        .chain(crd.targets.iter().map(|(_, p)| p))
        .any(|p| p.reconciler.kind() == ReconcilerKind::Remote);
    if remote {
        return Err(CaseError::Remote {
            crd: crd.spec.crd_name(),
        });
    }
    Ok(())
}

/// `value` with every mapping's keys sorted, so equal data prints the same.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Runs the case in `case` (its Blueprint found no higher than `top`); with `update`,
/// writes `expected.yaml` instead of comparing.
pub async fn run_case(engine: &Engine, case: &Path, top: &Path, update: bool) -> Verdict {
    match compare(engine, case, top, update).await {
        Ok(v) => v,
        Err(e) => Verdict::Broken(e),
    }
}

/// Writes `text` to a new file beside `path` and renames it over `path`: a symbolic link
/// at `path` (a case from someone else's repository) is replaced, never written through.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut builder = tempfile::Builder::new();
    // The mode a file written in place gets (a temporary file's own is owner-only).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut new = builder.tempfile_in(path.parent().unwrap_or(Path::new(".")))?;
    new.write_all(text.as_bytes())?;
    new.persist(path).map(drop).map_err(|e| e.error)
}

async fn compare(
    engine: &Engine,
    case: &Path,
    top: &Path,
    update: bool,
) -> Result<Verdict, CaseError> {
    let got = render_case(engine, case, top).await?;
    let expected_path = case.join("expected.yaml");
    if update {
        let text = serde_yaml_ng::to_string(&got).map_err(CaseError::Yaml)?;
        replace_file(&expected_path, &text).map_err(|source| CaseError::Io {
            path: expected_path,
            source,
        })?;
        return Ok(Verdict::Updated);
    }
    if !expected_path.exists() {
        return Err(CaseError::NoExpected(expected_path));
    }
    let text = std::fs::read_to_string(&expected_path).map_err(|source| CaseError::Io {
        path: expected_path.clone(),
        source,
    })?;
    let expected: Value = serde_yaml_ng::from_str(&text).map_err(|source| CaseError::Parse {
        path: expected_path,
        what: "what `inrun render` prints for the case, as YAML",
        source,
    })?;
    let (expected, got) = (canonical(&expected), canonical(&got));
    if expected == got {
        return Ok(Verdict::Passed);
    }
    let show = |v: &Value| serde_yaml_ng::to_string(v).map_err(CaseError::Yaml);
    Ok(Verdict::Differs(diff::unified(
        "expected.yaml",
        &show(&expected)?,
        "got",
        &show(&got)?,
        3,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_the_directories_holding_a_cr_in_path_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for case in ["b", "a", "group/c", "a/nested"] {
            let d = dir.path().join(case);
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join(CR_FILE), "{}").expect("write");
        }
        std::fs::create_dir_all(dir.path().join("empty")).expect("mkdir");
        let found: Vec<PathBuf> = discover(dir.path())
            .expect("discover")
            .into_iter()
            .map(|p| p.strip_prefix(dir.path()).expect("under").to_path_buf())
            .collect();
        assert_eq!(
            found,
            [
                PathBuf::from("a"),
                PathBuf::from("b"),
                PathBuf::from("group/c")
            ]
        );
    }

    #[test]
    fn the_nearest_blueprint_above_a_case_is_used_but_none_above_the_top() {
        let dir = tempfile::tempdir().expect("tempdir");
        let top = dir.path().join("project");
        let case = top.join("tests/one");
        std::fs::create_dir_all(&case).expect("mkdir");
        std::fs::write(dir.path().join(BLUEPRINT_FILE), "").expect("write");
        assert!(matches!(
            find_blueprint(&case, &top),
            Err(CaseError::NoBlueprint { .. })
        ));
        std::fs::write(top.join(BLUEPRINT_FILE), "").expect("write");
        assert_eq!(
            find_blueprint(&case, &top).expect("found"),
            top.join(BLUEPRINT_FILE)
        );
        std::fs::write(case.join(BLUEPRINT_FILE), "").expect("write");
        assert_eq!(
            find_blueprint(&case, &top).expect("found"),
            case.join(BLUEPRINT_FILE)
        );
    }

    #[test]
    fn a_directory_outside_the_current_one_bounds_the_search_by_its_parent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("resolve");
        let (cwd, project) = (base.join("work"), base.join("project"));
        let case = project.join("tests/one");
        std::fs::create_dir_all(&case).expect("mkdir");
        std::fs::create_dir_all(cwd.join("tests/two")).expect("mkdir");
        // Stray Blueprints: above the project, and in the current directory (which
        // `work/../project` passes through if read as text).
        std::fs::write(base.join(BLUEPRINT_FILE), "").expect("write");
        std::fs::write(cwd.join(BLUEPRINT_FILE), "").expect("write");
        for given in [
            PathBuf::from("../project/tests"),
            project.join("tests"),
            PathBuf::from("../work/../project/tests"),
        ] {
            let (root, top) = search_bounds(&given, &cwd).expect("bounds");
            assert_eq!(
                (&root, &top),
                (&project.join("tests"), &project),
                "{given:?}"
            );
            assert!(
                matches!(
                    find_blueprint(&root.join("one"), &top),
                    Err(CaseError::NoBlueprint { .. })
                ),
                "{given:?}"
            );
        }
        std::fs::write(project.join(BLUEPRINT_FILE), "").expect("write");
        let (root, top) = search_bounds(Path::new("../project/tests"), &cwd).expect("bounds");
        assert_eq!(
            find_blueprint(&root.join("one"), &top).expect("found"),
            project.join(BLUEPRINT_FILE)
        );
        // The project directory itself: its own Blueprint, one level above the cases.
        let (root, top) = search_bounds(&project, &cwd).expect("bounds");
        assert_eq!((&root, &top), (&project, &base));
        // Under the current directory, the current directory is the bound, as it was.
        for given in ["tests", "./tests/../tests", "."] {
            let (root, top) = search_bounds(Path::new(given), &cwd).expect("bounds");
            assert_eq!(&top, &cwd, "{given}");
            assert!(root.starts_with(&cwd), "{given}");
        }
        assert!(matches!(
            search_bounds(Path::new("missing"), &cwd),
            Err(CaseError::Io { .. })
        ));
    }

    #[test]
    fn canonical_form_ignores_key_order() {
        let a: Value =
            serde_yaml_ng::from_str("b: 1\na: {d: 2, c: [x, {f: 1, e: 2}]}\n").expect("a");
        let b: Value =
            serde_yaml_ng::from_str("a: {c: [x, {e: 2, f: 1}], d: 2}\nb: 1\n").expect("b");
        assert_eq!(canonical(&a), canonical(&b));
        let text = serde_yaml_ng::to_string(&canonical(&a)).expect("yaml");
        assert!(text.starts_with("a:\n"), "{text}");
    }
}
