//! The Helm chart in `deploy/chart`, checked with a real `helm` (built from its Go module by
//! `tests/tools/build-helm.sh`) and the test kube-apiserver: `helm lint --strict`, the files
//! `make chart` generates being current, the values schema refusing typos and wrong types,
//! leader election on by default with each release's own Lease (and, off, no rollout that
//! runs two hosts at once), `helm template` output accepted by a server-side dry run, and
//! `helm install` / `helm uninstall` for real. No controller manager runs, so the Deployment makes no pods:
//! the tests assert on the objects the API server stores.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use inrun::generate::rbac::{self, Permission, RbacOptions};
use inrun_testenv::{ControlPlane, TestResult, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use sha2::Digest;
use support::kubectl;

/// How long an object may take to appear or go.
const WAIT: Duration = Duration::from_secs(30);

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart")
}

/// The helm binary: `$INRUN_HELM`, else what `tests/tools/build-helm.sh` builds or finds
/// in its cache (and prints).
fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("INRUN_HELM").filter(|b| !b.is_empty()) {
            return PathBuf::from(bin);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tools/build-helm.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("running tests/tools/build-helm.sh (needs bash and go)");
        assert!(out.status.success(), "tests/tools/build-helm.sh failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(
            stdout
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim(),
        )
    })
}

/// Runs helm with its cache, config and data in a directory of this test binary's own,
/// and the test API server's kubeconfig when `cluster`.
fn helm(args: &[&str], cluster: bool) -> Output {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().expect("helm home"));
    let mut cmd = Command::new(helm_bin());
    cmd.args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null());
    if cluster {
        cmd.arg("--kubeconfig")
            .arg(ControlPlane::shared().kubeconfig());
    }
    cmd.output().expect("running helm")
}

/// helm's standard output, or a panic with its standard error.
fn helm_ok(args: &[&str], cluster: bool) -> String {
    let out = helm(args, cluster);
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A YAML stream as JSON values, without empty documents.
fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("yaml document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().filter_map(|d| d["kind"].as_str()).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(docs)))
}

/// The chart's Blueprint, with leader election on as `--leader-elect` turns it on.
fn chart_blueprint(leader_elect: bool) -> inrun::blueprint::Blueprint {
    let mut blueprint = inrun::blueprint::load(&chart().join("files/blueprint.yaml"))
        .expect("the chart's Blueprint");
    blueprint.spec.runtime.leader_election.enabled = leader_elect;
    blueprint
}

fn generated(name: &str) -> Vec<Value> {
    documents(
        &std::fs::read_to_string(chart().join("files/generated").join(name))
            .unwrap_or_else(|e| panic!("files/generated/{name}: {e}")),
    )
}

#[test]
fn the_chart_lints_strictly_and_its_generated_files_are_what_make_chart_writes() {
    let started = Instant::now();
    let chart = chart();
    let chart = chart.to_str().expect("utf-8 path");
    // The defaults, then each values file of ci/.
    for values in [None, Some("full-values.yaml"), Some("external-values.yaml")] {
        let file = values.map(|v| format!("{chart}/ci/{v}"));
        let mut args = vec!["lint", "--strict", chart];
        if let Some(file) = &file {
            args.extend(["-f", file.as_str()]);
        }
        let out = helm_ok(&args, false);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint {values:?}: {out}"
        );
    }

    // The chart deploys this workspace's version.
    let meta: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(chart).join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    assert_eq!(meta["appVersion"], env!("CARGO_PKG_VERSION"));

    // The checked-in generated files are what `inrun generate` makes today (`make chart`).
    let stale = "is stale: run `make chart`";
    let options = RbacOptions::default();
    assert_eq!(
        generated("crds.yaml"),
        inrun::generate::crds(&chart_blueprint(false)),
        "files/generated/crds.yaml {stale}"
    );
    assert_eq!(
        generated("rbac.yaml"),
        rbac::manifests(&chart_blueprint(true), &options),
        "files/generated/rbac.yaml {stale}"
    );
    let resources = RbacOptions {
        blueprint_resources: true,
        ..RbacOptions::default()
    };
    assert_eq!(
        generated("rbac-blueprint-resources.yaml"),
        rbac::manifests(&chart_blueprint(true), &resources),
        "files/generated/rbac-blueprint-resources.yaml {stale}"
    );
    assert_eq!(
        generated("blueprint-crd.yaml"),
        vec![inrun::fleet::blueprint_crd()],
        "files/generated/blueprint-crd.yaml {stale}"
    );
    eprintln!("lint and generated files: {:?}", started.elapsed());
}

