//! Operating the host, end to end on a real kube-apiserver: the generated RBAC is enough
//! (and checked), the health port's metrics move with reconciles and have
//! controller-runtime's names, labels and buckets, probes answer as controller-runtime's
//! (a standby is ready), `/blueprint` matches
//! the file, the console renders in Chromium, leader election hands over between two
//! `inrun run` processes, a reconcile is one OpenTelemetry trace at an OTLP receiver. The Helm chart's tests are in `e2e_chart.rs`.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::sync::Arc;

use inrun::assemble::Assembly;
use inrun::generate::rbac::{self, RbacOptions};
use inrun::runtime::{RunError, RunOptions};
use inrun::server::ConsoleAccess;
use inrun::wasm::{Engine, EngineSettings};
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use support::*;
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn webapp_blueprint(group: &str, extra_managed: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: ops}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {{location: "{webapp}"}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
{extra_managed}"#,
        webapp = plugin("inrun_plugin_webapp")
    )
}

fn webapp_cr(group: &str, name: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: {name}}}\nspec: {{image: 'nginx:1.27', replicas: 1}}\n"
    )
}

/// A host running in-process with `client`.
struct InProcess {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), RunError>>,
    assembly: Arc<Assembly>,
    metrics: Arc<inrun::metrics::Metrics>,
    _dir: tempfile::TempDir,
}

async fn assemble(
    blueprint: &str,
    metrics: &Arc<inrun::metrics::Metrics>,
) -> (Arc<Assembly>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("blueprint.yaml");
    std::fs::write(&path, blueprint).expect("write blueprint");
    let engine = Engine::new(EngineSettings {
        max_instances: 16,
        observer: metrics.clone(),
        ..EngineSettings::default()
    })
    .expect("engine");
    let assembly = Arc::new(Assembly::load(&path, &engine).await.expect("blueprint"));
    (assembly, dir)
}

async fn start(blueprint: &str, client: Client, install_crds: bool) -> InProcess {
    let metrics = Arc::new(inrun::metrics::Metrics::default());
    let (assembly, dir) = assemble(blueprint, &metrics).await;
    let (tx, rx) = watch::channel(false);
    let options = RunOptions {
        install_crds,
        instance: "ops-e2e".into(),
        metrics: metrics.clone(),
        lock_namespace: None,
    };
    let task = tokio::spawn(inrun::runtime::run(assembly.clone(), client, options, rx));
    InProcess {
        shutdown: tx,
        task,
        assembly,
        metrics,
        _dir: dir,
    }
}

impl InProcess {
    async fn stop(self) {
        let _ = self.shutdown.send(true);
        let stopped = tokio::time::timeout(WAIT, self.task).await;
        assert!(
            matches!(stopped, Ok(Ok(Ok(())))),
            "host did not stop cleanly: {stopped:?}"
        );
    }
}

/// A client acting as a ServiceAccount bound to what `inrun generate rbac --install-crds`
/// prints for `blueprint` (as production runs the host).
async fn generated(blueprint: &str) -> Client {
    let parsed = inrun::blueprint::from_str(blueprint, "blueprint.yaml").expect("blueprint");
    let identity =
        support::identity::Identity::generated(&parsed, &support::identity::Identity::options())
            .await;
    kube::Client::try_from(identity.config()).expect("client")
}

