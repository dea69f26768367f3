//! Canned answers for testing a Blueprint and its plugins offline (`inrun render
//! --observed/--http-fixture/--external-fixture`, `inrun test`): observed objects serve
//! plugins' cluster reads, an HTTP fixture answers plugins' `http.fetch`, an external
//! fixture answers `reconcile.external` calls by name. The Blueprint's grants still decide
//! what a plugin may ask; a fixture only replaces the network behind them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use inrun_reconcilers::assemble::Services;
use inrun_reconcilers::external::CannedExternal;
use inrun_wasm::{CannedHttp, CannedReply, ClusterReader, Scope};

/// Why a fixture file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not what its kind of fixture holds.
    #[error("{}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the file should hold.
        what: &'static str,
        /// The parser's error, with the line and field.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// An entry is well-formed YAML but not usable.
    #[error("{}: {field}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The entry's field, e.g. `[2].request.method`.
        field: String,
        /// Why.
        message: String,
    },
}

fn read(path: &Path) -> Result<String, FixtureError> {
    std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The name a fixture is shown by in messages: its file name.
fn shown(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Objects taken to be in the cluster: a plugin's `cluster.get`/`list` is served from
/// them. Something not among them is not found (get) or absent (list).
#[derive(Debug, Clone, Default)]
pub struct ObservedCluster {
    objects: Vec<Value>,
}

impl ObservedCluster {
    /// A cluster holding `objects` (whole Kubernetes objects with apiVersion, kind and
    /// metadata).
    pub fn new(objects: Vec<Value>) -> Self {
        ObservedCluster { objects }
    }

    /// The objects of `api_version` `kind` within `scope`, sorted by namespace and name so
    /// a list answers the same every time.
    fn of_kind<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
        scope: Scope<'a>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str);
            let in_scope = match scope {
                Scope::Namespace(ns) => text("/metadata/namespace") == Some(ns),
                Scope::AllNamespaces => true,
                Scope::Cluster => text("/metadata/namespace").is_none_or(str::is_empty),
            };
            text("/apiVersion") == Some(api_version) && text("/kind") == Some(kind) && in_scope
        })
    }
}

#[async_trait]
impl ClusterReader for ObservedCluster {
    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        Ok(self
            .of_kind(api_version, kind, scope)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .cloned())
    }

    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        labels: &[(String, String)],
    ) -> Result<Vec<Value>, String> {
        let mut found: Vec<Value> = self
            .of_kind(api_version, kind, scope)
            .filter(|o| {
                labels.iter().all(|(k, v)| {
                    o.pointer("/metadata/labels")
                        .and_then(|l| l.get(k))
                        .and_then(Value::as_str)
                        == Some(v.as_str())
                })
            })
            .cloned()
            .collect();
        let key = |o: &Value| {
            let text = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (text("/metadata/namespace"), text("/metadata/name"))
        };
        found.sort_by_key(key);
        Ok(found)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpEntry {
    request: HttpRequestSpec,
    #[serde(default)]
    response: HttpResponseSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpRequestSpec {
    #[serde(default)]
    method: Option<String>,
    url: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpResponseSpec {
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Text as is; any other value is sent as its JSON text.
    #[serde(default)]
    body: Option<Value>,
}

/// Canned answers for plugins' HTTP requests, matched by method and exact URL.
#[derive(Debug, Clone)]
pub struct HttpFixture {
    source: String,
    answers: Vec<(String, String, CannedReply)>,
}

impl HttpFixture {
    /// Reads a YAML list of `{request: {method (default GET), url}, response: {status
    /// (default 200), headers, body}}`.
    ///
    /// # Errors
    /// [`FixtureError`] naming the file and, for a bad entry, its field.
    pub fn from_file(path: &Path) -> Result<Self, FixtureError> {
        let text = read(path)?;
        let entries: Vec<HttpEntry> = if text.trim().is_empty() {
            Vec::new()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|source| FixtureError::Parse {
                path: path.to_path_buf(),
                what: "a list of {request: {method, url}, response: {status, headers, body}}",
                source,
            })?
        };
        let invalid = |field: String, message: String| FixtureError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        };
        let mut answers = Vec::new();
        for (i, e) in entries.into_iter().enumerate() {
            let method = e.request.method.as_deref().unwrap_or("GET").to_string();
            if method.is_empty() || !method.chars().all(|c| c.is_ascii_alphabetic()) {
                return Err(invalid(
                    format!("[{i}].request.method"),
                    format!("{method:?} is not an HTTP method"),
                ));
            }
            if e.request.url.is_empty() {
                return Err(invalid(format!("[{i}].request.url"), "is empty".into()));
            }
            let status = e.response.status.unwrap_or(200);
            if !(100..=599).contains(&status) {
                return Err(invalid(
                    format!("[{i}].response.status"),
                    format!("{status} is not an HTTP status"),
                ));
            }
            let body = match e.response.body {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) => s.into_bytes(),
                Some(other) => other.to_string().into_bytes(),
            };
            answers.push((
                method.to_ascii_uppercase(),
                e.request.url,
                CannedReply {
                    status,
                    headers: e.response.headers.into_iter().collect(),
                    body,
                },
            ));
        }
        Ok(HttpFixture {
            source: shown(path),
            answers,
        })
    }

    /// No answers at all, so every request fails naming `source` (`inrun test` for a case
    /// without `http.yaml`: no request goes out).
    pub fn empty(source: &str) -> Self {
        HttpFixture {
            source: source.to_string(),
            answers: Vec::new(),
        }
    }
}

