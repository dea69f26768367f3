//! End to end on a real kube-apiserver: `inrun plan` reads the CRs a host serves, renders
//! each with the running and the new version, dry-runs what would change, and lists
//! exactly the CRs a change touches — with the fields, the drift of a child edited by
//! hand, and the CRs a new plugin fails on — while the API server sees no write but dry
//! runs. The host and the plan both run as the ServiceAccount `inrun generate rbac` makes
//! (a plan reaches no farther than a run).

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::BTreeMap;

use inrun_testenv::{ControlPlane, TestResult};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::plan::{of, run as plan};
use support::*;

/// The live tests one at a time: each compares the API server's write counts before and
/// after its plan, which another test's host would move.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Blueprint serving `kind` in `group` with `reconcile` (indented six spaces).
fn blueprint(group: &str, kind: &str, reconcile: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: {kind}
{reconcile}"#
    )
}

/// Writes the API server counted, by (verb, resource), apart from dry runs; and the dry
/// runs, by the same. Reviews are created, never stored: asking what one may do changes
/// nothing, so they are left out.
async fn requests() -> (
    BTreeMap<(String, String), f64>,
    BTreeMap<(String, String), f64>,
) {
    let (mut writes, mut dry) = (BTreeMap::new(), BTreeMap::new());
    for w in apiserver_write_requests().await {
        if w.resource.ends_with("reviews") {
            continue;
        }
        let into = if w.dry_run { &mut dry } else { &mut writes };
        *into.entry((w.verb, w.resource)).or_insert(0.0) += w.count;
    }
    (writes, dry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_lists_exactly_the_crs_it_changes_with_their_fields_and_writes_nothing()
-> TestResult {
    let _serial = SERIAL.lock().await;
    let group = unique_group("plan");
    let reconcile = |size: &str| {
        format!(
            r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-settings"}}
            data: {{tier: "{{{{ .spec.tier }}}}", size: "{size}"}}
        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]
"#
        )
    };
    let current = blueprint(&group, "Shop", &reconcile("small"));
    let new = blueprint(
        &group,
        "Shop",
        &reconcile("{% if .spec.tier == 'gold' %}large{% else %}small{% endif %}"),
    );
    let dir = tempfile::tempdir()?;
    let (ns, current_path, kubeconfig) = served_then_stopped(
        &group,
        "Shop",
        &current,
        &[
            ("g1", "{tier: gold}"),
            ("g2", "{tier: gold}"),
            ("s1", "{tier: silver}"),
            ("s2", "{tier: silver}"),
        ],
        dir.path(),
    )
    .await;
    let new_path = dir.path().join("new.yaml");
    std::fs::write(&new_path, &new)?;
    // s2's ConfigMap edited by hand: the running version would put it back too.
    let cms: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &configmaps());
    cms.patch(
        "s2-settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"size": "tiny"}})),
    )
    .await?;
    let (writes_before, dry_before) = requests().await;
    let (code, report) = plan(
        &kubeconfig,
        &[
            "--current",
            current_path.to_str().unwrap_or_default(),
            "--blueprint",
            new_path.to_str().unwrap_or_default(),
            "-n",
            &ns,
        ],
    );
    let (writes_after, dry_after) = requests().await;
    assert_eq!(code, 2, "something changes: {report:#?}");
    for gold in ["g1", "g2"] {
        let p = of(&report, gold);
        assert_eq!(p["verdict"], "changes", "{p:#}");
        let updated = &p["updated"][0];
        assert_eq!(
            updated["child"],
            format!("ConfigMap {ns}/{gold}-settings"),
            "{p:#}"
        );
        assert_eq!(
            updated["fields"],
            json!([{"path": "data.size", "from": "small", "to": "large"}]),
            "{p:#}"
        );
        assert!(updated.get("drift").is_none(), "{p:#}");
    }
    assert_eq!(of(&report, "s1")["verdict"], "unchanged", "{report:#?}");
    let drifted = of(&report, "s2");
    assert_eq!(drifted["verdict"], "changes", "{drifted:#}");
    assert_eq!(drifted["updated"][0]["drift"], true, "{drifted:#}");
    assert_eq!(
        drifted["updated"][0]["fields"],
        json!([{"path": "data.size", "from": "tiny", "to": "small"}]),
        "{drifted:#}"
    );
    assert_eq!(report.len(), 4, "{report:#?}");
    assert_eq!(writes_after, writes_before, "the plan wrote to the cluster");
    assert!(
        dry_after.values().sum::<f64>() > dry_before.values().sum::<f64>(),
        "the changed children were dry-run applied"
    );
    // Acting as a ServiceAccount that may read none of it, the admin's plan sees nothing
    // either: a plan reaches no farther than whom it acts as.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .arg("plan")
        .arg("--current")
        .arg(&current_path)
        .arg("--blueprint")
        .arg(&new_path)
        .args(["-n", &ns, "--as-service-account", &format!("{ns}/nobody")])
        .arg("--kubeconfig")
        .arg(ControlPlane::shared().kubeconfig())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("listing the CRs of") && stderr.contains("forbidden"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_plugin_that_fails_on_some_crs_lists_exactly_those_and_exits_1() -> TestResult {
    let _serial = SERIAL.lock().await;
    let group = unique_group("planfail");
    let current = stamped(&group, "App");
    let dir = tempfile::tempdir()?;
    let (ns, current_path, kubeconfig) = served_then_stopped(
        &group,
        "App",
        &current,
        &[
            ("with-image", "{image: nginx}"),
            ("also", "{image: httpd}"),
            ("bare", "{}"),
        ],
        dir.path(),
    )
    .await;
    let swap = format!("inrun_test_stamp_v1={}", plugin("inrun_plugin_webapp"));
    let (writes_before, _) = requests().await;
    let (code, report) = plan(
        &kubeconfig,
        &[
            "--current",
            current_path.to_str().unwrap_or_default(),
            "--plugin",
            &swap,
            "-n",
            &ns,
        ],
    );
    let (writes_after, _) = requests().await;
    assert_eq!(code, 1, "the new version fails on a CR: {report:#?}");
    let bare = of(&report, "bare");
    assert_eq!(bare["verdict"], "fails", "{bare:#}");
    assert!(
        bare["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.image is required")),
        "{bare:#}"
    );
    for name in ["with-image", "also"] {
        let p = of(&report, name);
        assert_eq!(p["verdict"], "changes", "{p:#}");
        let created: Vec<&str> = p["created"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            created,
            [
                format!("Deployment {ns}/{name}"),
                format!("Service {ns}/{name}")
            ],
            "{p:#}"
        );
    }
    assert_eq!(report.len(), 3, "{report:#?}");
    assert_eq!(writes_after, writes_before, "the plan wrote to the cluster");
    Ok(())
}

#[test]
fn offline_objects_are_planned_with_the_same_verdicts_and_exit_codes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let current = blueprint(
        "offline.plan.test",
        "Shop",
        r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-settings"}
            data: {size: small}
        managedResources: [{apiVersion: v1, kind: ConfigMap}]
"#,
    );
    let new = current.replace("size: small", "size: large");
    std::fs::write(dir.path().join("current.yaml"), &current)?;
    std::fs::write(dir.path().join("new.yaml"), &new)?;
    let objects = dir.path().join("objects");
    std::fs::create_dir(&objects)?;
    std::fs::write(
        objects.join("crs.yaml"),
        r#"apiVersion: offline.plan.test/v1alpha1
kind: Shop
metadata: {name: a, namespace: team, uid: u-a}
spec: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a-settings, namespace: team, labels: {inrun.dev/owner-uid: u-a}}
data: {size: small}
"#,
    )?;
    let run = |blueprint: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
            .arg("plan")
            .arg("--current")
            .arg(dir.path().join("current.yaml"))
            .arg("--blueprint")
            .arg(dir.path().join(blueprint))
            .arg("--objects")
            .arg(&objects)
            .output()
            .expect("inrun plan")
    };
    let changed = run("new.yaml");
    let text = String::from_utf8_lossy(&changed.stdout);
    assert_eq!(changed.status.code(), Some(2), "{text}");
    assert!(
        text.contains("shops.offline.plan.test team/a: changes"),
        "{text}"
    );
    assert!(text.contains(r#"data.size: "small" → "large""#), "{text}");
    let same = run("current.yaml");
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    // A schema that drops a field one CR uses strands that CR only, and the plan fails.
    let typed = |fields: &str| {
        current.replace(
            "      kind: Shop\n",
            &format!(
                "      kind: Shop\n      schema: {{type: object, properties: {{spec: {{type: object, properties: {{{fields}}}}}}}}}\n"
            ),
        )
    };
    std::fs::write(
        dir.path().join("current.yaml"),
        typed("size: {type: string}, note: {type: string}"),
    )?;
    std::fs::write(
        dir.path().join("narrowed.yaml"),
        typed("note: {type: string}"),
    )?;
    std::fs::write(
        objects.join("sized.yaml"),
        "apiVersion: offline.plan.test/v1alpha1\nkind: Shop\nmetadata: {name: b, namespace: team, uid: u-b}\nspec: {size: L}\n",
    )?;
    let narrowed = run("narrowed.yaml");
    let text = String::from_utf8_lossy(&narrowed.stdout);
    assert_eq!(narrowed.status.code(), Some(1), "{text}");
    assert!(
        text.contains("shops.offline.plan.test team/b: no longer valid under the new schema: spec.size: removed"),
        "{text}"
    );
    assert!(!text.contains("team/a: no longer valid"), "{text}");
    Ok(())
}

/// A Blueprint serving `kind` with the `stamp` v1 constructor, allowed to write what the
/// web app plugins return too (a Deployment and a Service).
fn stamped(group: &str, kind: &str) -> String {
    blueprint(
        group,
        kind,
        &format!(
            r#"      reconcile:
        default: false
        constructor: {{location: "{}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
          - {{apiVersion: v1, kind: Service}}
          - {{apiVersion: apps/v1, kind: Deployment}}
"#,
            plugin("inrun_test_stamp_v1")
        ),
    )
}

/// A remote reconciler on 127.0.0.1 with two versions: `/v1` and `/v2` each declare a
/// ConfigMap `<name>-remote` whose `data.version` names it; `/v2` refuses the CR `bad`.
async fn remote_versions() -> String {
    async fn answer(version: &'static str, body: axum::body::Bytes) -> axum::response::Response {
        use axum::response::IntoResponse;
        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
        let name = req["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        if version == "v2" && name == "bad" {
            return axum::Json(json!({"result": "error", "error": "v2 cannot serve bad"}))
                .into_response();
        }
        axum::Json(json!({
            "result": "ok",
            "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("{name}-remote")},
                           "data": {"version": version}}],
        }))
        .into_response()
    }
    let app = axum::Router::new()
        .route("/v1", axum::routing::post(|b| answer("v1", b)))
        .route("/v2", axum::routing::post(|b| answer("v2", b)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// Starts a host for `current`, creates `crs` (name, spec) of `kind`, waits until each is
/// Ready, stops the host; returns the namespace, the Blueprint's file and a kubeconfig of
/// the ServiceAccount `inrun generate rbac` makes for it.
async fn served_then_stopped(
    group: &str,
    kind: &str,
    current: &str,
    crs: &[(&str, &str)],
    dir: &std::path::Path,
) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let path = dir.join("current.yaml");
    std::fs::write(&path, current).expect("write");
    let host = Host::start(current).await;
    let ns = ControlPlane::shared()
        .namespace(&kind.to_lowercase())
        .await
        .expect("namespace");
    let ar = resource(group, kind);
    served(&ar).await;
    for (name, spec) in crs {
        apply_cr(
            &ar,
            &ns,
            &format!("apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"),
        )
        .await;
    }
    for (name, _) in crs {
        eventually(&format!("{name} Ready"), || async {
            let cr = get(&ar, Some(&ns), name).await?;
            (reconciled(&cr)?.0 == "True").then_some(())
        })
        .await;
    }
    host.stop().await;
    let identity = support::identity::Identity::for_blueprints(
        &[inrun::blueprint::load(&path).expect("blueprint")],
        &support::identity::Identity::options(),
    )
    .await;
    let kubeconfig = identity.kubeconfig(dir);
    (ns, path, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_reconcilers_new_endpoint_is_called_for_each_cr_and_its_refusal_is_a_failure()
-> TestResult {
    let _serial = SERIAL.lock().await;
    let group = unique_group("planremote");
    let base = remote_versions().await;
    let blueprint_at = |version: &str| {
        blueprint(
            &group,
            "Remote",
            &format!(
                r#"      reconcile:
        default: false
        remote: {{endpoint: "{base}/{version}", timeout: 2s}}
        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]
"#
            ),
        )
    };
    let dir = tempfile::tempdir()?;
    let (ns, current, kubeconfig) = served_then_stopped(
        &group,
        "Remote",
        &blueprint_at("v1"),
        &[("good", "{}"), ("bad", "{}")],
        dir.path(),
    )
    .await;
    let new = dir.path().join("new.yaml");
    std::fs::write(&new, blueprint_at("v2"))?;
    let (code, report) = plan(
        &kubeconfig,
        &[
            "--current",
            current.to_str().unwrap_or_default(),
            "--blueprint",
            new.to_str().unwrap_or_default(),
            "-n",
            &ns,
        ],
    );
    assert_eq!(code, 1, "{report:#?}");
    let good = of(&report, "good");
    assert_eq!(
        good["updated"][0]["fields"],
        json!([{"path": "data.version", "from": "v1", "to": "v2"}]),
        "{good:#}"
    );
    let bad = of(&report, "bad");
    assert_eq!(bad["verdict"], "fails", "{bad:#}");
    assert!(
        bad["message"]
            .as_str()
            .is_some_and(|m| m.contains("v2 cannot serve bad")),
        "{bad:#}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_swapped_in_shows_the_children_it_would_create() -> TestResult {
    let _serial = SERIAL.lock().await;
    let group = unique_group("planpy");
    let current = stamped(&group, "Py");
    let dir = tempfile::tempdir()?;
    let (ns, current, kubeconfig) = served_then_stopped(
        &group,
        "Py",
        &current,
        &[("web", "{image: nginx}")],
        dir.path(),
    )
    .await;
    let swap = format!(
        "inrun_test_stamp_v1={}",
        plugin("inrun_plugin_webapp_python")
    );
    let (code, report) = plan(
        &kubeconfig,
        &[
            "--current",
            current.to_str().unwrap_or_default(),
            "--plugin",
            &swap,
            "-n",
            &ns,
        ],
    );
    assert_eq!(code, 2, "{report:#?}");
    let web = of(&report, "web");
    assert_eq!(
        web["created"],
        json!([format!("Deployment {ns}/web"), format!("Service {ns}/web")]),
        "{web:#}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaking_crd_change_is_refused_naming_the_crs_it_strands_unless_the_blueprint_allows_it()
-> TestResult {
    let _serial = SERIAL.lock().await;
    let group = unique_group("planschema");
    let typed = |fields: &str, allow: bool| {
        let allow = if allow {
            "  allowBreakingSchemaChanges: true\n"
        } else {
            ""
        };
        format!(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
{allow}  crds:
    - group: {group}
      version: v1alpha1
      kind: Shop
      schema: {{type: object, properties: {{spec: {{type: object, properties: {{{fields}}}}}}}}}
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-settings"}}
            data: {{note: "x"}}
        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]
"#
        )
    };
    let dir = tempfile::tempdir()?;
    let crs = [
        ("one", "{size: L}"),
        ("two", "{size: M}"),
        ("three", "{size: S}"),
        ("plain", "{note: n}"),
    ];
    let (ns, current, kubeconfig) = served_then_stopped(
        &group,
        "Shop",
        &typed("size: {type: string}, note: {type: string}", false),
        &crs,
        dir.path(),
    )
    .await;
    // A validation rule and a bound added: the plan judges each live CR by them, as the
    // API server would at its next write, and names only those they refuse.
    let ruled = dir.path().join("ruled.yaml");
    std::fs::write(
        &ruled,
        typed(
            "size: {type: string, maxLength: 1, x-kubernetes-validations: [{rule: \"self != 'L'\", message: no large shops}]}, note: {type: string, maxLength: 3}",
            false,
        ),
    )?;
    let (code, report) = plan(
        &kubeconfig,
        &[
            "--current",
            current.to_str().unwrap_or_default(),
            "--blueprint",
            ruled.to_str().unwrap_or_default(),
            "-n",
            &ns,
        ],
    );
    assert_eq!(code, 1, "{report:#?}");
    assert_eq!(
        of(&report, "one")["schema"],
        json!(["spec.size: new rule `self != 'L'` (no large shops)"]),
        "{report:#?}"
    );
    for name in ["two", "three", "plain"] {
        assert!(of(&report, name).get("schema").is_none(), "{report:#?}");
    }
    // The same Blueprint without spec.size: three CRs use it.
    let error = Host::start(&typed("note: {type: string}", false))
        .await
        .refused()
        .await;
    let message = inrun::errors::chain(&error);
    assert!(
        message.contains("spec.size: removed")
            && message.contains("3 live CR(s) would no longer pass it")
            && ["one", "two", "three"]
                .iter()
                .all(|n| message.contains(&format!("{ns}/{n}")))
            && !message.contains(&format!("{ns}/plain")),
        "{message}"
    );
    let crds: Api<DynamicObject> = Api::all_with(
        client(),
        &kube::discovery::ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
    );
    let held = crds.get(&format!("shops.{group}")).await?;
    assert!(
        held.data
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size")
            .is_some(),
        "the refused change was not installed"
    );
    // And said on the CRD, as a warning event a person finds with `kubectl describe crd`.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client(), "default");
    let crd_uid = held.metadata.uid.clone();
    let said = eventually("a BreakingSchemaChange event on the CRD", || async {
        events
            .list(&kube::api::ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("BreakingSchemaChange")
                    && e.regarding.as_ref().and_then(|r| r.uid.clone()) == crd_uid
            })
    })
    .await;
    let note = said.note.unwrap_or_default();
    assert_eq!(said.type_.as_deref(), Some("Warning"));
    assert!(
        note.contains("spec.size: removed") && note.contains(&format!("{ns}/one")),
        "{note}"
    );
    // Allowed, it is installed.
    let host = Host::start(&typed("note: {type: string}", true)).await;
    eventually("the narrowed schema installed", || async {
        let held = crds.get(&format!("shops.{group}")).await.ok()?;
        held.data
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size")
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}