/// A ServiceAccount in `ns` and a token for it from the TokenRequest API.
async fn service_account_token(ns: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(client(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    api.create(&PostParams::default(), &sa)
        .await
        .expect("create service account");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("token request");
    token
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_runs_on_exactly_the_generated_rbac_and_refuses_a_blueprint_needing_more()
-> TestResult {
    let cp = ControlPlane::shared();
    let group = unique_group("rbac");
    let blueprint_text = webapp_blueprint(&group, "");
    let blueprint = inrun::blueprint::from_str(&blueprint_text, "rbac.yaml")?;
    let sa_ns = cp.namespace("inrun-sa").await?;
    let name = format!("inrun-{}", group.split('.').next().unwrap_or("rbac"));
    let options = RbacOptions {
        name: name.clone(),
        namespace: sa_ns.clone(),
        service_account: "inrun".into(),
        install_crds: false,
        blueprint_resources: false,
        impersonate: Vec::new(),
        tenant_accounts: None,
    };
    // The operator's steps: CRDs and RBAC from `inrun generate`, applied by an admin.
    apply_all(&inrun::generate::crds(&blueprint)).await;
    apply_all(&rbac::manifests(&blueprint, &options)).await;
    let token = service_account_token(&sa_ns, "inrun").await;

    // Nothing beyond the generated RBAC: the ServiceAccount holds no other grant.
    let host = start(&blueprint_text, cp.client_with_token(&token), false).await;
    let ns = cp.namespace("rbac").await?;
    let ar = resource(&group, "WebApp");
    apply_cr(&ar, &ns, &webapp_cr(&group, "shop")).await;
    eventually("the Deployment", || get(deployments(), Some(&ns), "shop")).await;
    eventually("the Service", || get(services(), Some(&ns), "shop")).await;
    eventually("the CR to be Ready", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        (reconciled(&cr)?.0 == "True").then_some(())
    })
    .await;
    event(&ns, "shop", "Reconciled").await;
    assert!(!host.task.is_finished(), "the host stopped early");
    host.stop().await;

    // The same identity with a Blueprint that also manages ConfigMaps: refused at startup.
    let wider = webapp_blueprint(&group, "          - {apiVersion: v1, kind: ConfigMap}\n");
    let refused = start(&wider, cp.client_with_token(&token), false).await;
    let result = tokio::time::timeout(WAIT, refused.task).await??;
    let err = result.expect_err("a Blueprint needing more RBAC must not start");
    let message = inrun::errors::chain(&err);
    assert!(
        message.contains("lacks permissions")
            && message.contains("list configmaps.core cluster-wide"),
        "unclear message: {message}"
    );
    assert!(
        !message.contains("deployments"),
        "only what is missing is listed: {message}"
    );
    Ok(())
}

/// GETs `path` from the router without a socket, as a client of `127.0.0.1` (the Host the
/// console answers to): (status, body).
async fn call(router: &axum::Router, path: &str) -> (u16, String) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .uri(path)
        .header("host", "127.0.0.1")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of one series in a Prometheus text page (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_reconciles_and_blueprint_matches_the_loaded_file() -> TestResult {
    let group = unique_group("metrics");
    let text = webapp_blueprint(&group, "");
    let host = start(&text, generated(&text).await, true).await;
    let state = inrun::server::State::new(host.assembly.clone(), host.metrics.clone());
    let router = inrun::server::probes(state.clone(), true);
    let console = inrun::server::console(state.clone(), ConsoleAccess::loopback());
    let controller = format!("webapps.{group}");

    // The health port answers probes and scrapes, and shows nothing of the tenants: their
    // endpoints, plugins and errors are on the console port (loopback by default). It
    // serves the host's own Blueprint at /blueprint, as the console does, unless told not.
    let (status, own) = call(&router, "/blueprint").await;
    assert_eq!(status, 200);
    assert_eq!(own, call(&console, "/blueprint").await.1);
    let without = inrun::server::probes(state.clone(), false);
    assert_eq!(call(&without, "/blueprint").await.0, 404);
    for path in ["/", "/state", "/tenants", "/crs"] {
        assert_eq!(
            call(&router, path).await.0,
            404,
            "{path} on the health port"
        );
        assert_eq!(
            call(&console, path).await.0,
            200,
            "{path} on the console port"
        );
    }
    assert_eq!(call(&console, "/metrics").await.0, 404);

    // Probes pass while the host serves them, controllers running or not.
    for probe in ["/healthz", "/readyz"] {
        let (status, body) = call(&router, probe).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "{probe}");
    }
    let (_, before) = call(&router, "/metrics").await;
    let success = format!(
        "controller_runtime_reconcile_total{{controller=\"{controller}\",result=\"success\"}}"
    );
    assert_eq!(sample(&before, &success), 0.0);

    let ns = ControlPlane::shared().namespace("metrics").await?;
    let ar = resource(&group, "WebApp");
    apply_cr(&ar, &ns, &webapp_cr(&group, "one")).await;
    apply_cr(&ar, &ns, &webapp_cr(&group, "two")).await;
    for name in ["one", "two"] {
        eventually("the CR to be Ready", || async {
            let cr = get(&ar, Some(&ns), name).await?;
            (reconciled(&cr)?.0 == "True").then_some(())
        })
        .await;
    }
    // A CR's status is written inside its pass; the pass is counted when it returns.
    let after = eventually("both passes to be counted as successes", || async {
        let (_, text) = call(&router, "/metrics").await;
        (sample(&text, &success) >= 2.0).then_some(text)
    })
    .await;
    let queue = format!("controller=\"{controller}\",name=\"{controller}\"");
    let adds = format!("workqueue_adds_total{{{queue}}}");
    assert!(sample(&after, &adds) >= 2.0);
    // Once the passes are done nothing is queued.
    let depth = format!("workqueue_depth{{{queue},priority=\"\"}}");
    eventually("the queue depth to return to 0", || async {
        let (_, text) = call(&router, "/metrics").await;
        (sample(&text, &depth) == 0.0).then_some(())
    })
    .await;
    let count =
        format!("controller_runtime_reconcile_time_seconds_count{{controller=\"{controller}\"}}");
    assert!(sample(&after, &count) >= 2.0);
    let plugin = &host.assembly.crds()[0].default.plugins()[0].name.clone();
    // One Blueprint outside the fleet: its plugins belong to no tenant (an empty label).
    let calls =
        format!("inrun_plugin_calls_total{{tenant=\"\",plugin=\"{plugin}\",outcome=\"ok\"}}");
    assert!(sample(&after, &calls) >= 2.0, "{after}");
    assert!(after.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));
    // Each CR waited in the queue between its change and its reconcile, and that is measured.
    let waited = format!("workqueue_queue_duration_seconds_count{{{queue}}}");
    assert!(sample(&after, &waited) >= 2.0, "{after}");
    // The plugin was compiled (or found loaded) when the Blueprint was assembled.
    let loads: f64 = ["memory", "cache", "compiled"]
        .iter()
        .map(|s| {
            sample(
                &after,
                &format!("inrun_plugin_loads_total{{tenant=\"\",source=\"{s}\"}}"),
            )
        })
        .sum();
    assert!(loads >= 1.0, "{after}");
    assert!(sample(&after, "inrun_caches_synced") >= 1.0, "{after}");

    // A failing reconcile shows up as an error: an invalid image makes the plugin fail.
    let bad = format!(
        "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: bad}}\nspec: {{replicas: 1}}\n"
    );
    apply_cr(&ar, &ns, &bad).await;
    event(&ns, "bad", "ReconcileError").await;
    // The event is written during the pass; the pass is counted when it returns.
    let errors =
        format!("controller_runtime_reconcile_errors_total{{controller=\"{controller}\"}}");
    let failed = eventually("the failed reconcile to be counted", || async {
        let (_, text) = call(&router, "/metrics").await;
        (sample(&text, &errors) >= 1.0).then_some(text)
    })
    .await;
    // The plugin's own error is told apart from traps, deadlines and memory caps.
    let returned =
        format!("inrun_plugin_calls_total{{tenant=\"\",plugin=\"{plugin}\",outcome=\"returned\"}}");
    assert!(sample(&failed, &returned) >= 1.0, "{failed}");
    let (_, state) = call(&console, "/state").await;
    let state: Value = serde_json::from_str(&state)?;
    assert!(
        state["errors"]
            .as_array()
            .is_some_and(|e| e.iter().any(|r| r["key"] == format!("{ns}/bad")))
    );

    // /blueprint is the file as loaded.
    let (status, body) = call(&console, "/blueprint").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body)?;
    let file: Value = serde_yaml_ng::from_str(&text)?;
    assert_eq!(doc["name"], file["metadata"]["name"]);
    let crds = doc["crds"].as_array().expect("crds");
    assert_eq!(crds.len(), 1);
    let crd = &crds[0];
    assert_eq!(crd["name"], controller);
    assert_eq!(crd["kind"], file["spec"]["crds"][0]["kind"]);
    assert_eq!(crd["reconciler"], "constructor");
    assert_eq!(crd["workers"], 2);
    let location = file["spec"]["crds"][0]["reconcile"]["constructor"]["location"].clone();
    assert_eq!(crd["plugins"][0]["location"], location);
    let bytes = std::fs::read(location.as_str().expect("location"))?;
    let digest = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
    );
    assert_eq!(crd["plugins"][0]["digest"], digest);
    assert_eq!(crd["plugins"][0]["size"], bytes.len());
    assert_eq!(crd["plugins"][0]["limits"]["deadlineMs"], 2000);
    assert_eq!(
        crd["managedResources"],
        serde_json::json!(["apps/v1/Deployment", "v1/Service"])
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_crds_and_kinds_in_chromium() -> TestResult {
    // What `inrun run` installs for the console's timelines (this process's only
    // subscriber: no other test here installs one).
    {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let _ = tracing_subscriber::registry()
            .with(inrun::console::timeline::Layer.with_filter(
                tracing_subscriber::filter::filter_fn(|m| {
                    m.is_span() && m.target().starts_with("inrun")
                }),
            ))
            .try_init();
    }
    let group = unique_group("console");
    // Beside the WebApp, a CRD whose CRs become Ready (a ConfigMap each).
    let text = format!(
        "{}    - group: {group}\n      version: v1alpha1\n      kind: Note\n      reconcile:\n        onReconcile:\n          - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: '{{{{ .metadata.name }}}}-note'}}, data: {{a: b}}}}\n        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]\n",
        webapp_blueprint(&group, "")
    );
    let host = start(&text, generated(&text).await, true).await;
    let state = inrun::server::State::new(host.assembly.clone(), host.metrics.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let routes = inrun::server::console(state, ConsoleAccess::loopback());
    let (addr, server) = inrun::server::bind(([127, 0, 0, 1], 0).into(), routes, stop_rx).await?;
    // A CR whose Deployment never rolls out here (no controller manager) beside a Service
    // that is current: the CR's page draws both under it.
    let ns = ControlPlane::shared().namespace("console").await?;
    let ar = resource(&group, "WebApp");
    apply_cr(&ar, &ns, &webapp_cr(&group, "shop")).await;
    eventually("the CR's children recorded in its status", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        cr.data["status"]["resources"]
            .as_array()
            .is_some_and(|r| r.len() == 2)
            .then_some(())
    })
    .await;
    // And one its plugin refuses (no image): failed, its reason from the API server.
    apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: broken}}\nspec: {{replicas: 1}}\n"),
    )
    .await;
    let (failed, reason) = eventually("the broken CR's Ready condition", || async {
        let cr = get(&ar, Some(&ns), "broken").await?;
        let (status, reason, _) = reconciled(&cr)?;
        Some((status, reason))
    })
    .await;
    assert_eq!(failed, "False");
    let notes = resource(&group, "Note");
    apply_cr(
        &notes,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: Note\nmetadata: {{name: ok}}\nspec: {{}}\n"),
    )
    .await;
    eventually("the Note to be Ready", || async {
        let cr = get(&notes, Some(&ns), "ok").await?;
        (reconciled(&cr)?.0 == "True").then_some(())
    })
    .await;
    let crd = format!("webapps.{group}");
    let page = format!("http://{addr}/#cr={crd}/{ns}/shop");
    let chromium = |extra: &[String], page: &str| {
        let profile = tempfile::tempdir().expect("profile");
        let mut command = tokio::process::Command::new("chromium");
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=3000",
            ])
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(page)
            .kill_on_drop(true);
        async move {
            let output = command.output().await.unwrap_or_else(|e| {
                panic!("running chromium (tests/services/install-chromium.sh): {e}")
            });
            drop(profile);
            output
        }
    };
    let dump = ["--dump-dom".to_string()];
    let output = chromium(&dump, &page).await;
    let dom = String::from_utf8_lossy(&output.stdout);
    // The CR in the list, and its page: the tree with each child's state.
    assert!(
        dom.contains(&format!("<td>WebApp/shop</td><td>{ns}</td>")),
        "the CR is not listed: {dom}"
    );
    assert!(
        dom.contains(&format!("<h2 id=\"cr-title\">WebApp/shop in {ns}</h2>")),
        "{dom}"
    );
    for (child, state) in [
        ("Deployment/shop", "InProgress"),
        ("Service/shop", "Current"),
    ] {
        let drawn = format!("─ {child}  </span><span class=\"{state}\">{state}</span>");
        assert!(dom.contains(&drawn), "{drawn} not in the tree: {dom}");
    }
    // Its conditions and the events its pass recorded.
    assert!(
        dom.contains("<td>Ready</td><td class=\"False\">False</td><td>Progressing</td>"),
        "its conditions: {dom}"
    );
    let events = dom
        .split("<table id=\"cr-events\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_default();
    assert!(events.contains("<td>Normal</td>"), "its events: {events}");
    // A Ready CR of the other CRD.
    assert!(
        dom.contains(&format!(
            "<td>Note/ok</td><td>{ns}</td><td class=\"True\">True</td>"
        )),
        "the ready CR: {dom}"
    );
    // The failed CR beside it, with its own reason.
    assert!(
        dom.contains(&format!(
            "<td>WebApp/broken</td><td>{ns}</td><td class=\"False\">False</td><td>{reason}</td>"
        )),
        "the failed CR: {dom}"
    );
    // The plugin's calls, the broken CR's failed (it is retried with backoff, so how many
    // by now depends on timing: at least one, and fewer than all), charted over the
    // page's readings.
    let counted = dom
        .split("<td>(host)</td><td>inrun_plugin_webapp</td><td>")
        .nth(1)
        .and_then(|row| {
            let (calls, rest) = row.split_once("</td><td class=\"error\">")?;
            let failed = rest.split_once("</td>")?.0;
            Some((calls.parse::<u64>().ok()?, failed.parse::<u64>().ok()?))
        });
    assert!(
        counted.is_some_and(|(calls, failed)| failed >= 1 && calls > failed),
        "the plugin's calls ({counted:?}): {dom}"
    );
    assert!(
        dom.contains("<svg width=\"180\" height=\"28\" class=\"spark\">"),
        "{dom}"
    );
    // Its reconcile's timeline: the pass's steps and the plugin call under them (the
    // writes show too where the client is `inrun run`'s, whose fence layer makes their
    // spans: `a_reconcile_is_one_trace_at_an_otlp_receiver_with_its_steps_and_api_writes`).
    for step in [
        ">maintain ",
        ">reconciler ",
        "plugin.call inrun_plugin_webapp.reconcile",
        ">apply ",
        ">status ",
    ] {
        assert!(dom.contains(step), "{step} not in the timeline: {dom}");
    }
    // A step's whole detail in its tooltip: the plugin call names its digest and tenant
    // (`-`: the host's own Blueprint).
    assert!(
        dom.contains("plugin.digest=sha256:") && dom.contains("inrun.tenant=-"),
        "{dom}"
    );
    // A screenshot of the page, kept with the test's build output.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-cr.png");
    chromium(
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1100".to_string(),
        ],
        &page,
    )
    .await;
    assert!(
        shot.metadata().is_ok_and(|m| m.len() > 0),
        "no screenshot at {}",
        shot.display()
    );
    // The filters, as a linked address sets them: another namespace lists nothing; the CRD
    // and "not ready only" list the CR.
    let listed = format!("<td>WebApp/shop</td><td>{ns}</td>");
    let elsewhere = chromium(&dump, &format!("http://{addr}/?namespace=elsewhere")).await;
    let elsewhere = String::from_utf8_lossy(&elsewhere.stdout);
    // Loaded and filled (the CRD's row), the CR filtered out.
    assert!(
        elsewhere.contains(&format!("<td>{crd}</td>")),
        "{elsewhere}"
    );
    assert!(!elsewhere.contains(&listed), "{elsewhere}");
    let not_ready = chromium(&dump, &format!("http://{addr}/?crd={crd}&notready=1")).await;
    assert!(String::from_utf8_lossy(&not_ready.stdout).contains(&listed));
    // Present only after the page's script fetched /blueprint and filled the table.
    assert!(
        dom.contains(&format!(
            "<td>{crd}</td><td>WebApp</td><td>constructor</td>"
        )),
        "the console did not render the CRD: {dom}"
    );
    assert!(
        dom.contains("<span id=\"name\" class=\"muted\">ops</span>"),
        "{dom}"
    );
    let _ = stop_tx.send(true);
    server.await??;
    host.stop().await;
    Ok(())
}