/// `helm template` with `values` (YAML text) as the values file; its output or stderr.
fn template_with(values: &str) -> Output {
    let file = tempfile::NamedTempFile::new().expect("values file");
    std::fs::write(file.path(), values).expect("write values");
    let chart = chart();
    helm(
        &[
            "template",
            "inrun",
            chart.to_str().expect("utf-8 path"),
            "-f",
            file.path().to_str().expect("utf-8 path"),
        ],
        false,
    )
}

fn refused(values: &str) -> String {
    let out = template_with(values);
    assert!(!out.status.success(), "accepted: {values}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_values_schema_and_the_chart_refuse_bad_values_naming_the_value() {
    let started = Instant::now();
    // A misspelt key is refused by the schema, the key and where it is named.
    let typo = refused("image:\n  repository: inrun\n  tagg: '1.0'\n");
    assert!(
        typo.contains("values don't meet the specifications of the schema")
            && typo.contains("/image")
            && typo.contains("tagg"),
        "{typo}"
    );
    let top = refused("replicas: 2\n");
    assert!(top.contains("replicas"), "{top}");
    // So is a wrong type.
    let wrong = refused("replicaCount: two\n");
    assert!(
        wrong.contains("/replicaCount") && wrong.contains("integer"),
        "{wrong}"
    );
    let format = refused("log: {format: yaml}\n");
    assert!(format.contains("/log/format"), "{format}");

    // A Blueprint of one's own without its RBAC would deploy a host that cannot start.
    let own = refused("blueprint:\n  content: 'apiVersion: inrun.dev/v1alpha1'\n");
    assert!(
        own.contains("rbac.generated is empty") && own.contains("inrun generate rbac"),
        "{own}"
    );
    let nothing = refused("blueprint: {enabled: false}\n");
    assert!(nothing.contains("nothing to serve"), "{nothing}");
    eprintln!("schema refusals: {:?}", started.elapsed());
}

#[test]
fn a_blueprint_of_ones_own_renders_with_its_generated_rbac_and_crds_and_changes_the_pods_checksum()
{
    let started = Instant::now();
    let own = std::fs::read_to_string(chart().join("files/blueprint.yaml"))
        .expect("blueprint")
        .replace("kind: WebApp", "kind: Shop");
    let blueprint = inrun::blueprint::from_str(&own, "own.yaml").expect("the changed Blueprint");
    let options = RbacOptions {
        namespace: "shops".into(),
        ..RbacOptions::default()
    };
    let rbac_text =
        inrun::generate::yaml_stream(&rbac::manifests(&blueprint, &options)).expect("rbac yaml");
    let crds_text =
        inrun::generate::yaml_stream(&inrun::generate::crds(&blueprint)).expect("crds yaml");
    let values = serde_json::json!({
        "blueprint": {"content": own},
        "rbac": {"generated": rbac_text},
        "crds": {"generated": crds_text},
    });
    let out = template_with(&values.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = documents(&String::from_utf8_lossy(&out.stdout));
    let crd = find(&docs, "CustomResourceDefinition");
    assert_eq!(crd["spec"]["names"]["kind"], "Shop");
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "inrun")
        .expect("the host's ClusterRole");
    assert!(role["rules"].to_string().contains("shops"), "{role}");
    let config = find(&docs, "ConfigMap");
    let text = config["data"]["blueprint.yaml"]
        .as_str()
        .expect("blueprint.yaml");
    assert_eq!(text, own);
    let checksum = |docs: &[Value]| {
        find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
            ["checksum/blueprint"]
            .as_str()
            .expect("checksum/blueprint")
            .to_owned()
    };
    let expected = hex::encode(sha2::Sha256::digest(&own));
    assert_eq!(checksum(&docs), expected, "the checksum is the Blueprint's");
    let default = template_with("{}\n");
    let default = documents(&String::from_utf8_lossy(&default.stdout));
    assert_ne!(
        checksum(&docs),
        checksum(&default),
        "another Blueprint, another checksum"
    );
    eprintln!("own Blueprint: {:?}", started.elapsed());
}

/// A ServiceMonitor CRD that accepts any spec: enough for the API server to take the
/// chart's ServiceMonitor in a dry run. It is not prometheus-operator's schema, so the
/// ServiceMonitor's fields are checked by the test itself (against the Service).
const SERVICE_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// kubectl applies `text` server-side as a dry run; panics with its error otherwise.
/// Nothing is written. `--force-conflicts`: the install test, running beside this one, may
/// own the same cluster-scoped objects (the CRDs, the ClusterRole), which a dry run would
/// otherwise refuse as a conflict of field managers rather than check.
fn dry_run(text: &str, what: &str) {
    let out = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            "-",
        ],
        text,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: kubectl apply --dry-run=server: {stderr}"
    );
    // The namespace enforces Pod Security `restricted`: a pod template that breaks it
    // draws a warning.
    assert!(
        !stderr.contains("PodSecurity"),
        "{what}: not `restricted`: {stderr}"
    );
}

