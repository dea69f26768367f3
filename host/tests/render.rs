//! `inrun render` and `inrun validate` end to end: the example Blueprints per reconciler
//! kind, the managedResources fence, and Blueprint errors that name file, CRD and field.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn plugin(name: &str) -> String {
    let dir = std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("plugins/target/wasm32-wasip2/release"));
    dir.join(format!("{name}.wasm")).display().to_string()
}

fn inrun(args: &[&str]) -> (bool, String, String) {
    let cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(args)
        .env("INRUN_CACHE_DIR", cache.path())
        .output()
        .expect("run inrun");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn render_example(example: &str) -> Value {
    let dir = root().join("deploy/examples").join(example);
    let bp = dir.join("blueprint.yaml");
    let cr = dir.join("webapp.yaml");
    let (ok, stdout, stderr) = inrun(&[
        "render",
        "-b",
        &bp.display().to_string(),
        "-f",
        &cr.display().to_string(),
        "-o",
        "json",
    ]);
    assert!(ok, "render {example} failed: {stderr}");
    serde_json::from_str(&stdout).expect("render prints JSON")
}

fn names_and_kinds(out: &Value) -> Vec<(String, String)> {
    out["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().into(),
                r["metadata"]["name"].as_str().unwrap_or_default().into(),
            )
        })
        .collect()
}

#[test]
fn declarative_example_renders_a_deployment_and_service_with_emitted_status() {
    let out = render_example("declarative");
    assert_eq!(out["reconciler"], "declarative");
    assert_eq!(
        names_and_kinds(&out),
        [
            ("Deployment".into(), "shop".into()),
            ("Service".into(), "shop".into())
        ]
    );
    assert_eq!(out["resources"][0]["spec"]["replicas"], 2);
    assert_eq!(out["status"]["image"], "nginx:1.27");
    assert_eq!(out["status"]["url"], "http://shop.default.svc:80");
}

#[test]
fn hooks_example_adds_labels_an_annotation_and_a_sidecar_to_the_templates() {
    let out = render_example("hooks");
    assert_eq!(out["reconciler"], "hooks");
    let deployment = &out["resources"][0];
    assert_eq!(
        deployment["metadata"]["labels"]["demo.inrun.dev/team"],
        "payments"
    );
    assert_eq!(
        deployment["metadata"]["annotations"]["demo.inrun.dev/rendered-by"],
        "hooks"
    );
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert!(
        containers.iter().any(|c| c["name"] == "log-shipper"),
        "{containers:?}"
    );
    assert_eq!(out["labels"]["demo.inrun.dev/team"], "payments");
}

#[test]
fn constructor_example_renders_what_the_component_returns() {
    let out = render_example("constructor");
    assert_eq!(out["reconciler"], "constructor");
    assert_eq!(
        names_and_kinds(&out),
        [
            ("Deployment".into(), "shop".into()),
            ("Service".into(), "shop".into())
        ]
    );
    assert_eq!(out["status"]["replicas"], 2);
    assert_eq!(out["labels"]["demo.inrun.dev/tier"], "web");
}

fn write_blueprint(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("bp.yaml");
    std::fs::write(&path, body).expect("write blueprint");
    let cr = dir.join("cr.yaml");
    std::fs::write(
        &cr,
        "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {name: shop, namespace: default}\nspec: {image: nginx}\n",
    )
    .expect("write cr");
    path
}