impl CannedHttp for HttpFixture {
    fn respond(&self, method: &str, url: &str, normalized: &str) -> Result<CannedReply, String> {
        self.answers
            .iter()
            .find(|(m, u, _)| m == method && u == url)
            .or_else(|| {
                self.answers
                    .iter()
                    .find(|(m, u, _)| m == method && u == normalized)
            })
            .map(|(_, _, reply)| reply.clone())
            .ok_or_else(|| format!("{method} {url}: {} has no answer for it", self.source))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExternalEntry {
    /// `None` only when the key is absent: `result: null` is `Some(Value::Null)`, a
    /// legitimate answer (an empty HTTP reply, a Prometheus query with no series).
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// A key that is there, whatever its value (`null` included): plain `Option<Value>` would
/// read `null` as absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Canned results of `reconcile.external` calls, by the call's `name`.
#[derive(Debug, Clone)]
pub struct ExternalFixture {
    source: String,
    answers: BTreeMap<String, Result<Value, String>>,
}

impl ExternalFixture {
    /// Reads a YAML mapping from call name to `{result: <value>}` (`null` included) or
    /// `{error: <message>}` (a failure, which the call's `onError` handles as it would a
    /// real one).
    ///
    /// # Errors
    /// [`FixtureError`] naming the file and, for a bad entry, its name.
    pub fn from_file(path: &Path) -> Result<Self, FixtureError> {
        let text = read(path)?;
        let entries: BTreeMap<String, ExternalEntry> = if text.trim().is_empty() {
            BTreeMap::new()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|source| FixtureError::Parse {
                path: path.to_path_buf(),
                what: "a mapping from call name to {result: <value>} or {error: <message>}",
                source,
            })?
        };
        let mut answers = BTreeMap::new();
        for (name, e) in entries {
            let answer = match (e.result, e.error) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(error),
                _ => {
                    return Err(FixtureError::Invalid {
                        path: path.to_path_buf(),
                        field: name,
                        message: "give exactly one of result or error".into(),
                    });
                }
            };
            answers.insert(name, answer);
        }
        Ok(ExternalFixture {
            source: shown(path),
            answers,
        })
    }

    /// No results at all, so every call fails naming `source` (`inrun test` for a case
    /// without `external.yaml`: nothing is called).
    pub fn empty(source: &str) -> Self {
        ExternalFixture {
            source: source.to_string(),
            answers: BTreeMap::new(),
        }
    }
}

impl CannedExternal for ExternalFixture {
    fn answer(&self, name: &str) -> Option<Result<Value, String>> {
        self.answers.get(name).cloned()
    }

    fn source_name(&self) -> String {
        self.source.clone()
    }
}

/// Everything a render is given besides the Blueprint and the CR.
#[derive(Debug, Clone, Default)]
pub struct Fixtures {
    /// Objects in the cluster: children are judged on them and plugins' cluster reads are
    /// served from them; `None`: children are Unknown and cluster reads fail.
    pub observed: Option<Vec<Value>>,
    /// Answers for plugins' HTTP; `None`: requests go out.
    pub http: Option<HttpFixture>,
    /// Results of external calls; `None`: calls are made.
    pub external: Option<ExternalFixture>,
}

impl Fixtures {
    /// `services` with the cluster, plugin HTTP and external calls served from the
    /// fixtures that are given.
    pub fn serve(&self, mut services: Services) -> Services {
        if let Some(objects) = &self.observed {
            services = services.with_cluster(Arc::new(ObservedCluster::new(objects.clone())));
        }
        if let Some(http) = &self.http {
            services = services.with_canned_http(Arc::new(http.clone()));
        }
        if let Some(external) = &self.external {
            services = services.with_canned_external(Arc::new(external.clone()));
        }
        services
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fixture.yaml");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    fn cm(ns: Option<&str>, name: &str, labels: Value) -> Value {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}});
        if let Some(ns) = ns {
            o["metadata"]["namespace"] = json!(ns);
        }
        o
    }

