//! The `cluster` and `http` imports through real guests, without a cluster: grants decide
//! each call, a refusal reaches the guest as an error, and a host call that never answers
//! still ends at the call's deadline.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use inrun::contract::Request;
use inrun::wasm::{
    CallFailure, ClusterGrant, ClusterReader, Engine, EngineSettings, Grants, HttpGrant, Limits,
    Namespaces, Plugin, ReadGrant, Scope, http_client,
};
use serde_json::{Value, json};

fn load(name: &str) -> Plugin {
    let dir = std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        });
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    let engine = Engine::new(EngineSettings {
        max_instances: 4,
        ..EngineSettings::default()
    })
    .expect("engine");
    engine
        .load_file(&path)
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

fn request(spec: Value) -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "Reader",
               "metadata": {"name": "r", "namespace": "team-a", "uid": "u1"},
               "spec": spec}),
        json!({}),
    )
}

/// Serves one ConfigMap, `team-a/settings`, and remembers the scopes it was asked for.
#[derive(Default)]
struct OneConfigMap {
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl ClusterReader for OneConfigMap {
    async fn get(
        &self,
        _api_version: &str,
        _kind: &str,
        scope: Scope<'_>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        self.asked.lock().expect("lock").push(scope.to_string());
        Ok(
            (scope == Scope::Namespace("team-a") && name == "settings").then(|| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings", "namespace": "team-a"},
                   "data": {"color": "teal"}})
            }),
        )
    }

    async fn list(
        &self,
        _api_version: &str,
        _kind: &str,
        _scope: Scope<'_>,
        labels: &[(String, String)],
    ) -> Result<Vec<Value>, String> {
        Ok(vec![json!({"labels": labels.len()}); 2])
    }
}

/// Never answers.
struct Stuck;

#[async_trait]
impl ClusterReader for Stuck {
    async fn get(&self, _: &str, _: &str, _: Scope<'_>, _: &str) -> Result<Option<Value>, String> {
        std::future::pending().await
    }

    async fn list(
        &self,
        _: &str,
        _: &str,
        _: Scope<'_>,
        _: &[(String, String)],
    ) -> Result<Vec<Value>, String> {
        std::future::pending().await
    }
}

fn config_map_reads(reader: Arc<dyn ClusterReader>) -> Grants {
    Grants {
        credentials: None,
        cluster: Some(ClusterGrant {
            reads: vec![ReadGrant {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespaces: Namespaces::Own(vec![]),
            }]
            .into(),
            reader,
        }),
        http: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_granted_nothing_gets_an_error_naming_the_kind() {
    let reader = load("inrun_test_reader");
    let err = reader
        .reconcile(
            &request(json!({"configMap": "settings"})),
            &Limits::default(),
            &Grants::default(),
        )
        .await
        .unwrap_err();
    match &err.failure {
        CallFailure::Returned(msg) => assert!(
            msg.contains("reading ConfigMap (v1) is not granted to plugin inrun_test_reader"),
            "{msg}"
        ),
        other => panic!("expected the guest's error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_reads_reach_the_reader_in_the_crs_namespace() {
    let plugin = load("inrun_test_reader");
    let served = Arc::new(OneConfigMap::default());
    let grants = config_map_reads(served.clone());
    let out = plugin
        .reconcile(
            &request(json!({"configMap": "settings", "key": "color", "selector": "a=b,c=d"})),
            &Limits::default(),
            &grants,
        )
        .await
        .expect("reconcile");
    let status = out.status.expect("status");
    assert_eq!(status["value"], "teal");
    assert_eq!(status["matched"], 2);
    assert_eq!(out.resources[0]["data"]["value"], "teal");
    assert_eq!(*served.asked.lock().expect("lock"), ["namespace team-a"]);

    // Another kind, or another namespace, never reaches the reader.
    for spec in [
        json!({"read": {"apiVersion": "v1", "kind": "Secret", "name": "s"}}),
        json!({"configMap": "settings", "namespace": "team-b"}),
        json!({"selector": "a!=b"}),
    ] {
        let err = plugin
            .reconcile(&request(spec.clone()), &Limits::default(), &grants)
            .await
            .unwrap_err();
        assert!(
            matches!(err.failure, CallFailure::Returned(_)),
            "{spec}: {err:?}"
        );
    }
    assert_eq!(served.asked.lock().expect("lock").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_never_answers_ends_at_the_calls_deadline() {
    let plugin = load("inrun_test_reader");
    let limits = Limits {
        deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    let started = Instant::now();
    let err = plugin
        .reconcile(
            &request(json!({"configMap": "settings"})),
            &limits,
            &config_map_reads(Arc::new(Stuck)),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let text = inrun::errors::chain(&err);
    assert!(text.contains("deadline"), "{text}");
}

/// A server on 127.0.0.1 answering `/hello` with text and anything else with 4 KiB.
async fn server() -> std::net::SocketAddr {
    use axum::response::IntoResponse;
    let app = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
        if uri.path() == "/hello" {
            ([("x-answer", "yes")], "hello").into_response()
        } else {
            "x".repeat(4096).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn fetch(url: String) -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "Fetcher",
               "metadata": {"name": "f", "namespace": "team-a"}, "spec": {"url": url}}),
        json!({}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_reaches_a_granted_host_within_its_size_cap_and_no_other() {
    let plugin = load("inrun_test_fetcher");
    let allowed = server().await;
    let other = server().await;
    let grants = Grants {
        credentials: None,
        cluster: None,
        http: Some(HttpGrant {
            hosts: vec![allowed.to_string()].into(),
            timeout: Duration::from_secs(2),
            max_response_bytes: 1024,
            client: http_client().expect("client"),
            canned: None,
        }),
    };
    let call = |url: String| {
        let (plugin, grants) = (plugin.clone(), grants.clone());
        async move {
            plugin
                .reconcile(&fetch(url), &Limits::default(), &grants)
                .await
        }
    };
    let out = call(format!("http://{allowed}/hello"))
        .await
        .expect("fetch");
    let status = out.status.expect("status");
    assert_eq!(status["code"], 200);
    assert_eq!(status["body"], "hello");

    let err = call(format!("http://{other}/hello")).await.unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains(&format!(
            "HTTP to {other} is not granted to plugin inrun_test_fetcher"
        )),
        "{err}"
    );
    let err = call(format!("http://{allowed}/big")).await.unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains("maxResponseSize of 1024 bytes"),
        "{err}"
    );
    let err = call(format!("http://user:pw@{allowed}/hello"))
        .await
        .unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains("user name or password"),
        "{err}"
    );
}