fn constructor_blueprint(location: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: demo.inrun.dev\n      version: v1alpha1\n      kind: WebApp\n      reconcile:\n        default: false\n        constructor: {{location: \"{location}\", limits: {{deadline: 200ms}}}}\n        managedResources:\n          - {{apiVersion: v1, kind: ConfigMap}}\n"
    )
}

#[test]
fn a_forbidden_kind_fails_the_render_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = write_blueprint(
        dir.path(),
        &constructor_blueprint(&plugin("inrun_test_forbidden")),
    );
    let cr = dir.path().join("cr.yaml");
    let (ok, _, stderr) = inrun(&[
        "render",
        "-b",
        &bp.display().to_string(),
        "-f",
        &cr.display().to_string(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("ClusterRoleBinding"), "{stderr}");
    assert!(
        stderr.contains("is not allowed by reconcile.managedResources"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one clear line: {stderr}");
}

#[test]
fn a_plugin_past_its_deadline_fails_the_render_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = write_blueprint(
        dir.path(),
        &constructor_blueprint(&plugin("inrun_test_spin")),
    );
    let cr = dir.path().join("cr.yaml");
    let (ok, _, stderr) = inrun(&[
        "render",
        "-b",
        &bp.display().to_string(),
        "-f",
        &cr.display().to_string(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("exceeded its 0.2s deadline"), "{stderr}");
}

#[test]
fn validate_names_file_crd_and_field_for_a_missing_hook_function() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hooks = plugin("inrun_plugin_labels_hooks");
    let bp = write_blueprint(
        dir.path(),
        &format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: demo.inrun.dev\n      version: v1alpha1\n      kind: WebApp\n      reconcile:\n        onReconcile: []\n        hooks:\n          - {{location: \"{hooks}\", function: add-labels}}\n          - {{location: \"{hooks}\", function: no-such-hook}}\n"
        ),
    );
    let (ok, _, stderr) = inrun(&["validate", "-b", &bp.display().to_string()]);
    assert!(!ok);
    assert!(
        stderr.contains("bp.yaml: crd WebApp: spec.crds[0].reconcile.hooks[1].function"),
        "{stderr}"
    );
    assert!(stderr.contains("no-such-hook"), "{stderr}");
}

#[test]
fn validate_reports_a_missing_plugin_file_by_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = write_blueprint(dir.path(), &constructor_blueprint("./nope.wasm"));
    let (ok, _, stderr) = inrun(&["validate", "-b", &bp.display().to_string()]);
    assert!(!ok);
    assert!(
        stderr.contains("crd WebApp: spec.crds[0].reconcile.constructor.location"),
        "{stderr}"
    );
    assert!(stderr.contains("nope.wasm"), "{stderr}");
}

#[test]
fn plugin_inspect_shows_world_functions_and_digest() {
    let (ok, stdout, stderr) = inrun(&[
        "plugin",
        "inspect",
        &plugin("inrun_plugin_labels_hooks"),
        "-o",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let info: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(info["world"], "hooks");
    assert!(
        info["sha256"]
            .as_str()
            .unwrap_or_default()
            .starts_with("sha256:")
    );
    assert!(
        info["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .any(|f| f == "add-sidecar")
    );
    let (ok, stdout, _) = inrun(&[
        "plugin",
        "inspect",
        &plugin("inrun_test_chatty"),
        "-o",
        "json",
    ]);
    assert!(ok);
    let info: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(info["world"], "reconciler");
    let imports = info["imports"].as_array().expect("imports");
    assert!(
        imports.iter().any(|i| i
            .as_str()
            .unwrap_or_default()
            .starts_with("inrun:reconciler/host")),
        "{imports:?}"
    );
}

#[test]
fn each_tenant_example_validates_on_its_own_and_the_blueprint_crd_is_printed() {
    // `inrun run --tenants deploy/examples/tenants` serves every YAML file there: each one
    // must be a tenant that loads.
    let dir = root().join("deploy/examples/tenants");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("tenants example")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    assert_eq!(files, ["team-a.yaml", "team-b.yaml"]);
    for file in files {
        let path = dir.join(&file);
        let (ok, stdout, stderr) = inrun(&["validate", "-b", &path.display().to_string()]);
        assert!(ok, "{file}: {stderr}");
        assert!(stdout.contains("valid"), "{stdout}");
    }
    let (ok, stdout, stderr) = inrun(&["generate", "blueprint-crd"]);
    assert!(ok, "{stderr}");
    let crd: Value = serde_yaml_ng::from_str(&stdout).expect("yaml");
    assert_eq!(crd["metadata"]["name"], "blueprints.inrun.dev");
    assert_eq!(crd["spec"]["scope"], "Cluster");
}

/// Renders `cr` (YAML text) through `blueprint` (YAML text), both written to a scratch
/// directory; the JSON output.
fn render_texts(blueprint: &str, cr: &str) -> Value {
    render_texts_with(blueprint, cr, &[])
}

/// A backend with no things: every request gets a 404; the methods are noted.
fn empty_backend() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // The rest of the head; these requests carry no body worth reading.
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            if let Some(method) = line.split_whitespace().next() {
                noted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(method.to_string());
            }
            let _ = (&stream).write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (port, seen)
}

/// The package calls a render printed, in order.
fn infrastructure(out: &Value) -> Vec<&str> {
    out["infrastructure"]
        .as_array()
        .expect("infrastructure")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn a_package_renders_its_reads_and_the_converge_it_would_run_without_running_it() {
    let (port, seen) = empty_backend();
    let out = render_texts(
        &format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: p}}\nspec:\n  crds:\n    - group: infra.example.com\n      version: v1\n      kind: Db\n      reconcile:\n        default: false\n        package:\n          location: \"{}\"\n          capabilities: {{http: {{hosts: [\"127.0.0.1:{port}\"]}}}}\n",
            plugin("inrun_test_infra")
        ),
        &format!(
            "apiVersion: infra.example.com/v1\nkind: Db\nmetadata: {{name: db, namespace: team}}\nspec: {{config: {{endpoint: \"http://127.0.0.1:{port}\", size: 2}}}}\n"
        ),
    );
    assert_eq!(out["reconciler"], "package");
    let calls = infrastructure(&out);
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[0], "validate: valid");
    assert!(
        calls[1].starts_with(&format!(
            "identity: boundary http://127.0.0.1:{port}, profile team--db, hash "
        )),
        "{calls:?}"
    );
    assert_eq!(
        calls[2],
        "observe: exists false, matches false, ready false"
    );
    assert_eq!(calls[3], "converge: would run (not offline)");
    assert_eq!(out["status"]["profile"], "team--db");
    assert_eq!(out["ready"]["reason"], "Progressing");
    // Only the read reached the backend: render never converges.
    assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), ["GET"]);
}

/// Renders `cr` through the Blueprint with extra arguments (a target, `--finalizing`).
fn render_texts_with(blueprint: &str, cr: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = dir.path().join("blueprint.yaml");
    std::fs::write(&bp, blueprint).expect("write blueprint");
    let file = dir.path().join("cr.yaml");
    std::fs::write(&file, cr).expect("write cr");
    let (bp, file) = (bp.display().to_string(), file.display().to_string());
    let mut args = vec!["render", "-b", &bp, "-f", &file, "-o", "json"];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = inrun(&args);
    assert!(ok, "render failed: {stderr}");
    serde_json::from_str(&stdout).expect("render prints JSON")
}

#[test]
fn finalizing_through_a_package_serve_target_runs_the_packages_deletion() {
    let (port, seen) = empty_backend();
    // Templates by default; a serve target that is a package.
    let blueprint = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: p}}\nspec:\n  crds:\n    - group: infra.example.com\n      version: v1\n      kind: Db\n      reconcile:\n        onReconcile:\n          - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cm}}}}\n        managedResources:\n          - {{apiVersion: v1, kind: ConfigMap}}\n      serve:\n        targets:\n          - name: infra\n            reconcile:\n              default: false\n              package:\n                location: \"{}\"\n                capabilities: {{http: {{hosts: [\"127.0.0.1:{port}\"]}}}}\n",
        plugin("inrun_test_infra")
    );
    let cr = format!(
        "apiVersion: infra.example.com/v1\nkind: Db\nmetadata: {{name: db, namespace: team}}\nspec: {{deletionPolicy: Delete, config: {{endpoint: \"http://127.0.0.1:{port}\", size: 2}}}}\n"
    );
    let out = render_texts_with(&blueprint, &cr, &["--target", "infra", "--finalizing"]);
    assert_eq!(out["reconciler"], "package");
    // The CR holds the package's finalizer, so its deletion asks the package what is there
    // (held by the default block's finalizer instead, the package has nothing to release).
    let calls = infrastructure(&out);
    assert!(
        calls.iter().any(|c| c.starts_with("observe: exists false")),
        "{calls:?}"
    );
    assert_eq!(
        out["events"],
        serde_json::json!(["Finalized: Deleted: the infrastructure is gone"])
    );
    // Only the read reached the backend.
    assert_eq!(*seen.lock().unwrap_or_else(|p| p.into_inner()), ["GET"]);
}