/// The DOM headless Chromium builds for `page`, after its scripts ran.
async fn chromium_dom(page: &str) -> String {
    let profile = tempfile::tempdir().expect("profile");
    let output = tokio::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=3000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(page)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running chromium (tests/services/install-chromium.sh): {e}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// No cluster: a console with a token, over a Blueprint assembled offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_asks_for_its_token_and_sends_it_in_chromium() -> TestResult {
    let token = "console-token-for-the-browser-0123";
    let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: locked}\nspec:\n  crds:\n    - group: token.inrun.dev\n      version: v1alpha1\n      kind: Note\n      reconcile:\n        onReconcile: [{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}]\n        managedResources: [{apiVersion: v1, kind: ConfigMap}]\n";
    let blueprint = inrun::blueprint::from_str(text, "locked.yaml")?;
    let engine = Engine::new(EngineSettings::default())?;
    let assembly = Arc::new(Assembly::from_blueprint(blueprint, &engine).await?);
    let state = inrun::server::State::new(assembly, Arc::new(inrun::metrics::Metrics::default()));
    let access = ConsoleAccess::new([127, 0, 0, 1].into(), &[], Some(token.to_string()))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let routes = inrun::server::console(state, access);
    let (addr, server) = inrun::server::bind(([127, 0, 0, 1], 0).into(), routes, stop_rx).await?;
    let row = "<td>notes.token.inrun.dev</td><td>Note</td>";

    // Without the token the page loads, shows nothing it read, and asks for it.
    let asked = chromium_dom(&format!("http://{addr}/")).await;
    assert!(!asked.contains(row), "{asked}");
    assert!(
        asked.contains("<form id=\"login\">"),
        "the token form: {asked}"
    );
    assert!(asked.contains("waiting for the console's token"), "{asked}");
    // A wrong one is refused and said so.
    let wrong = chromium_dom(&format!("http://{addr}/#token=not-the-console-token")).await;
    assert!(!wrong.contains(row), "{wrong}");
    assert!(wrong.contains("that token was refused"), "{wrong}");
    // With it (in a link's fragment, which never reaches the server) the page reads
    // everything.
    let opened = chromium_dom(&format!("http://{addr}/#token={token}")).await;
    assert!(
        opened.contains(row),
        "the CRD, read with the token: {opened}"
    );
    assert!(
        opened.contains("<form id=\"login\" hidden=\"\">"),
        "{opened}"
    );
    let _ = stop_tx.send(true);
    server.await??;
    Ok(())
}

/// Where [`host_kubeconfig`] writes the kubeconfig [`Process`] runs with.
const HOST_KUBECONFIG: &str = "host.kubeconfig";