#[test]
fn helm_template_output_is_accepted_by_the_api_server_in_a_server_side_dry_run() -> TestResult {
    let started = Instant::now();
    let ns = "inrun-dry";
    let out = kubectl(&["create", "namespace", ns], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        &[
            "label",
            "namespace",
            ns,
            "pod-security.kubernetes.io/enforce=restricted",
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd = kubectl(&["apply", "--server-side", "-f", "-"], SERVICE_MONITOR_CRD);
    assert!(
        crd.status.success(),
        "{}",
        String::from_utf8_lossy(&crd.stderr)
    );
    let chart = chart();
    let chart = chart.to_str().expect("utf-8 path");
    let full = format!("{chart}/ci/full-values.yaml");

    // Defaults: one replica with leader election (and its Lease Role), no
    // PodDisruptionBudget.
    let text = helm_ok(&["template", "inrun", chart, "-n", ns], false);
    let docs = documents(&text);
    let got = kinds(&docs);
    for kind in [
        "ServiceAccount",
        "ConfigMap",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
    ] {
        assert!(got.contains(&kind), "no {kind} by default: {got:?}");
    }
    for kind in ["PodDisruptionBudget", "ServiceMonitor"] {
        assert!(!got.contains(&kind), "a {kind} by default: {got:?}");
    }
    assert_eq!(election(&docs), election_args(true, "inrun"));
    dry_run(&text, "default values");

    // Every option on: leader election (two replicas), tenants, Blueprint resources,
    // the ServiceMonitor.
    let text = helm_ok(&["template", "inrun", chart, "-n", ns, "-f", &full], false);
    let docs = documents(&text);
    let got = kinds(&docs);
    for kind in [
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "ServiceMonitor",
    ] {
        assert!(got.contains(&kind), "no {kind} with {full}: {got:?}");
    }
    let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for arg in [
        "--leader-elect",
        "--tenants=/etc/inrun/tenants",
        "--blueprint-resources",
        "--tenant-egress=api.team-a.example.com:443",
        "--max-plugin-memory=128Mi",
    ] {
        assert!(args.contains(&arg), "no {arg} in {args:?}");
    }
    let crds: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert!(crds.contains(&"blueprints.inrun.dev"), "{crds:?}");
    // The Lease Role is in the release namespace, whatever namespace it was generated for.
    assert_eq!(find(&docs, "Role")["metadata"]["namespace"], ns);
    assert!(find(&docs, "Role")["rules"].to_string().contains("leases"));
    // The ServiceMonitor scrapes the Service: its selector matches the Service's labels
    // and its endpoint names the Service's port.
    let service = find(&docs, "Service");
    let monitor = find(&docs, "ServiceMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (k, v) in selector {
        assert_eq!(&service["metadata"]["labels"][k], v, "label {k}");
    }
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    // Every Blueprint the chart writes into a ConfigMap is one the host accepts.
    let dir = tempfile::tempdir()?;
    for config in docs.iter().filter(|d| d["kind"] == "ConfigMap") {
        for (key, text) in config["data"].as_object().expect("data") {
            let path = dir.path().join(key);
            std::fs::write(&path, text.as_str().expect("text"))?;
            let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
                .args(["validate", "-b"])
                .arg(&path)
                .output()?;
            assert!(
                out.status.success(),
                "{key}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    dry_run(&text, "ci/full-values.yaml");

    // The other branches: existing ConfigMaps, no RBAC, CRDs or Service of the chart's,
    // an image by digest, leader election with one replica.
    let external = format!("{chart}/ci/external-values.yaml");
    let text = helm_ok(
        &["template", "inrun", chart, "-n", ns, "-f", &external],
        false,
    );
    let docs = documents(&text);
    assert_eq!(kinds(&docs), ["PodDisruptionBudget", "Deployment"]);
    assert_eq!(election(&docs), election_args(false, "inrun"));
    assert_eq!(
        find(&docs, "Deployment")["spec"]["strategy"],
        serde_json::json!({"type": "Recreate"})
    );
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "my-blueprint");
    assert_eq!(pod["volumes"][1]["configMap"]["name"], "my-tenants");
    assert!(
        pod["containers"][0]["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("mirror.internal/inrun@sha256:")),
        "{}",
        pod["containers"][0]["image"]
    );
    dry_run(&text, "ci/external-values.yaml");
    eprintln!("template and server dry runs: {:?}", started.elapsed());
    Ok(())
}

/// The Deployment's leader-election arguments (`--leader-elect*`).
fn election(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with("--leader-elect"))
        .map(str::to_owned)
        .collect()
}

/// What [`election`] should find: `--leader-elect` when the chart turns election on, and
/// always the Lease's name.
fn election_args(on: bool, lease: &str) -> Vec<String> {
    let mut args = Vec::new();
    if on {
        args.push("--leader-elect".to_owned());
    }
    args.push(format!("--leader-elect-lease={lease}"));
    args
}

/// The Lease rules of the Role named `name` in `ns`: (verbs, resourceNames) of each rule
/// on coordination.k8s.io leases. Panics when there is no such Role.
fn lease_rules(docs: &[Value], name: &str, ns: &str) -> Vec<(Value, Value)> {
    let role = docs
        .iter()
        .find(|d| {
            d["kind"] == "Role" && d["metadata"]["name"] == name && d["metadata"]["namespace"] == ns
        })
        .unwrap_or_else(|| panic!("no Role {ns}/{name} in {:?}", kinds(docs)));
    role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["resources"] == serde_json::json!(["leases"]))
        .map(|r| (r["verbs"].clone(), r["resourceNames"].clone()))
        .collect()
}

/// The Lease rules the chart grants for the Lease `lease`.
fn lease_grant(lease: &str) -> Vec<(Value, Value)> {
    vec![
        (serde_json::json!(["create"]), Value::Null),
        (
            serde_json::json!(["get", "update", "patch"]),
            serde_json::json!([lease]),
        ),
    ]
}

fn rendered(values: &str) -> Vec<Value> {
    let out = template_with(values);
    assert!(
        out.status.success(),
        "{values}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn leader_election_is_on_by_default_and_off_it_recreates_and_refuses_more_than_one_replica() {
    let started = Instant::now();
    // On by default, whatever the replica count: a rolling update's surge pod stands by
    // until the old one releases the Lease.
    for values in ["{}\n", "replicaCount: 1\n", "replicaCount: 3\n"] {
        let docs = rendered(values);
        assert_eq!(election(&docs), election_args(true, "inrun"), "{values}");
        assert_eq!(
            find(&docs, "Deployment")["spec"]["strategy"],
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
            "{values}"
        );
    }

    // Off: the old pod is gone before the new one starts, and the Lease's Role stays, since
    // the Blueprint's `runtime.leaderElection.enabled` may turn election on.
    let docs = rendered("leaderElection: {enabled: false}\n");
    assert_eq!(election(&docs), election_args(false, "inrun"));
    assert_eq!(
        find(&docs, "Deployment")["spec"]["strategy"],
        serde_json::json!({"type": "Recreate"})
    );
    assert_eq!(lease_rules(&docs, "inrun", "default"), lease_grant("inrun"));
    let docs = rendered("leaderElection: {enabled: false}\nstrategy: {type: Recreate}\n");
    assert_eq!(
        find(&docs, "Deployment")["spec"]["strategy"],
        serde_json::json!({"type": "Recreate"})
    );

    // Off with what would let two hosts write at once: refused, saying what to change.
    let replicas = refused("leaderElection: {enabled: false}\nreplicaCount: 2\n");
    assert!(
        replicas.contains("replicaCount is 2 with leaderElection.enabled=false"),
        "{replicas}"
    );
    for strategy in [
        "strategy: {type: RollingUpdate}",
        "strategy: {rollingUpdate: {maxSurge: 1}}",
    ] {
        let rolling = refused(&format!("leaderElection: {{enabled: false}}\n{strategy}\n"));
        assert!(
            rolling.contains("strategy.type is RollingUpdate")
                && rolling.contains("strategy.type=Recreate"),
            "{strategy}: {rolling}"
        );
    }
    let typo = refused("strategy: {type: Rolling}\n");
    assert!(typo.contains("/strategy/type"), "{typo}");

    // Sharding: every replica works, in the release's ring, with the ring's Leases
    // granted by kind (their names are made at run time), rolled out pod by pod.
    let docs =
        rendered("leaderElection: {enabled: false}\nsharding: {enabled: true}\nreplicaCount: 3\n");
    let args =
        find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.contains(&"--sharding")
            && args.contains(&"--sharding-ring=inrun")
            && args.contains(&"--sharding-watch=auto"),
        "{args:?}"
    );
    assert!(!args.contains(&"--leader-elect"), "{args:?}");
    assert_eq!(find(&docs, "Deployment")["spec"]["replicas"], 3);
    assert_eq!(
        find(&docs, "Deployment")["spec"]["strategy"]["type"],
        "RollingUpdate"
    );
    let mut grant = lease_grant("inrun");
    grant.push((
        serde_json::json!(["get", "list", "watch", "update", "patch", "delete"]),
        Value::Null,
    ));
    assert_eq!(lease_rules(&docs, "inrun", "default"), grant);
    let both = refused("sharding: {enabled: true}\n");
    assert!(
        both.contains("sharding.enabled with leaderElection.enabled"),
        "{both}"
    );
    eprintln!("leader election values: {:?}", started.elapsed());
}

#[test]
fn each_release_names_its_own_lease_and_its_role_grants_only_that_one() -> TestResult {
    let started = Instant::now();
    let chart = chart();
    let chart = chart.to_str().expect("utf-8 path");
    // Two releases in one namespace: two Leases, each Role naming its own.
    for (release, fullname) in [("shop", "shop-inrun"), ("blog", "blog-inrun")] {
        let docs = documents(&helm_ok(&["template", release, chart, "-n", "apps"], false));
        assert_eq!(election(&docs), election_args(true, fullname));
        assert_eq!(lease_rules(&docs, fullname, "apps"), lease_grant(fullname));
    }

    // `inrun generate rbac --leader-elect-lease` names the Lease in its Role ...
    let dir = tempfile::tempdir()?;
    let blueprint = dir.path().join("blueprint.yaml");
    let text = std::fs::read_to_string(self::chart().join("files/blueprint.yaml"))?;
    // (a Blueprint of one's own that keeps its Lease in another namespace)
    let text = text.replacen(
        "spec:\n",
        "spec:\n  runtime:\n    leaderElection: {enabled: true, namespace: ops}\n",
        1,
    );
    std::fs::write(&blueprint, &text)?;
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args([
            "generate",
            "rbac",
            "-n",
            "apps",
            "--leader-elect-lease",
            "from-the-flag",
            "-b",
        ])
        .arg(&blueprint)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout)?;
    let docs = documents(&generated);
    assert_eq!(
        lease_rules(&docs, "inrun", "ops"),
        lease_grant("from-the-flag")
    );

    // ... and the chart, given that output, grants its own release's Lease instead, there
    // and in the release namespace.
    let values = serde_json::json!({
        "blueprint": {"content": text},
        "rbac": {"generated": generated},
        "crds": {"enabled": false},
    });
    let docs = rendered(&values.to_string());
    assert_eq!(lease_rules(&docs, "inrun", "ops"), lease_grant("inrun"));
    assert_eq!(lease_rules(&docs, "inrun", "default"), lease_grant("inrun"));
    assert!(!serde_json::to_string(&docs)?.contains("from-the-flag"));
    eprintln!("lease names: {:?}", started.elapsed());
    Ok(())
}

async fn gone<K>(api: &Api<K>, name: &str) -> TestResult
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be deleted"), WAIT, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_creates_the_host_and_binds_its_generated_rbac_and_uninstall_removes_them()
-> TestResult {
    let started = Instant::now();
    let cp = ControlPlane::shared();
    let client = cp.client();
    let ns = "inrun-system";
    let chart = chart();
    let install = helm_ok(
        &[
            "install",
            "inrun",
            chart.to_str().expect("utf-8 path"),
            "-n",
            ns,
            "--create-namespace",
            "--set",
            "image.repository=mirror.internal/inrun",
            "--set",
            "replicaCount=2",
        ],
        true,
    );
    assert!(install.contains("STATUS: deployed"), "{install}");
    // NOTES.txt says what runs and how to watch it.
    assert!(
        install.contains("2 replicas, leader election on")
            && install.contains("rollout status deployment/inrun")
            && install.contains("/readyz waits for the plugins to load")
            && install.contains("get lease inrun"),
        "{install}"
    );

    // The Deployment as the API server stored it: image, args, probes, hardening.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments.get("inrun").await?;
    let json = serde_json::to_value(&deployment)?;
    let pod = &json["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "mirror.internal/inrun:0.1.0");
    assert_eq!(
        container["args"],
        serde_json::json!([
            "run",
            "--blueprint=/etc/inrun/blueprint/blueprint.yaml",
            "--health-port=8081",
            "--log-format=json",
            "--leader-elect",
            "--leader-elect-lease=inrun"
        ])
    );
    assert_eq!(
        json["spec"]["strategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "health");
    // Liveness waits until the plugins are loaded, up to 10 minutes of cold compiles.
    let startup = &container["startupProbe"];
    assert_eq!(startup["httpGet"]["path"], "/readyz/plugins");
    let budget = startup["periodSeconds"].as_i64().unwrap_or(0)
        * startup["failureThreshold"].as_i64().unwrap_or(0);
    assert!(budget >= 600, "{startup}");
    assert_eq!(container["ports"][0]["containerPort"], 8081);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["serviceAccountName"], "inrun");
    assert_eq!(json["spec"]["replicas"], 2);

    // The generated ClusterRole, bound to the chart's ServiceAccount.
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get("inrun")
        .await?;
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, "inrun");
    let subject = &binding.subjects.as_deref().unwrap_or_default()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "inrun", Some(ns))
    );
    let role = Api::<ClusterRole>::all(client.clone()).get("inrun").await?;
    let expected = generated("rbac.yaml");
    assert_eq!(
        serde_json::to_value(&role.rules)?,
        find(&expected, "ClusterRole")["rules"],
        "the ClusterRole's rules are the generated ones"
    );

    // And it is enough: the ServiceAccount's token passes the host's startup access check
    // for this Blueprint with leader election (the Lease in the release namespace) ...
    let request = TokenRequest {
        spec: Some(TokenRequestSpec::default()),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request("inrun", &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .expect("a token");
    let sa = cp.client_with_token(&token);
    let options = RbacOptions {
        namespace: ns.into(),
        ..RbacOptions::default()
    };
    inrun::runtime::access::check(&sa, None, &rbac::required(&chart_blueprint(true), &options))
        .await?;
    // ... and grants nothing more: it cannot read Secrets, which this Blueprint does not
    // need, nor take another release's Lease.
    let secrets = Permission {
        group: String::new(),
        resource: "secrets".into(),
        names: vec![],
        verbs: vec!["get".into()],
        namespace: None,
        why: "test".into(),
    };
    let other_lease = Permission {
        group: "coordination.k8s.io".into(),
        resource: "leases".into(),
        names: vec!["other-inrun".into()],
        verbs: vec!["update".into()],
        namespace: Some(ns.into()),
        why: "test".into(),
    };
    for denied in [secrets, other_lease] {
        let what = format!("{} {}", denied.verbs.join(","), denied.resource);
        assert!(
            inrun::runtime::access::check(&sa, None, &[denied])
                .await
                .is_err(),
            "the ServiceAccount may {what}"
        );
    }

    // Uninstall removes what it installed and keeps the CRDs (and with them every CR).
    let out = helm_ok(&["uninstall", "inrun", "-n", ns], true);
    assert!(out.contains("uninstalled"), "{out}");
    gone(&deployments, "inrun").await?;
    gone(
        &Api::<ServiceAccount>::namespaced(client.clone(), ns),
        "inrun",
    )
    .await?;
    gone(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        "inrun-blueprint",
    )
    .await?;
    gone(&Api::<Service>::namespaced(client.clone(), ns), "inrun").await?;
    gone(&Api::<Role>::namespaced(client.clone(), ns), "inrun").await?;
    gone(&Api::<RoleBinding>::namespaced(client.clone(), ns), "inrun").await?;
    gone(&Api::<ClusterRole>::all(client.clone()), "inrun").await?;
    gone(&Api::<ClusterRoleBinding>::all(client.clone()), "inrun").await?;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(
        crds.get_opt("webapps.demo.inrun.dev").await?.is_some(),
        "the CRD is kept"
    );
    eprintln!("install and uninstall: {:?}", started.elapsed());
    Ok(())
}

/// The flow-control objects of `docs` as (kind, name, spec), sorted: what the API server
/// acts on, without the chart's labels.
fn flow_control(docs: &[Value]) -> Vec<(String, String, Value)> {
    let mut out: Vec<(String, String, Value)> = docs
        .iter()
        .filter(|d| d["apiVersion"] == inrun::generate::apf::API_VERSION)
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["spec"].clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

#[test]
fn with_tenants_the_chart_renders_the_flow_control_objects_inrun_generate_apf_writes() {
    use inrun::blueprint::{AccountPattern, ServiceAccountRef};
    use inrun::generate::apf::{self, ApfOptions, Level};
    let started = Instant::now();
    let sa = |text: &str| ServiceAccountRef::parse(text).expect("sa");
    // Off by default (no tenants), and off when asked.
    assert!(flow_control(&rendered("{}\n")).is_empty());
    assert!(
        flow_control(&rendered(
            "tenants: {enabled: true}\napf: {enabled: false}\n"
        ))
        .is_empty()
    );
    // Tenants that act as the host (files naming no ServiceAccount): the host's level only.
    let host_only = flow_control(&rendered("tenants: {enabled: true}\n"));
    let names: Vec<(&str, &str)> = host_only
        .iter()
        .map(|(k, n, _)| (k.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("FlowSchema", "inrun-host"),
            ("PriorityLevelConfiguration", "inrun-host")
        ]
    );

    // The tenants' ServiceAccounts the host may impersonate by its generated RBAC
    // (`--impersonate`, `--default-tenant-service-account`; one in the host's own
    // namespace is rendered in the release's), and those the values name.
    let pattern = AccountPattern::parse("inrun-tenants/{name}").expect("pattern");
    let generated = rbac::manifests(
        &chart_blueprint(true),
        &RbacOptions {
            impersonate: vec![sa("files/team-a"), sa("inrun-system/own-tenant")],
            tenant_accounts: Some(pattern.clone()),
            ..RbacOptions::default()
        },
    );
    let values = serde_json::json!({
        "blueprintResources": {"enabled": true},
        "rbac": {"generated": inrun::generate::yaml_stream(&generated).expect("yaml")},
        "apf": {
            "tenantNamespaces": ["team-ids"],
            "tenantServiceAccounts": ["other/b", "inrun-tenants/covered"],
            "tenantShares": 10,
            "tenantBorrowingLimitPercent": 0,
        },
    });
    let got = flow_control(&rendered(
        &serde_yaml_ng::to_string(&values).expect("values"),
    ));
    let want = apf::manifests(&ApfOptions {
        name: "inrun".into(),
        // `helm template` without -n: the release namespace is `default`.
        namespace: "default".into(),
        service_account: "inrun".into(),
        impersonate: vec![sa("files/team-a"), sa("default/own-tenant"), sa("other/b")],
        tenant_accounts: Some(pattern),
        tenant_identity_namespaces: vec!["team-ids".into()],
        host: Level::host(),
        tenants: Level {
            shares: 10,
            borrowing_limit_percent: Some(0),
            ..Level::tenants()
        },
    })
    .expect("apf");
    assert_eq!(got, flow_control(&want));
    eprintln!("flow control objects: {:?}", started.elapsed());
}