#[test]
fn render_prints_the_reconcilers_conditions_merged_with_ready() {
    let out = render_texts(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: c}\nspec:\n  crds:\n    - group: c.example.com\n      version: v1\n      kind: Site\n      emit:\n        status:\n          conditions:\n            - {type: Exposed, status: \"True\", reason: HasHost, message: \"at {{ .spec.host }}\"}\n            - {type: Ready, status: \"False\", reason: Spoofed}\n",
        "apiVersion: c.example.com/v1\nkind: Site\nmetadata: {name: s, namespace: web}\nspec: {host: example.org}\n",
    );
    let conditions = out["conditions"].as_array().expect("conditions");
    let types: Vec<&str> = conditions
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["Exposed", "Reconciled", "Ready"], "{out}");
    assert_eq!(conditions[0]["message"], "at example.org");
    assert_eq!(conditions[2]["status"], "True", "Ready stays the host's");
    assert!(
        conditions
            .iter()
            .all(|c| c.get("lastTransitionTime").is_none())
    );
}

const DEPLOYING: &str = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: d}\nspec:\n  crds:\n    - group: d.example.com\n      version: v1\n      kind: App\n      reconcile:\n        managedResources:\n          - {apiVersion: v1, kind: ConfigMap}\n          - {apiVersion: apps/v1, kind: Deployment}\n        onReconcile:\n          - {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ .metadata.name }}\"}}\n          - apiVersion: apps/v1\n            kind: Deployment\n            metadata: {name: \"{{ .metadata.name }}\"}\n            spec: {replicas: 2}\n";