/// Makes the ServiceAccount the `inrun run` processes of a test act as, bound to what
/// `inrun generate rbac --install-crds --leader-elect --leader-elect-lease LEASE` prints
/// for the Blueprint at `blueprint`, and writes its kubeconfig into `dir`.
async fn host_kubeconfig(blueprint: &std::path::Path, dir: &std::path::Path, lease: &str) {
    let mut parsed = inrun::blueprint::load(blueprint).expect("blueprint");
    parsed.spec.runtime.leader_election.enabled = true;
    parsed.spec.runtime.leader_election.lease_name = lease.into();
    let identity =
        support::identity::Identity::generated(&parsed, &support::identity::Identity::options())
            .await;
    let path = identity.kubeconfig(dir);
    std::fs::rename(path, dir.join(HOST_KUBECONFIG)).expect("placing the host kubeconfig");
}

/// An `inrun run` process; killed when dropped.
struct Process {
    child: tokio::process::Child,
    identity: String,
    log: std::path::PathBuf,
}

impl Drop for Process {
    /// A request the API server refused (403) fails the test: the generated RBAC lacks
    /// something the host does.
    fn drop(&mut self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(" is forbidden: "))
            && !std::thread::panicking()
        {
            panic!("{} was refused a request: {line}", self.identity);
        }
    }
}

impl Process {
    fn spawn(blueprint: &std::path::Path, dir: &std::path::Path, identity: &str) -> Process {
        Process::spawn_with(blueprint, dir, identity, &[])
    }