    #[test]
    fn observed_objects_answer_gets_and_sorted_lists_in_their_scope() {
        futures::executor::block_on(observed_objects_answer());
    }

    async fn observed_objects_answer() {
        let cluster = ObservedCluster::new(vec![
            cm(Some("a"), "z", json!({"app": "web"})),
            cm(Some("a"), "m", json!({"app": "web"})),
            cm(Some("b"), "m", json!({"app": "db"})),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
        ]);
        let get = cluster
            .get("v1", "ConfigMap", Scope::Namespace("b"), "m")
            .await;
        assert_eq!(
            get.expect("get").expect("found")["metadata"]["namespace"],
            "b"
        );
        let missing = cluster
            .get("v1", "ConfigMap", Scope::Namespace("c"), "m")
            .await;
        assert_eq!(missing, Ok(None));
        let web = [("app".to_string(), "web".to_string())];
        let names: Vec<Value> = cluster
            .list("v1", "ConfigMap", Scope::AllNamespaces, &web)
            .await
            .expect("list")
            .into_iter()
            .map(|o| o["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("m"), json!("z")]);
        let ns = cluster.get("v1", "Namespace", Scope::Cluster, "a").await;
        assert!(ns.expect("get").is_some());
        let other_version = cluster
            .list("v2", "ConfigMap", Scope::AllNamespaces, &[])
            .await;
        assert_eq!(other_version, Ok(vec![]));
    }

    #[test]
    fn an_http_fixture_answers_by_method_and_url_and_names_an_unmatched_request() {
        let (_dir, path) = file(
            "- request: {url: 'http://api.test/v1'}\n  response: {status: 201, headers: {content-type: application/json}, body: {ok: true}}\n- request: {method: post, url: 'http://api.test/v1'}\n  response: {body: posted}\n",
        );
        let f = HttpFixture::from_file(&path).expect("fixture");
        let got = f
            .respond("GET", "http://api.test/v1", "http://api.test/v1")
            .expect("answer");
        assert_eq!(got.status, 201);
        assert_eq!(got.body, br#"{"ok":true}"#);
        assert_eq!(
            got.headers,
            [("content-type".into(), "application/json".into())]
        );
        let post = f.respond("POST", "http://api.test/v1", "http://api.test/v1");
        assert_eq!(post.expect("answer").body, b"posted");
        let err = f
            .respond("DELETE", "http://api.test/v1", "http://api.test/v1")
            .unwrap_err();
        assert_eq!(
            err,
            "DELETE http://api.test/v1: fixture.yaml has no answer for it"
        );
    }

    #[test]
    fn a_bad_http_fixture_entry_is_named_by_file_and_field() {
        let (_dir, path) = file("- request: {method: 'GE T', url: 'http://x/'}\n");
        let err = HttpFixture::from_file(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("fixture.yaml: [0].request.method: \"GE T\" is not an HTTP method"),
            "{err}"
        );
        let (_dir, path) = file("- request: {url: 'http://x/'}\n  reply: {}\n");
        let err = HttpFixture::from_file(&path).unwrap_err();
        assert!(matches!(err, FixtureError::Parse { .. }), "{err}");
    }

    #[test]
    fn an_external_fixture_holds_results_and_failures_by_name() {
        let (_dir, path) =
            file("replicas: {result: {value: 3}}\ndb: {error: connection refused}\n");
        let f = ExternalFixture::from_file(&path).expect("fixture");
        assert_eq!(f.answer("replicas"), Some(Ok(json!({"value": 3}))));
        assert_eq!(f.answer("db"), Some(Err("connection refused".into())));
        assert_eq!(f.answer("other"), None);
        assert_eq!(f.source_name(), "fixture.yaml");
        let (_dir, path) = file("both: {result: 1, error: x}\n");
        let err = ExternalFixture::from_file(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("both: give exactly one of result or error"),
            "{err}"
        );
        let (_dir, path) = file("neither: {}\n");
        let err = ExternalFixture::from_file(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("neither: give exactly one of result or error"),
            "{err}"
        );
    }

    #[test]
    fn a_null_external_result_is_an_answer_not_a_missing_one() {
        let (_dir, path) = file("empty: {result: null}\ntilde: {result: ~}\n");
        let f = ExternalFixture::from_file(&path).expect("fixture");
        assert_eq!(f.answer("empty"), Some(Ok(Value::Null)));
        assert_eq!(f.answer("tilde"), Some(Ok(Value::Null)));
        let (_dir, path) = file("both: {result: null, error: x}\n");
        let err = ExternalFixture::from_file(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("both: give exactly one of result or error"),
            "{err}"
        );
    }
}