#[test]
fn render_judges_children_on_observed_objects_and_reads_the_cr_from_standard_input() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = dir.path().join("blueprint.yaml");
    std::fs::write(&bp, DEPLOYING).expect("write blueprint");
    let observed = dir.path().join("observed.yaml");
    let render = |observed: Option<&std::path::Path>| {
        let cache = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_inrun"));
        cmd.args([
            "render",
            "-b",
            &bp.display().to_string(),
            "-f",
            "-",
            "-o",
            "json",
        ])
        .env("INRUN_CACHE_DIR", cache.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        if let Some(o) = observed {
            cmd.args(["--observed", &o.display().to_string()]);
        }
        let mut child = cmd.spawn().expect("run inrun");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"apiVersion: d.example.com/v1\nkind: App\nmetadata: {name: shop, namespace: web}\n")
            .expect("write the CR");
        let out = child.wait_with_output().expect("inrun ends");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("render prints JSON")
    };
    // Nothing observed: the Deployment's state is not known.
    let out = render(None);
    assert_eq!(
        out["ready"],
        serde_json::json!({"status": "Unknown", "reason": "Progressing", "message": "Deployment shop: not observed"})
    );
    // Observed as a controller left it (a List, as `kubectl get -o yaml` prints one).
    let deployment = |available: i64| {
        format!(
            "{{apiVersion: apps/v1, kind: Deployment, metadata: {{name: shop, namespace: web, generation: 1}}, spec: {{replicas: 2}}, status: {{observedGeneration: 1, replicas: 2, updatedReplicas: 2, readyReplicas: {available}, availableReplicas: {available}}}}}"
        )
    };
    std::fs::write(
        &observed,
        format!(
            "apiVersion: v1\nkind: List\nitems:\n  - {}\n",
            deployment(0)
        ),
    )
    .expect("write observed");
    let out = render(Some(&observed));
    assert_eq!(out["ready"]["status"], "False");
    assert_eq!(
        out["ready"]["message"],
        "Deployment shop: 0/2 replicas available"
    );
    assert_eq!(out["status"]["resources"][1]["state"], "InProgress");
    std::fs::write(&observed, format!("---\n{}\n", deployment(2))).expect("write observed");
    let out = render(Some(&observed));
    assert_eq!(out["ready"]["status"], "True", "{out}");
    assert_eq!(out["ready"]["reason"], "Ready");
}