    /// Like [`Process::spawn`], with extra environment variables.
    fn spawn_with(
        blueprint: &std::path::Path,
        dir: &std::path::Path,
        identity: &str,
        env: &[(&str, &str)],
    ) -> Process {
        let log_path = dir.join(format!("{identity}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
            .arg("run")
            .arg("--blueprint")
            .arg(blueprint)
            // As production runs it: the ServiceAccount `host_kubeconfig` made.
            .arg("--kubeconfig")
            .arg(dir.join(HOST_KUBECONFIG))
            .args([
                "--install-crds",
                "--health-port",
                "0",
                "--health-address",
                "127.0.0.1",
                "--console-port",
                "0",
            ])
            .args(["--identity", identity])
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .env("INRUN_LOG", "info")
            .envs(env.iter().copied())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn inrun");
        Process {
            child,
            identity: identity.into(),
            log: log_path,
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

/// The Lease's current holder.
async fn holder(ns: &str, lease: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client(), ns);
    api.get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Waits until `identity` holds the lease; returns how long that took.
async fn until_holder(
    ns: &str,
    lease: &str,
    identity: &str,
    within: std::time::Duration,
) -> std::time::Duration {
    let start = std::time::Instant::now();
    inrun_testenv::wait_for(&format!("{identity} to hold the lease"), within, || async {
        (holder(ns, lease).await.as_deref() == Some(identity)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    start.elapsed()
}

/// Waits until the log file at `path` contains `text`.
async fn until_logged(path: &std::path::Path, text: &str) {
    inrun_testenv::wait_for(
        &format!("{} to say {text:?}", path.display()),
        WAIT,
        || async {
            std::fs::read_to_string(path)
                .ok()?
                .contains(text)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Which replica recorded the Reconciled event on `name`.
async fn reconciled_by(ns: &str, name: &str) -> String {
    eventually(&format!("a Reconciled event on {name}"), || async {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client(), ns);
        let list = api.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Reconciled")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .and_then(|e| e.reporting_instance)
    })
    .await
}

fn lease_blueprint(group: &str, ns: &str, lease: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: leader}}
spec:
  runtime:
    leaderElection: {{enabled: true, leaseName: {lease}, namespace: {ns}}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Note
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            data: {{text: "{{{{ .spec.text }}}}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_a_standby_takes_over_on_sigterm_and_on_sigkill() -> TestResult {
    let cp = ControlPlane::shared();
    let group = unique_group("leader");
    let ns = cp.namespace("leader").await?;
    // The Lease is the one `--leader-elect-lease` (here through its variable) names, not
    // the Blueprint's.
    let lease = "inrun-leader";
    let by_flag = [("INRUN_LEADER_ELECT_LEASE", lease)];
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blueprint.yaml");
    std::fs::write(
        &path,
        lease_blueprint(&group, &ns, "named-by-the-blueprint"),
    )?;
    let ar = resource(&group, "Note");
    let note = |name: &str| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: Note\nmetadata: {{name: {name}}}\nspec: {{text: hi}}\n"
        )
    };
    let lease_duration = std::time::Duration::from_secs(15);

    host_kubeconfig(&path, dir.path(), lease).await;
    let a = Process::spawn_with(&path, dir.path(), "replica-a", &by_flag);
    until_holder(&ns, lease, "replica-a", WAIT).await;
    let mut b = Process::spawn_with(&path, dir.path(), "replica-b", &by_flag);
    apply_cr(&ar, &ns, &note("first")).await;
    assert_eq!(reconciled_by(&ns, "first").await, "replica-a");
    eventually("the first ConfigMap", || {
        get(configmaps(), Some(&ns), "first")
    })
    .await;
    // The standby is up and trying; over several of its retry periods (checked all along)
    // it neither leads nor reconciles.
    until_logged(
        &dir.path().join("replica-b.log"),
        "waiting for the leader-election lease",
    )
    .await;
    let window = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < window {
        assert_eq!(holder(&ns, lease).await.as_deref(), Some("replica-a"));
        let b_log = std::fs::read_to_string(dir.path().join("replica-b.log"))?;
        assert!(
            !b_log.contains("controllers started"),
            "the standby reconciles: {b_log}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // Graceful: SIGTERM releases the lease; the standby takes over at its next retry.
    a.signal("-TERM");
    let graceful = until_holder(&ns, lease, "replica-b", WAIT).await;
    let mut a = a;
    let exit = tokio::time::timeout(WAIT, a.child.wait()).await??;
    assert!(
        exit.success(),
        "the leader exits cleanly on SIGTERM: {exit}"
    );
    apply_cr(&ar, &ns, &note("second")).await;
    assert_eq!(reconciled_by(&ns, "second").await, "replica-b");

    // Abrupt: SIGKILL leaves the lease held; the standby takes it once it expires.
    let c = Process::spawn_with(&path, dir.path(), "replica-c", &by_flag);
    until_logged(
        &dir.path().join("replica-c.log"),
        "waiting for the leader-election lease",
    )
    .await;
    b.signal("-KILL");
    let _ = b.child.wait().await;
    let killed = until_holder(&ns, lease, "replica-c", WAIT).await;
    apply_cr(&ar, &ns, &note("third")).await;
    assert_eq!(reconciled_by(&ns, "third").await, "replica-c");
    for name in ["first", "second", "third"] {
        eventually(&format!("{name} Ready"), || async {
            let cr = get(&ar, Some(&ns), name).await?;
            (reconciled(&cr)?.0 == "True").then_some(())
        })
        .await;
    }
    eprintln!(
        "leader handover: SIGTERM {:.2}s, SIGKILL {:.2}s (lease {}s)",
        graceful.as_secs_f64(),
        killed.as_secs_f64(),
        lease_duration.as_secs()
    );
    assert!(
        graceful < std::time::Duration::from_secs(5),
        "graceful handover took {graceful:?}"
    );
    assert!(
        killed <= lease_duration + std::time::Duration::from_secs(3),
        "handover after SIGKILL took {killed:?}"
    );
    c.signal("-TERM");
    let mut c = c;
    let exit = tokio::time::timeout(WAIT, c.child.wait()).await??;
    assert!(exit.success());
    assert_eq!(
        holder(&ns, lease).await,
        None,
        "the lease is released on shutdown"
    );
    assert!(
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client(), &ns)
            .get_opt("named-by-the-blueprint")
            .await?
            .is_none(),
        "the flag's Lease replaces the Blueprint's"
    );
    let _ = c.identity;
    Ok(())
}

/// One sample of a metrics page: its name, labels and value.
#[derive(Debug)]
struct Series {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    value: f64,
}

/// The samples of an OpenMetrics (or Prometheus) text page.
fn parse_series(text: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, value) = line.rsplit_once(' ').expect("a sample line");
        let (name, labels) = match head.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("closed labels")),
            None => (head, ""),
        };
        let mut parsed = std::collections::BTreeMap::new();
        let mut rest = labels;
        while let Some((key, after)) = rest.split_once("=\"") {
            // Label values here hold no escaped quotes.
            let (value, after) = after.split_once('"').expect("a closed value");
            parsed.insert(key.trim_start_matches(',').to_string(), value.to_string());
            rest = after;
        }
        out.push(Series {
            name: name.to_string(),
            labels: parsed,
            value: value.parse().unwrap_or(f64::NAN),
        });
    }
    out
}

/// The sum of the samples named `name` whose labels include every pair of `with`.
fn total(series: &[Series], name: &str, with: &[(&str, &str)]) -> f64 {
    series
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// The port `inrun run` logged for its health port in the log file at `path`.
async fn health_port(path: &std::path::Path) -> u16 {
    inrun_testenv::wait_for("the health port to be logged", WAIT, || async {
        let log = std::fs::read_to_string(path).ok()?;
        let line = log.lines().find(|l| l.contains("health port listening"))?;
        let after = line.split("127.0.0.1:").nth(1)?;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// GETs `path` on the health port `port`: (status, body).
async fn scrape(port: u16, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
        .await
        .expect("the health port answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// controller-runtime's and client-go's buckets, as their Go sources define them.
const RECONCILE_LE: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];
const QUEUE_LE: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
];

fn tick_blueprint(group: &str, ns: &str, lease: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: ticks}}
spec:
  runtime:
    workers: 3
    leaderElection: {{enabled: true, leaseName: {lease}, namespace: {ns}}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Tick
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            data: {{name: "{{{{ .metadata.name }}}}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
        requeue: {{after: 1s, when: "{{{{ .spec.hold }}}}"}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_host_exports_controller_runtimes_metrics_and_is_ready_as_leader_and_standby()
-> TestResult {
    let started = std::time::Instant::now();
    let cp = ControlPlane::shared();
    let group = unique_group("scrape");
    let ns = cp.namespace("scrape").await?;
    let lease = "inrun-scrape";
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blueprint.yaml");
    std::fs::write(&path, tick_blueprint(&group, &ns, lease))?;
    let controller = format!("ticks.{group}");
    let ar = resource(&group, "Tick");
    let tick = |name: &str, hold: bool| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: Tick\nmetadata: {{name: {name}}}\nspec: {{hold: {hold}}}\n"
        )
    };

    host_kubeconfig(&path, dir.path(), lease).await;
    let leader = Process::spawn(&path, dir.path(), "scrape-a");
    until_holder(&ns, lease, "scrape-a", WAIT).await;
    let port = health_port(&dir.path().join("scrape-a.log")).await;
    apply_cr(&ar, &ns, &tick("idle", false)).await;
    apply_cr(&ar, &ns, &tick("busy", true)).await;
    let c = [("controller", controller.as_str())];
    // The held CR runs again every second: each of those passes asked for a requeue after
    // a delay, and each requeue is a retry of the work queue.
    let text = eventually("requeue_after reconciles of the held CR", || async {
        let (_, text) = scrape(port, "/metrics").await;
        let s = parse_series(&text);
        let requeued = total(
            &s,
            "controller_runtime_reconcile_total",
            &[c[0], ("result", "requeue_after")],
        );
        let succeeded = total(
            &s,
            "controller_runtime_reconcile_total",
            &[c[0], ("result", "success")],
        );
        (requeued >= 2.0 && succeeded >= 1.0).then_some(text)
    })
    .await;
    let s = parse_series(&text);
    assert!(total(&s, "workqueue_retries_total", &c) >= 2.0, "{text}");
    // Each CR's first change, and the held CR's requeues once due.
    assert!(total(&s, "workqueue_adds_total", &c) >= 3.0, "{text}");
    assert_eq!(
        total(&s, "controller_runtime_max_concurrent_reconciles", &c),
        3.0
    );
    assert_eq!(
        total(&s, "controller_runtime_reconcile_errors_total", &c),
        0.0
    );

    // Names, label sets and types exactly as controller-runtime and client-go have them.
    let families: &[(&str, &str, &[&str])] = &[
        (
            "controller_runtime_reconcile",
            "counter",
            &["controller", "result"],
        ),
        (
            "controller_runtime_reconcile_errors",
            "counter",
            &["controller"],
        ),
        (
            "controller_runtime_terminal_reconcile_errors",
            "counter",
            &["controller"],
        ),
        (
            "controller_runtime_reconcile_panics",
            "counter",
            &["controller"],
        ),
        (
            "controller_runtime_reconcile_time_seconds",
            "histogram",
            &["controller"],
        ),
        (
            "controller_runtime_max_concurrent_reconciles",
            "gauge",
            &["controller"],
        ),
        (
            "controller_runtime_active_workers",
            "gauge",
            &["controller"],
        ),
        (
            "workqueue_depth",
            "gauge",
            &["controller", "name", "priority"],
        ),
        ("workqueue_adds", "counter", &["controller", "name"]),
        ("workqueue_retries", "counter", &["controller", "name"]),
        (
            "workqueue_queue_duration_seconds",
            "histogram",
            &["controller", "name"],
        ),
        (
            "workqueue_work_duration_seconds",
            "histogram",
            &["controller", "name"],
        ),
        (
            "workqueue_unfinished_work_seconds",
            "gauge",
            &["controller", "name"],
        ),
        (
            "workqueue_longest_running_processor_seconds",
            "gauge",
            &["controller", "name"],
        ),
        (
            "rest_client_requests",
            "counter",
            &["code", "host", "method"],
        ),
        ("leader_election_master_status", "gauge", &["name"]),
    ];
    for (family, kind, labels) in families {
        assert!(
            text.contains(&format!("# TYPE {family} {kind}\n")),
            "{family} is a {kind}: {text}"
        );
        let samples: Vec<&Series> = s
            .iter()
            .filter(|x| match *kind {
                "counter" => x.name == format!("{family}_total"),
                "histogram" => x.name.starts_with(&format!("{family}_")),
                _ => x.name == *family,
            })
            .collect();
        assert!(!samples.is_empty(), "{family} has samples: {text}");
        for sample in samples {
            let mut want: Vec<&str> = labels.to_vec();
            if sample.name.ends_with("_bucket") {
                want.push("le");
            }
            want.sort_unstable();
            let got: Vec<&str> = sample.labels.keys().map(String::as_str).collect();
            assert_eq!(got, want, "labels of {sample:?}");
            if let Some(name) = sample
                .labels
                .get("name")
                .filter(|_| *family != "leader_election_master_status")
            {
                assert_eq!(name, &controller, "the queue is named after its controller");
            }
        }
    }
    let le = |family: &str| -> Vec<String> {
        s.iter()
            .filter(|x| {
                x.name == format!("{family}_bucket") && x.labels["controller"] == controller
            })
            .map(|x| x.labels["le"].clone())
            .collect()
    };
    for (family, bounds) in [
        (
            "controller_runtime_reconcile_time_seconds",
            &RECONCILE_LE[..],
        ),
        ("workqueue_queue_duration_seconds", &QUEUE_LE[..]),
        ("workqueue_work_duration_seconds", &QUEUE_LE[..]),
    ] {
        let mut les = le(family);
        assert_eq!(les.pop().as_deref(), Some("+Inf"), "{family}");
        let got: Vec<f64> = les.iter().map(|l| l.parse().expect("a bound")).collect();
        assert_eq!(got, bounds, "{family}'s buckets");
    }

    // Requests to the API server, by the host:port the kubeconfig names.
    let apiserver = cp.server().trim_start_matches("https://").to_string();
    let on = |method: &str| {
        total(
            &s,
            "rest_client_requests_total",
            &[("host", &apiserver), ("method", method)],
        )
    };
    // Reads, server-side applies, and the Lease's creation or renewal.
    assert!(on("GET") >= 1.0 && on("PATCH") >= 1.0, "{text}");
    assert!(on("POST") + on("PUT") >= 1.0, "{text}");
    assert_eq!(
        total(&s, "leader_election_master_status", &[("name", lease)]),
        1.0
    );
    for name in [
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ] {
        assert!(total(&s, name, &[]) > 0.0, "{name}: {text}");
    }
    assert!(total(&s, "process_cpu_seconds_total", &[]) > 0.0);
    let since_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        - total(&s, "process_start_time_seconds", &[]);
    assert!(
        (0.0..120.0).contains(&since_start),
        "started {since_start}s ago"
    );
    assert!(!text.contains("\ngo_"), "no Go runtime series");

    // Once nothing is held, the queue empties and no worker stays busy.
    apply_cr(&ar, &ns, &tick("busy", false)).await;
    eventually("the queue to be empty and every worker idle", || async {
        let (_, text) = scrape(port, "/metrics").await;
        let s = parse_series(&text);
        let idle = total(&s, "workqueue_depth", &c) == 0.0
            && total(&s, "controller_runtime_active_workers", &c) == 0.0
            && total(&s, "workqueue_unfinished_work_seconds", &c) == 0.0
            && total(
                &s,
                "controller_runtime_reconcile_total",
                &[c[0], ("result", "success")],
            ) >= 2.0;
        idle.then_some(())
    })
    .await;

    // Probes as controller-runtime answers them.
    assert_eq!(scrape(port, "/healthz").await, (200, "ok".to_string()));
    assert_eq!(scrape(port, "/readyz").await, (200, "ok".to_string()));
    assert_eq!(
        scrape(port, "/readyz?verbose").await,
        (
            200,
            "[+]controllers ok\n[+]ping ok\n[+]plugins ok\nhealthz check passed\n".to_string()
        )
    );
    assert_eq!(scrape(port, "/readyz/ping").await, (200, "ok".to_string()));
    assert_eq!(scrape(port, "/healthz/nope").await.0, 404);

    // A standby is ready although it runs no controller, and exports no controller series.
    let standby = Process::spawn(&path, dir.path(), "scrape-b");
    let standby_port = health_port(&dir.path().join("scrape-b.log")).await;
    let text = eventually("the standby to report it does not lead", || async {
        let (_, text) = scrape(standby_port, "/metrics").await;
        let s = parse_series(&text);
        (s.iter()
            .any(|x| x.name == "leader_election_master_status" && x.value == 0.0))
        .then_some(text)
    })
    .await;
    assert_eq!(
        scrape(standby_port, "/readyz").await,
        (200, "ok".to_string())
    );
    assert_eq!(holder(&ns, lease).await.as_deref(), Some("scrape-a"));
    assert!(
        !text.contains("controller=\""),
        "a standby exports no controller series: {text}"
    );
    for process in [&leader, &standby] {
        process.signal("-TERM");
    }
    for mut process in [leader, standby] {
        let exit = tokio::time::timeout(WAIT, process.child.wait()).await??;
        assert!(exit.success(), "{} exits cleanly: {exit}", process.identity);
    }
    eprintln!("scrape test: {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

#[test]
fn every_flag_of_every_command_is_documented_and_settable_by_an_inrun_env_var() {
    let commands: &[&[&str]] = &[
        &[],
        &["render"],
        &["run"],
        &["validate"],
        &["generate", "crds"],
        &["generate", "rbac"],
        &["plugin", "inspect"],
    ];
    for command in commands {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
            .args(*command)
            .arg("--help")
            .output()
            .expect("inrun --help");
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        // Each option starts a block: its line and the indented description under it.
        let mut blocks: Vec<String> = Vec::new();
        for line in help.lines() {
            let t = line.trim_start();
            let starts = (t.starts_with("-") && line.starts_with("  ")) || t.starts_with('<');
            if starts && line.len() - t.len() <= 6 {
                blocks.push(line.to_string());
            } else if let Some(last) = blocks.last_mut() {
                last.push_str(line);
            }
        }
        for block in &blocks {
            if block.contains("--help") || block.contains("--version") {
                continue;
            }
            assert!(
                block.contains("[env: INRUN_"),
                "`inrun {}` has a flag with no INRUN_* variable: {block}",
                command.join(" ")
            );
            let description = block.split_once("  ").map(|(_, d)| d.trim()).unwrap_or("");
            assert!(!description.is_empty(), "undocumented flag: {block}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_its_work_at_once() -> TestResult {
    use k8s_openapi::api::coordination::v1::Lease;
    use std::time::Duration;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("lost").await?;
    let config = inrun::leader::LeaderConfig {
        lease_name: "lost".into(),
        namespace: ns.clone(),
        identity: "victim".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_millis(500),
    };
    let (_shutdown_tx, shutdown_rx) = watch::channel(false);
    let (started_tx, mut started_rx) = watch::channel(false);
    let (stopped_tx, mut stopped_rx) = watch::channel(false);
    let elected = tokio::spawn(inrun::leader::run(
        inrun::leader::Keeper {
            client: client(),
            fence: inrun::fence::Fence::default(),
        },
        config,
        shutdown_rx,
        Arc::default(),
        move |mut stop: watch::Receiver<bool>| async move {
            let _ = started_tx.send(true);
            let _ = stop.wait_for(|s| *s).await;
            let _ = stopped_tx.send(true);
            Ok::<(), std::io::Error>(())
        },
    ));
    tokio::time::timeout(WAIT, started_rx.wait_for(|s| *s)).await??;
    // Another replica takes the lease (as after a partition where this one could not renew).
    let api: Api<Lease> = Api::namespaced(client(), &ns);
    let mut lease = api.get("lost").await?;
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("thief".into());
    }
    api.replace("lost", &PostParams::default(), &lease).await?;
    let taken = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(3), stopped_rx.wait_for(|s| *s)).await??;
    let stopped = taken.elapsed();
    let result = tokio::time::timeout(WAIT, elected).await??;
    assert!(
        matches!(result, Err(inrun::leader::LeaderError::Lost { .. })),
        "{result:?}"
    );
    eprintln!(
        "work stopped {:.2}s after the lease was taken",
        stopped.as_secs_f64()
    );
    assert_eq!(
        holder(&ns, "lost").await.as_deref(),
        Some("thief"),
        "the thief keeps it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_lease_rbac_fails_clearly_instead_of_waiting_forever() -> TestResult {
    use std::time::Duration;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("nolease").await?;
    let config = inrun::leader::LeaderConfig {
        lease_name: "inrun".into(),
        namespace: ns,
        identity: "nobody".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let (_tx, rx) = watch::channel(false);
    let result = tokio::time::timeout(
        WAIT,
        inrun::leader::run(
            inrun::leader::Keeper {
                client: cp.unprivileged_client(),
                fence: inrun::fence::Fence::default(),
            },
            config,
            rx,
            Arc::default(),
            |_stop| async { Ok::<(), std::io::Error>(()) },
        ),
    )
    .await?;
    let err = result.expect_err("no RBAC for the Lease");
    assert!(matches!(err, inrun::leader::LeaderError::Forbidden { .. }));
    assert!(inrun::errors::chain(&err).contains("inrun generate rbac"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_of_a_leader_that_lost_its_lease_lands_after_the_next_leader_starts() -> TestResult
{
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("fenced").await?;
    // The old leader renews its Lease as a ServiceAccount whose RBAC the test then revokes,
    // so its renewals fail (as when they stop reaching the API server) while its writes,
    // made on other credentials, still would go through.
    let renewer = "renewer";
    apply_all(&[
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": renewer, "namespace": ns}}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": renewer, "namespace": ns},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "create", "update"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": renewer, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": renewer},
            "subjects": [{"kind": "ServiceAccount", "name": renewer, "namespace": ns}]}),
    ])
    .await;
    let mut renewing = cp.admin_config();
    renewing.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{renewer}"));
    let fence = inrun::fence::Fence::default();
    let writer: Api<ConfigMap> =
        Api::namespaced(inrun::fence::client(cp.admin_config(), &fence)?, &ns);
    let lease = |identity: &str| inrun::leader::LeaderConfig {
        lease_name: "fenced".into(),
        namespace: ns.clone(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_millis(500),
    };
    let landed = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let (_shutdown_tx, shutdown_rx) = watch::channel(false);
    let old = tokio::spawn(inrun::leader::run(
        inrun::leader::Keeper {
            client: Client::try_from(renewing)?,
            fence: fence.clone(),
        },
        lease("old"),
        shutdown_rx.clone(),
        Arc::default(),
        {
            let (landed, refused) = (landed.clone(), refused.clone());
            move |stop: watch::Receiver<bool>| async move {
                // A reconcile that keeps writing, and goes on for two lease durations after
                // it was told to stop: what a slow pass in flight does.
                let mut stopped_at = None;
                for n in 0u64.. {
                    if stopped_at.is_none() && *stop.borrow() {
                        stopped_at = Some(std::time::Instant::now());
                    }
                    if stopped_at.is_some_and(|t| t.elapsed() > Duration::from_secs(12)) {
                        break;
                    }
                    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "old-leader"}, "data": {"n": n.to_string()}});
                    match writer
                        .patch(
                            "old-leader",
                            &PatchParams::apply("old").force(),
                            &Patch::Apply(cm),
                        )
                        .await
                    {
                        Ok(_) => landed.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            assert!(
                                inrun::errors::chain(&e).contains("not the leader"),
                                "{}",
                                inrun::errors::chain(&e)
                            );
                            refused.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok::<(), std::io::Error>(())
            }
        },
    ));
    let api: Api<ConfigMap> = Api::namespaced(client(), &ns);
    eventually("the old leader's first writes", || async {
        (landed.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;
    // Every change in the namespace, in the order the API server stored them.
    let from = api
        .list(&Default::default())
        .await?
        .metadata
        .resource_version;
    let mut stream = api
        .watch(&WatchParams::default(), from.as_deref().unwrap_or("0"))
        .await?
        .boxed();
    let order = tokio::spawn(async move {
        let mut order = Vec::new();
        while let Some(event) = stream.next().await {
            let (kind, cm) = match event.expect("watch") {
                WatchEvent::Added(cm) => ("added", cm),
                WatchEvent::Modified(cm) => ("modified", cm),
                _ => continue,
            };
            let name = cm.metadata.name.unwrap_or_default();
            let end = name == "sentinel";
            order.push((kind, name));
            if end {
                break;
            }
        }
        order
    });
    let rbac: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(client(), &ns);
    rbac.delete(renewer, &Default::default()).await?;
    let (started_tx, mut started_rx) = watch::channel(false);
    let next = tokio::spawn(inrun::leader::run(
        inrun::leader::Keeper {
            client: client(),
            fence: inrun::fence::Fence::default(),
        },
        lease("next"),
        shutdown_rx,
        Arc::default(),
        {
            let api = api.clone();
            move |mut stop: watch::Receiver<bool>| async move {
                let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "next-leader"}});
                api.patch(
                    "next-leader",
                    &PatchParams::apply("next"),
                    &Patch::Apply(cm),
                )
                .await
                .expect("the next leader writes");
                let _ = started_tx.send(true);
                let _ = stop.wait_for(|s| *s).await;
                Ok::<(), std::io::Error>(())
            }
        },
    ));
    tokio::time::timeout(WAIT, started_rx.wait_for(|s| *s)).await??;
    let result = tokio::time::timeout(WAIT, old).await??;
    assert!(
        matches!(result, Err(inrun::leader::LeaderError::Lost { .. })),
        "{result:?}"
    );
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sentinel"}});
    api.patch(
        "sentinel",
        &PatchParams::apply("e2e-test"),
        &Patch::Apply(cm),
    )
    .await?;
    let order = tokio::time::timeout(WAIT, order).await??;
    let next_started = order
        .iter()
        .position(|(_, name)| name == "next-leader")
        .expect("the next leader's write was watched");
    let late = order[next_started..]
        .iter()
        .filter(|(_, name)| name == "old-leader")
        .count();
    assert_eq!(
        late, 0,
        "writes of the old leader after the next one started"
    );
    let refused = refused.load(Ordering::SeqCst);
    assert!(
        refused > 0,
        "the old leader went on writing after it lost the lease, and was refused"
    );
    eprintln!(
        "old leader: {} writes landed, {refused} refused after it lost the lease",
        landed.load(Ordering::SeqCst)
    );
    next.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_port_answers_while_a_large_plugin_compiles_and_readiness_waits_for_it()
-> TestResult {
    let group = unique_group("startup");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blueprint.yaml");
    // An 18 MB Python guest: seconds to compile, and the cache directory is new.
    std::fs::write(
        &path,
        format!(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: startup}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor:
          location: "{webapp}"
          limits: {{deadline: 10s, memory: 64Mi}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#,
            webapp = plugin("inrun_plugin_webapp_python")
        ),
    )?;
    host_kubeconfig(&path, dir.path(), "inrun-startup").await;
    let started = std::time::Instant::now();
    let _host = Process::spawn(&path, dir.path(), "startup");
    let log = dir.path().join("startup.log");
    let port = health_port(&log).await;
    let (status, _) = scrape(port, "/healthz").await;
    let healthy_after = started.elapsed();
    assert_eq!(status, 200);
    // The compile is announced with the plugin's name and size.
    let line =
        |text: &str, words: &[&str]| text.lines().any(|l| words.iter().all(|w| l.contains(w)));
    inrun_testenv::wait_for("the compile to be announced", WAIT, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        line(
            &text,
            &["loading plugin", "inrun_plugin_webapp_python", "bytes"],
        )
        .then_some(())
    })
    .await?;
    // Liveness answers, readiness fails, while the plugin compiles.
    let (status, body) = scrape(port, "/readyz?verbose").await;
    let text = std::fs::read_to_string(&log)?;
    assert!(
        !text.contains("plugin loaded"),
        "the compile ended before the probe: {text}"
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("[-]plugins failed"), "{body}");
    assert_eq!(scrape(port, "/healthz").await.0, 200);
    // The reason, withheld from the probe, is in the log: the plugin still loading.
    let text = std::fs::read_to_string(&log)?;
    assert!(
        line(
            &text,
            &[
                "health check failed",
                "plugins",
                "inrun_plugin_webapp_python"
            ]
        ),
        "{text}"
    );
    inrun_testenv::wait_for(
        "/readyz to pass",
        std::time::Duration::from_secs(300),
        || async { (scrape(port, "/readyz").await.0 == 200).then_some(()) },
    )
    .await?;
    let ready_after = started.elapsed();
    let text = std::fs::read_to_string(&log)?;
    let loaded = text
        .lines()
        .find(|l| l.contains("plugin loaded"))
        .expect("the end of the compile is logged");
    assert!(
        loaded.contains("inrun_plugin_webapp_python")
            && loaded.contains("took_ms")
            && loaded.contains("a fresh compile"),
        "{loaded}"
    );
    eprintln!("healthz answered {healthy_after:?} after start; ready after {ready_after:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_slow_compile_never_fails_the_hosts_readiness_and_shows_in_the_verbose_probe()
-> TestResult {
    let (own_group, tenant_group) = (unique_group("own"), unique_group("slowpoke"));
    let dir = tempfile::tempdir()?;
    let own = dir.path().join("blueprint.yaml");
    std::fs::write(
        &own,
        format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: own}}\nspec:\n  crds:\n    - group: {own_group}\n      version: v1alpha1\n      kind: Plain\n      reconcile:\n        onReconcile: []\n"
        ),
    )?;
    // A tenant file whose plugin is an 18 MB Python guest: seconds to compile, and the
    // cache directory is new.
    let tenants = dir.path().join("tenants");
    std::fs::create_dir(&tenants)?;
    let tenant = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: slowpoke}}\nspec:\n  crds:\n    - group: {tenant_group}\n      version: v1alpha1\n      kind: WebApp\n      reconcile:\n        default: false\n        constructor: {{location: \"{}\", limits: {{deadline: 10s, memory: 64Mi}}}}\n        managedResources:\n          - {{apiVersion: apps/v1, kind: Deployment}}\n          - {{apiVersion: v1, kind: Service}}\n",
        plugin("inrun_plugin_webapp_python")
    );
    std::fs::write(tenants.join("slowpoke.yaml"), &tenant)?;
    let mut parsed = inrun::blueprint::load(&own)?;
    parsed.spec.runtime.leader_election.enabled = true;
    parsed.spec.runtime.leader_election.lease_name = "inrun-tenant-startup".into();
    let identity = support::identity::Identity::for_blueprints(
        &[
            parsed,
            inrun::blueprint::from_str(&tenant, "slowpoke.yaml")?,
        ],
        &support::identity::Identity::options(),
    )
    .await;
    std::fs::rename(
        identity.kubeconfig(dir.path()),
        dir.path().join(HOST_KUBECONFIG),
    )?;
    let tenants_dir = tenants.to_string_lossy().into_owned();
    let _host = Process::spawn_with(
        &own,
        dir.path(),
        "tenant-startup",
        &[("INRUN_TENANTS", tenants_dir.as_str())],
    );
    let log = dir.path().join("tenant-startup.log");
    let port = health_port(&log).await;
    let line =
        |text: &str, words: &[&str]| text.lines().any(|l| words.iter().all(|w| l.contains(w)));
    inrun_testenv::wait_for("the tenant's compile to be announced", WAIT, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        line(
            &text,
            &["loading plugin", "inrun_plugin_webapp_python", "bytes"],
        )
        .then_some(())
    })
    .await?;
    // The host's own Blueprint has loaded: ready, while the tenant's plugin compiles.
    let (status, body) = inrun_testenv::wait_for("the host's own Blueprint", WAIT, || async {
        let (status, body) = scrape(port, "/readyz?verbose").await;
        let compiled = std::fs::read_to_string(&log)
            .ok()?
            .contains("plugin loaded");
        (status == 200 || compiled).then_some((status, body))
    })
    .await?;
    let text = std::fs::read_to_string(&log)?;
    assert!(
        !text.contains("plugin loaded"),
        "the compile ended before the probe: {text}"
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("info: tenant") && body.contains("inrun_plugin_webapp_python loading"),
        "{body}"
    );
    assert_eq!(scrape(port, "/readyz/plugins").await.0, 200);
    Ok(())
}

/// What an OTLP receiver got: every span, as the protocol's own types decode it.
type Received = Arc<std::sync::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>;

/// An OTLP/HTTP traces receiver on 127.0.0.1 (`POST /v1/traces`, protobuf); its base URL.
async fn otlp_receiver(received: Received) -> String {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let received = received.clone();
            async move {
                let request: ExportTraceServiceRequest =
                    prost::Message::decode(body).expect("an OTLP traces request");
                let mut spans = received.lock().expect("lock");
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        spans.extend(scope.spans);
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A span attribute's text.
fn attribute(span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            Value::StringValue(s) => s.clone(),
            Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_is_one_trace_at_an_otlp_receiver_with_its_steps_and_api_writes() -> TestResult
{
    let cp = ControlPlane::shared();
    let group = unique_group("traced");
    let ns = cp.namespace("traced").await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blueprint.yaml");
    let lease = "inrun-traced";
    std::fs::write(&path, lease_blueprint(&group, &ns, lease))?;
    host_kubeconfig(&path, dir.path(), lease).await;
    let received = Received::default();
    let endpoint = otlp_receiver(received.clone()).await;
    let _host = Process::spawn_with(
        &path,
        dir.path(),
        "traced",
        &[
            ("INRUN_OTLP_ENDPOINT", endpoint.as_str()),
            // The batch goes out within a fifth of a second, not the default five.
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("INRUN_LOG", "info,inrun_runtime=debug"),
            ("NO_COLOR", "1"),
        ],
    );
    until_holder(&ns, lease, "traced", WAIT).await;
    let ar = resource(&group, "Note");
    apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: Note\nmetadata: {{name: first}}\nspec: {{text: hi}}\n"),
    )
    .await;
    // The reconcile's span and everything under it, once its status write is in.
    let found = || {
        let spans = received.lock().expect("lock").clone();
        let root = spans.iter().find(|s| {
            s.name == "reconcile"
                && s.parent_span_id.is_empty()
                && attribute(s, "object.ref").is_some_and(|r| r.ends_with(&format!("{ns}/first")))
        })?;
        let trace: Vec<_> = spans
            .iter()
            .filter(|s| s.trace_id == root.trace_id)
            .cloned()
            .collect();
        trace
            .iter()
            .any(|s| s.name == "status")
            .then(|| (root.clone(), trace))
    };
    let deadline = std::time::Instant::now() + WAIT;
    let (root, trace) = loop {
        if let Some(found) = found() {
            break found;
        }
        if std::time::Instant::now() > deadline {
            let spans = received.lock().expect("lock").clone();
            panic!(
                "no trace of the reconcile; {} span(s) received: {:?}\nhost log:\n{}",
                spans.len(),
                spans
                    .iter()
                    .map(|s| (
                        s.name.clone(),
                        attribute(s, "object.ref"),
                        s.parent_span_id.len()
                    ))
                    .collect::<Vec<_>>(),
                std::fs::read_to_string(dir.path().join("traced.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // The tenant: the Blueprint that serves the CR.
    assert_eq!(
        attribute(&root, "inrun.blueprint").as_deref(),
        Some("leader")
    );
    let names: std::collections::BTreeSet<&str> = trace.iter().map(|s| s.name.as_str()).collect();
    for step in [
        "gate",
        "prepare",
        "maintain",
        "reconciler",
        "apply",
        "readiness",
        "status",
        "k8s.write",
    ] {
        assert!(names.contains(step), "{step} missing from {names:?}");
    }
    // Every span hangs from the reconcile, through its parents.
    let by_id: std::collections::HashMap<&[u8], &opentelemetry_proto::tonic::trace::v1::Span> =
        trace.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    for span in &trace {
        let mut at = span;
        while !at.parent_span_id.is_empty() {
            at = by_id
                .get(at.parent_span_id.as_slice())
                .unwrap_or_else(|| panic!("{}'s parent is not in the trace", span.name));
        }
        assert_eq!(
            at.span_id, root.span_id,
            "{} is not under the reconcile",
            span.name
        );
    }
    // The writes: the finalizer apply, the ConfigMap (created: 201), the status, the
    // event; each with its verb and answer.
    let writes: Vec<_> = trace
        .iter()
        .filter(|s| s.name == "k8s.write")
        .map(|s| {
            (
                attribute(s, "http.request.method").unwrap_or_default(),
                attribute(s, "url.path").unwrap_or_default(),
                attribute(s, "http.response.status_code").unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        writes
            .iter()
            .any(|(m, p, c)| m == "PATCH" && p.ends_with("/configmaps/first") && c == "201"),
        "{writes:?}"
    );
    assert!(
        writes
            .iter()
            .any(|(m, p, _)| m == "PATCH" && p.ends_with("/notes/first/status")),
        "{writes:?}"
    );
    // The reconcile's log lines carry the trace id the receiver shows.
    let id: String = root.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    until_logged(&dir.path().join("traced.log"), &format!("trace_id={id}")).await;
    Ok(())
}