/// Writes `files` (name, text) into a fresh directory and runs `inrun` there with `args`.
fn inrun_in(files: &[(&str, &str)], args: &[&str]) -> (tempfile::TempDir, bool, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    }
    let (ok, stdout, stderr) = inrun_at(dir.path(), args);
    (dir, ok, stdout, stderr)
}

/// Runs `inrun` in `dir` with `args` and a fresh plugin cache: success, stdout, stderr.
fn inrun_at(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(args)
        .current_dir(dir)
        .env("INRUN_CACHE_DIR", cache.path())
        .output()
        .expect("run inrun");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A Blueprint whose `Probe` CRs are reconciled by `plugin` with `capabilities`.
fn capable_blueprint(plugin_name: &str, capabilities: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: c}}\nspec:\n  crds:\n    - group: c.example.com\n      version: v1\n      kind: Probe\n      reconcile:\n        default: false\n        constructor:\n          location: \"{}\"\n          capabilities: {capabilities}\n        managedResources:\n          - {{apiVersion: v1, kind: ConfigMap}}\n",
        plugin(plugin_name)
    )
}

fn probe(spec: &str) -> String {
    format!(
        "apiVersion: c.example.com/v1\nkind: Probe\nmetadata: {{name: p, namespace: team}}\nspec: {spec}\n"
    )
}

const RENDER_JSON: [&str; 8] = [
    "render",
    "-b",
    "bp.yaml",
    "-f",
    "cr.yaml",
    "-o",
    "json",
    "--observed",
];

#[test]
fn observed_objects_answer_a_plugins_cluster_reads_within_its_grant() {
    let bp = capable_blueprint(
        "inrun_test_reader",
        "{cluster: {read: [{apiVersion: v1, kind: ConfigMap}]}}",
    );
    let observed = "apiVersion: v1\nkind: List\nitems:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: settings, namespace: team, labels: {app: web}}, data: {color: teal}}\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: other, namespace: team, labels: {app: web}}}\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: elsewhere, namespace: other, labels: {app: web}}}\n";
    let cr = probe("{configMap: settings, key: color, selector: app=web}");
    let files = [
        ("bp.yaml", bp.as_str()),
        ("cr.yaml", cr.as_str()),
        ("observed.yaml", observed),
    ];
    let mut args = RENDER_JSON.to_vec();
    args.push("observed.yaml");
    let (_dir, ok, stdout, stderr) = inrun_in(&files, &args);
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(out["status"]["value"], "teal");
    assert_eq!(out["status"]["found"], true);
    assert_eq!(out["status"]["matched"], 2, "the CR's namespace only");
    assert_eq!(out["resources"][0]["data"]["value"], "teal");
    // Not in the file: not found.
    let cr = probe("{configMap: missing}");
    let (_dir, ok, stdout, stderr) = inrun_in(
        &[
            ("bp.yaml", bp.as_str()),
            ("cr.yaml", &cr),
            ("observed.yaml", observed),
        ],
        &args,
    );
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(out["status"]["found"], false);
    // A kind the grant does not list is refused though the file holds it.
    let cr = probe("{read: {apiVersion: v1, kind: Namespace, name: team}}");
    let with_ns =
        format!("{observed}---\n{{apiVersion: v1, kind: Namespace, metadata: {{name: team}}}}\n");
    let (_dir, ok, _, stderr) = inrun_in(
        &[
            ("bp.yaml", bp.as_str()),
            ("cr.yaml", &cr),
            ("observed.yaml", &with_ns),
        ],
        &args,
    );
    assert!(!ok);
    assert!(
        stderr.contains("reading Namespace (v1) is not granted to plugin inrun_test_reader"),
        "{stderr}"
    );
}

#[test]
fn an_http_fixture_answers_a_plugins_requests_within_its_grant_and_nothing_else() {
    let bp = capable_blueprint("inrun_test_fetcher", "{http: {hosts: [api.test]}}");
    let fixture = "- request: {url: 'http://api.test/v1/things'}\n  response:\n    status: 201\n    headers: {content-type: application/json}\n    body: {things: 2}\n- request: {url: 'http://elsewhere.test/'}\n  response: {body: nope}\n";
    let run = |url: &str| {
        let cr = probe(&format!("{{url: '{url}'}}"));
        inrun_in(
            &[
                ("bp.yaml", bp.as_str()),
                ("cr.yaml", &cr),
                ("http.yaml", fixture),
            ],
            &[
                "render",
                "-b",
                "bp.yaml",
                "-f",
                "cr.yaml",
                "-o",
                "json",
                "--http-fixture",
                "http.yaml",
            ],
        )
    };
    let (_dir, ok, stdout, stderr) = run("http://api.test/v1/things");
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(out["status"]["code"], 201);
    assert_eq!(out["status"]["body"], r#"{"things":2}"#);
    assert_eq!(out["status"]["contentType"], "application/json");
    let (_dir, ok, _, stderr) = run("http://api.test/v1/other");
    assert!(!ok);
    assert!(
        stderr.contains("GET http://api.test/v1/other: http.yaml has no answer for it"),
        "{stderr}"
    );
    // Listed in the fixture, but not granted: refused before the fixture is asked.
    let (_dir, ok, _, stderr) = run("http://elsewhere.test/");
    assert!(!ok);
    assert!(
        stderr.contains("HTTP to elsewhere.test:80 is not granted to plugin inrun_test_fetcher"),
        "{stderr}"
    );
}

/// A declarative Blueprint with one external call of each kind, whose results land in
/// status; `flaky` falls back to its default.
const EXTERNAL: &str = r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: x}
spec:
  crds:
    - group: x.example.com
      version: v1
      kind: Shop
      emit:
        status:
          replicas: "{{ .external.plan[0].replicas }}"
          image: "{{ .external.image }}"
          up: "{{ .external.up.value }}"
          owner: "{{ .external.owner.name }}"
          flaky: "{{ .external.flaky.note }}"
      reconcile:
        external:
          - name: plan
            postgres:
              url: "postgres://db.invalid:5432/shop"
              query: "SELECT replicas FROM plans WHERE name = $1"
              params: ["{{ .metadata.name }}"]
          - name: image
            redis: {url: "redis://cache.invalid:6379/", command: [GET, "image:{{ .metadata.name }}"]}
          - name: up
            prometheus: {url: "http://prometheus.invalid:9090", query: 'up{job="shop"}'}
          - name: owner
            http: {url: "http://owners.invalid/shops/{{ .metadata.name }}"}
          - name: flaky
            http: {url: "http://flaky.invalid/"}
            onError: default
            default: {note: fallback}
"#;

#[test]
fn an_external_fixture_answers_each_kind_of_call_by_name_without_calling_it() {
    let fixture = "plan: {result: [{replicas: 3}]}\nimage: {result: 'nginx:1.27'}\nup: {result: {value: 1, labels: {job: shop}}}\nowner: {result: {name: payments}}\nflaky: {error: connection refused}\n";
    let cr = "apiVersion: x.example.com/v1\nkind: Shop\nmetadata: {name: shop, namespace: web}\n";
    let args = [
        "render",
        "-b",
        "bp.yaml",
        "-f",
        "cr.yaml",
        "-o",
        "json",
        "--external-fixture",
        "external.yaml",
    ];
    let (_dir, ok, stdout, stderr) = inrun_in(
        &[
            ("bp.yaml", EXTERNAL),
            ("cr.yaml", cr),
            ("external.yaml", fixture),
        ],
        &args,
    );
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(out["status"]["replicas"], 3);
    assert_eq!(out["status"]["image"], "nginx:1.27");
    assert_eq!(out["status"]["up"], 1);
    assert_eq!(out["status"]["owner"], "payments");
    assert_eq!(out["status"]["flaky"], "fallback");
    // A call the fixture does not name fails the render, even one with a default.
    let partial =
        "plan: {result: []}\nimage: {result: x}\nup: {result: {value: 1}}\nowner: {result: {}}\n";
    let (_dir, ok, _, stderr) = inrun_in(
        &[
            ("bp.yaml", EXTERNAL),
            ("cr.yaml", cr),
            ("external.yaml", partial),
        ],
        &args,
    );
    assert!(!ok);
    assert!(
        stderr.contains(
            "external call \"flaky\" (http) failed: external.yaml has no result for this call"
        ),
        "{stderr}"
    );
}

/// A project with a Blueprint (external calls answered by each case's fixture), cases
/// under tests/ that use it, and one that names another Blueprint.
fn golden_project(expected_replicas: &str) -> Vec<(String, String)> {
    let cr = "apiVersion: x.example.com/v1\nkind: Shop\nmetadata: {name: shop, namespace: web}\n";
    let fixture = |replicas: u32| {
        format!(
            "plan: {{result: [{{replicas: {replicas}}}]}}\nimage: {{result: 'nginx'}}\nup: {{result: {{value: 1}}}}\nowner: {{result: {{name: a}}}}\nflaky: {{result: {{note: live}}}}\n"
        )
    };
    let expected = |replicas: &str| {
        // Keys in another order than render prints them: compared as data.
        format!(
            "status:\n  up: 1\n  replicas: {replicas}\n  owner: a\n  image: nginx\n  flaky: live\n  resources: []\nreconciler: declarative\nresources: []\ncrd: shops.x.example.com\nready: {{status: 'True', reason: Ready, message: no resources to wait for}}\nconditions:\n  - {{type: Reconciled, status: 'True', reason: Reconciled, message: applied 0 resource(s), observedGeneration: 0}}\n  - {{type: Ready, status: 'True', reason: Ready, message: no resources to wait for, observedGeneration: 0}}\nevents: ['Reconciled: applied 0 resource(s)']\n"
        )
    };
    vec![
        ("blueprint.yaml".into(), EXTERNAL.into()),
        ("tests/one/cr.yaml".into(), cr.into()),
        ("tests/one/external.yaml".into(), fixture(3)),
        ("tests/one/expected.yaml".into(), expected("3")),
        ("tests/two/cr.yaml".into(), cr.into()),
        ("tests/two/external.yaml".into(), fixture(5)),
        (
            "tests/two/expected.yaml".into(),
            expected(expected_replicas),
        ),
        // A case naming its Blueprint, whose plugin's request http.yaml answers.
        (
            "fetch.yaml".into(),
            capable_blueprint("inrun_test_fetcher", "{http: {hosts: [api.test]}}"),
        ),
        ("tests/fetch/case.yaml".into(), "blueprint: ../../fetch.yaml\n".into()),
        ("tests/fetch/cr.yaml".into(), probe("{url: 'http://api.test/v1'}")),
        (
            "tests/fetch/http.yaml".into(),
            "- request: {url: 'http://api.test/v1'}\n  response: {body: pong, headers: {content-type: text/plain}}\n".into(),
        ),
        (
            "tests/fetch/expected.yaml".into(),
            "crd: probes.c.example.com\nreconciler: constructor\nresources: []\nstatus: {body: pong, code: 200, contentType: text/plain, resources: []}\nready: {status: 'True', reason: Ready, message: no resources to wait for}\nconditions:\n  - {type: Reconciled, status: 'True', reason: Reconciled, message: applied 0 resource(s), observedGeneration: 0}\n  - {type: Ready, status: 'True', reason: Ready, message: no resources to wait for, observedGeneration: 0}\nevents: ['Reconciled: applied 0 resource(s)']\n".into(),
        ),
        // No external.yaml: nothing is called, and the case expects the failure.
        ("tests/three/cr.yaml".into(), cr.into()),
        (
            "tests/three/expected.yaml".into(),
            "error: 'external call \"plan\" (postgres) failed: external.yaml (missing from the case) has no result for this call; add an entry named after it'\n".into(),
        ),
    ]
}

fn inrun_test(files: &[(String, String)], args: &[&str]) -> (tempfile::TempDir, bool, String) {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (dir, ok, stdout, stderr) = inrun_in(&files, args);
    (dir, ok, format!("{stdout}{stderr}"))
}

#[test]
fn inrun_test_passes_cases_whose_output_matches_as_data() {
    let (_dir, ok, out) = inrun_test(&golden_project("5"), &["test"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("ok fetch\nok one\nok three\nok two\n4 passed, 0 failed\n"),
        "{out}"
    );
}

#[test]
fn inrun_test_fails_a_differing_case_with_a_unified_diff_and_update_rewrites_it() {
    let (dir, ok, out) = inrun_test(&golden_project("4"), &["test"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("ok fetch\nok one\nok three\nFAIL two\n"),
        "{out}"
    );
    assert!(out.contains("--- expected.yaml\n+++ got\n"), "{out}");
    assert!(out.contains("-  replicas: 4\n+  replicas: 5\n"), "{out}");
    assert!(out.contains("3 passed, 1 failed\n"), "{out}");
    // --update writes what render prints; the cases pass again.
    let run = |args: &[&str]| {
        let (ok, stdout, _) = inrun_at(dir.path(), args);
        (ok, stdout)
    };
    let (ok, out) = run(&["test", "--update"]);
    assert!(
        ok && out.contains("updated fetch\nupdated one\nupdated three\nupdated two\n"),
        "{out}"
    );
    let written =
        std::fs::read_to_string(dir.path().join("tests/two/expected.yaml")).expect("read");
    assert!(
        written.starts_with("crd: shops.x.example.com\n"),
        "{written}"
    );
    assert!(written.contains("replicas: 5"), "{written}");
    let (ok, out) = run(&["test", "tests"]);
    assert!(ok && out.ends_with("4 passed, 0 failed\n"), "{out}");
}

#[cfg(unix)]
#[test]
fn inrun_test_update_replaces_a_symlinked_expected_file_without_writing_through_it() {
    let (dir, ok, out) = inrun_test(&golden_project("4"), &["test"]);
    assert!(!ok, "{out}");
    let outside = tempfile::NamedTempFile::new().expect("tempfile");
    std::fs::write(outside.path(), "keep me\n").expect("write");
    let expected = dir.path().join("tests/two/expected.yaml");
    std::fs::remove_file(&expected).expect("remove");
    std::os::unix::fs::symlink(outside.path(), &expected).expect("symlink");
    let (ok, out, err) = inrun_at(dir.path(), &["test", "--update"]);
    assert!(ok && out.contains("updated two\n"), "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(outside.path()).expect("read"),
        "keep me\n"
    );
    let meta = std::fs::symlink_metadata(&expected).expect("stat");
    assert!(meta.file_type().is_file(), "{meta:?}");
    // Its mode is what a file written in place gets, not a temporary file's owner-only one.
    use std::os::unix::fs::PermissionsExt;
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "").expect("write");
    let mode = |m: std::fs::Metadata| m.permissions().mode() & 0o777;
    assert_eq!(
        mode(meta),
        mode(std::fs::metadata(&plain).expect("stat")),
        "mode"
    );
    assert!(
        std::fs::read_to_string(&expected)
            .expect("read")
            .contains("replicas: 5")
    );
}

#[test]
fn inrun_test_of_a_directory_outside_the_current_one_takes_no_blueprint_from_above_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("resolve");
    let cr = "apiVersion: x.example.com/v1\nkind: Shop\nmetadata: {name: shop, namespace: web}\n";
    // Stray Blueprints above the project and in the current directory, none in the project.
    for (name, text) in [
        ("blueprint.yaml", "stray: true\n"),
        ("work/blueprint.yaml", "stray: true\n"),
        ("project/tests/one/cr.yaml", cr),
    ] {
        let path = base.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    }
    let cases = base.join("project/tests");
    for given in ["../project/tests".to_string(), cases.display().to_string()] {
        let cache = tempfile::tempdir().expect("tempdir");
        let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
            .args(["test", &given])
            .current_dir(base.join("work"))
            .env("INRUN_CACHE_DIR", cache.path())
            .output()
            .expect("run inrun");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{given}: {stdout}");
        let expected = format!(
            "FAIL one\n  no blueprint.yaml in {} or a directory above it up to {}; ",
            cases.join("one").display(),
            base.join("project").display()
        );
        assert!(stdout.starts_with(&expected), "{given}: {stdout}");
    }
}
