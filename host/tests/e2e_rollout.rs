//! Rollouts on a real kube-apiserver, the host under its generated RBAC: a new version of
//! a Rust plugin reaches 5 %, then 25 %, then every CR, each step's CRs read from their
//! `status.reconciledBy`, the CRs not moved left unwritten; a new version that fails on
//! about 30 % of CRs is rolled back within its first step, every CR ending Ready on the
//! old version, with events naming the versions and the numbers; a template change rolls
//! out the same way.

// Scenarios read top to bottom as one story (create, change, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use inrun::fleet::{FleetOptions, TenantSource};
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use kube::discovery::ApiResource;
use support::*;

/// The rollouts one at a time: each creates hundreds of CRs, and the others' would slow
/// its steps.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Blueprint serving `kind` with `reconcile` (the lines under `reconcile:`, indented
/// eight spaces) and `rollout` (its flow mapping).
fn blueprint(group: &str, kind: &str, reconcile: &str, rollout: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: rollout }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n{reconcile}        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }}, {{ apiVersion: apps/v1, kind: Deployment }}, {{ apiVersion: v1, kind: Service }} ]\n        rollout: {rollout}\n"
    )
}

/// A `reconcile` block of the plugin `name` as its constructor.
fn constructor(name: &str) -> String {
    format!(
        "        default: false\n        constructor: {{ location: \"{}\" }}\n",
        plugin(name)
    )
}

/// Each CR of `ar` in `ns`: its `status.reconciledBy`, whether it is Ready, and its
/// resourceVersion.
async fn states(ar: &ApiResource, ns: &str) -> BTreeMap<String, (String, bool, String)> {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    let list = api.list(&ListParams::default()).await.expect("list CRs");
    list.items
        .into_iter()
        .map(|cr| {
            let by = cr.data["status"]["reconciledBy"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ready = support::ready(&cr).is_some_and(|r| r.0 == "True");
            let name = cr.metadata.name.clone().unwrap_or_default();
            let version = cr.metadata.resource_version.clone().unwrap_or_default();
            (name, (by, ready, version))
        })
        .collect()
}

/// Creates `count` CRs `<prefix>-<i>` of `ar` in `ns`, each with the spec `spec(i)`, and
/// waits until every one is Ready; returns what they were reconciled by.
async fn created_ready(
    ar: &ApiResource,
    ns: &str,
    count: usize,
    spec: impl Fn(usize) -> String,
) -> String {
    for i in 0..count {
        apply_cr(
            ar,
            ns,
            &format!(
                "apiVersion: {}\nkind: {}\nmetadata: {{ name: cr-{i} }}\nspec: {}\n",
                ar.api_version,
                ar.kind,
                spec(i)
            ),
        )
        .await;
    }
    eventually("every CR Ready", || async {
        let all = states(ar, ns).await;
        let by: BTreeSet<&String> = all.values().map(|s| &s.0).collect();
        (all.len() == count && all.values().all(|s| s.1) && by.len() == 1)
            .then(|| all.values().next().map(|s| s.0.clone()))
            .flatten()
    })
    .await
}

/// The flags of an `inrun run` process in these tests: its Leases (rollout records) in
/// the identity's namespace, its Blueprint file read every 200 ms.
const PROCESS_FLAGS: [&str; 4] = [
    "--lock-namespace",
    support::identity::NAMESPACE,
    "--reload-interval",
    "200ms",
];

/// A kubeconfig (in `dir`) of the ServiceAccount `inrun generate rbac` makes for every
/// version in `texts`: what an `inrun run` process serving them acts as.
async fn process_kubeconfig(dir: &std::path::Path, texts: &[&str]) -> std::path::PathBuf {
    let blueprints: Vec<_> = texts
        .iter()
        .map(|t| inrun::blueprint::from_str(t, "version.yaml").expect("a Blueprint"))
        .collect();
    support::identity::Identity::for_blueprints(
        &blueprints,
        &support::identity::Identity::options(),
    )
    .await
    .kubeconfig(dir)
}

/// A host serving the Blueprint file `file`, written with `text`, and a namespace of its
/// own named after `prefix`.
async fn serving_file(file: &std::path::Path, text: &str, prefix: &str) -> (FleetHost, String) {
    std::fs::write(file, text).expect("write");
    let host = FleetHost::start(FleetOptions {
        blueprint: Some(file.to_path_buf()),
        ..FleetHost::options()
    })
    .await;
    let ns = inrun_testenv::ControlPlane::shared()
        .namespace(prefix)
        .await
        .expect("namespace");
    (host, ns)
}

/// `onReconcile` of one ConfigMap a CR whose `data.size` is `size`.
fn sized(size: &str) -> String {
    format!(
        "        onReconcile:\n          - {{ apiVersion: v1, kind: ConfigMap, metadata: {{ name: '{{{{ .metadata.name }}}}-settings' }}, data: {{ size: {size} }} }}\n"
    )
}

/// The CRD's events of `reason` (events of cluster-scoped objects are in `default`).
async fn crd_events(crd: &str, reason: &str) -> Vec<String> {
    events("default", crd)
        .await
        .into_iter()
        .filter(|(r, _)| r == reason)
        .map(|(_, note)| note)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_version_goes_5_then_25_then_100_percent_and_the_crs_not_moved_get_no_write() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-good");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    let rollout = "{ steps: [ { percent: 5, pause: 4s }, { percent: 25, pause: 4s }, { percent: 100 } ], analysis: { window: 1m } }";
    let (host, ns) = serving_file(
        &file,
        &blueprint(
            &group,
            "Stamped",
            &constructor("inrun_test_stamp_v1"),
            rollout,
        ),
        "rollout-good",
    )
    .await;
    let ar = resource(&group, "Stamped");
    let count = 200;
    let v1 = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    assert!(v1.starts_with("sha256:"), "{v1}");
    let before = states(&ar, &ns).await;

    // The new version, by an edited location.
    std::fs::write(
        &file,
        blueprint(
            &group,
            "Stamped",
            &constructor("inrun_test_stamp_v2"),
            rollout,
        ),
    )
    .expect("write");
    let on_new = |all: &BTreeMap<String, (String, bool, String)>| {
        all.values()
            .filter(|s| !s.0.is_empty() && s.0 != v1)
            .count()
    };
    // Each step's share, within 3 points of it (6 CRs of 200), and no further until
    // its pause is over.
    for (percent, want) in [(5, 10), (25, 50)] {
        let all = eventually(&format!("{percent} % on the new version"), || async {
            let all = states(&ar, &ns).await;
            (on_new(&all) >= want).then_some(all)
        })
        .await;
        let moved = on_new(&all);
        assert!(
            moved <= want + 6,
            "{moved} CRs on the new version at {percent} %"
        );
        if percent == 5 {
            // The CRs the first step did not move were not written.
            for (name, (by, _, version)) in &all {
                if by == &v1 {
                    assert_eq!(
                        version, &before[name].2,
                        "{name} was written though it stayed on the old version"
                    );
                }
            }
        }
    }
    let all = eventually("every CR on the new version, Ready", || async {
        let all = states(&ar, &ns).await;
        (on_new(&all) == count && all.values().all(|s| s.1)).then_some(all)
    })
    .await;
    let v2: BTreeSet<&String> = all.values().map(|s| &s.0).collect();
    assert_eq!(v2.len(), 1, "one new version: {v2:?}");
    let crd = format!("stampeds.{group}");
    let steps = eventually("the rollout's events on the CRD", || async {
        let steps = crd_events(&crd, "RolloutStep").await;
        let done = crd_events(&crd, "RolloutComplete").await;
        (steps.len() == 2 && done.len() == 1).then_some(steps)
    })
    .await;
    assert!(
        steps.iter().any(|n| n.contains("step 2 of 3, 25 % of CRs")),
        "{steps:?}"
    );
    let view = host
        .tenant(&TenantSource::File(file.clone()))
        .expect("tenant")
        .rollout_views();
    assert_eq!(view.len(), 1, "{view:?}");
    assert_eq!(view[0].phase, inrun::runtime::rollout::Phase::Complete);
    assert_eq!(&view[0].from, &v1);
    let text = host.metrics.render();
    assert!(
        text.contains(&format!(
            "inrun_rollout_crs{{crd=\"{crd}\",version=\"new\"}} {count}"
        )),
        "{text}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_fails_on_a_third_of_the_crs_is_rolled_back_within_its_first_step() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-bad");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    let rollout = "{ steps: [ { percent: 20, pause: 30s }, { percent: 100 } ], analysis: { window: 1m, maxFailureRate: 0.05 }, onFailure: rollback }";
    let (host, ns) = serving_file(
        &file,
        &blueprint(&group, "Web", &constructor("inrun_test_stamp_v1"), rollout),
        "rollout-bad",
    )
    .await;
    let ar = resource(&group, "Web");
    let count = 100;
    // Three CRs in ten have no image: the new version (the webapp plugin) refuses them.
    let spec = |i: usize| {
        if i % 10 < 3 {
            "{}".to_string()
        } else {
            "{ image: nginx }".to_string()
        }
    };
    let v1 = created_ready(&ar, &ns, count, spec).await;
    std::fs::write(
        &file,
        blueprint(&group, "Web", &constructor("inrun_plugin_webapp"), rollout),
    )
    .expect("write");
    let crd = format!("webs.{group}");
    // Every CR the new version ever served, by the Deployment it made, until the rollback.
    let deployments: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &deployments());
    let ran_new = std::sync::Mutex::new(BTreeSet::new());
    let halted = eventually("the rollout rolled back", || async {
        let seen = deployments.list(&ListParams::default()).await.ok()?;
        ran_new
            .lock()
            .expect("lock")
            .extend(seen.items.into_iter().filter_map(|d| d.metadata.name));
        crd_events(&crd, "RolledBack").await.into_iter().next()
    })
    .await;
    assert!(
        halted.contains(&format!("from {v1} to sha256:"))
            && halted.contains("step 1 of 2 (20 % of CRs)")
            && halted.contains("above maxFailureRate 5 %"),
        "{halted}"
    );
    println!("the RolledBack event on the CRD: {halted}");
    // Every CR ends Ready on the old version.
    eventually("every CR Ready on the old version", || async {
        let all = states(&ar, &ns).await;
        all.values().all(|s| s.0 == v1 && s.1).then_some(())
    })
    .await;
    // Those moved back say so; none beyond the first step's 20 ran the new version.
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client(), &ns);
    let moved_back = eventually("the CRs moved back told so", || async {
        let moved: BTreeSet<String> = api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("RolledBack"))
            .filter_map(|e| e.regarding.and_then(|r| r.name))
            .collect();
        (moved.len() == 20).then_some(moved)
    })
    .await;
    let ran_new = ran_new.into_inner().expect("lock");
    assert!(!ran_new.is_empty(), "the new version served no CR");
    assert!(
        ran_new.iter().all(|d| moved_back.contains(d)),
        "a CR outside the first step ran the new version: {ran_new:?} vs {moved_back:?}"
    );
    let view = host
        .tenant(&TenantSource::File(file.clone()))
        .expect("tenant")
        .rollout_views();
    assert_eq!(view[0].phase, inrun::runtime::rollout::Phase::RolledBack);
    assert!(
        view[0]
            .verdict
            .as_deref()
            .is_some_and(|v| v.contains("failed")),
        "{view:?}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_rolls_out_step_by_step_too() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-tpl");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    // A plan required first: it passes, the templates failing on no CR.
    let rollout = "{ steps: [ { percent: 10, pause: 3s }, { percent: 100 } ], analysis: { window: 1m }, requirePlan: true }";
    let (host, ns) = serving_file(
        &file,
        &blueprint(&group, "Shop", &sized("small"), rollout),
        "rollout-tpl",
    )
    .await;
    let ar = resource(&group, "Shop");
    let count = 50;
    let old = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    assert!(old.starts_with("declarative:"), "{old}");
    std::fs::write(&file, blueprint(&group, "Shop", &sized("large"), rollout)).expect("write");
    let sizes = || async {
        let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &configmaps());
        let list = api.list(&ListParams::default()).await.ok()?;
        Some(
            list.items
                .iter()
                .filter(|c| c.data["data"]["size"] == "large")
                .count(),
        )
    };
    let first = eventually("the first step's ConfigMaps", || async {
        sizes().await.filter(|n| *n >= 5)
    })
    .await;
    assert!(first <= 5 + 2, "{first} ConfigMaps changed at 10 %");
    eventually("every ConfigMap", || async {
        sizes().await.filter(|n| *n == count)
    })
    .await;
    host.stop().await;
}

/// `inrun rollout ARGS` as the operator (the harness's admin: steering a rollout is the
/// operator's, not the host's): its stdout, after it succeeded.
fn rollout_cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .arg("rollout")
        .args(args)
        .args(["-n", support::identity::NAMESPACE, "--kubeconfig"])
        .arg(inrun_testenv::ControlPlane::shared().kubeconfig())
        .output()
        .expect("inrun rollout");
    assert!(
        out.status.success(),
        "inrun rollout {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rollout of `crd` as `inrun rollout status -o json` shows it.
fn rollout_status(crd: &str) -> Option<serde_json::Value> {
    let out = rollout_cli(&["status", crd, "-o", "json"]);
    let views: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    views.into_iter().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_pauses_resumes_promotes_and_aborts_a_rollout_with_inrun_rollout() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-cli");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    // The first step holds for an hour: only a person moves it on.
    let rollout = "{ steps: [ { percent: 25, pause: 1h }, { percent: 100 } ] }";
    let (host, ns) = serving_file(
        &file,
        &blueprint(&group, "Shop", &sized("small"), rollout),
        "rollout-cli",
    )
    .await;
    let ar = resource(&group, "Shop");
    let count = 40;
    let small = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    std::fs::write(&file, blueprint(&group, "Shop", &sized("large"), rollout)).expect("write");
    let crd = format!("shops.{group}");
    let first = eventually("the first step recorded", || async {
        rollout_status(&crd).filter(|v| v["onNew"] == 10)
    })
    .await;
    assert_eq!(first["phase"], "Progressing", "{first:#}");
    assert_eq!(first["from"], small.as_str(), "{first:#}");
    let text = rollout_cli(&["status"]);
    assert!(
        text.contains(&crd) && text.contains("Progressing"),
        "{text}"
    );
    println!("inrun rollout status:\n{text}");

    // The rollout block edited alone (a longer pause): the CRD's controller starts again
    // and carries the rollout on where it stands; no CR moves for it.
    let passes = reconciles(&host.metrics, &crd);
    std::fs::write(
        &file,
        blueprint(
            &group,
            "Shop",
            &sized("large"),
            "{ steps: [ { percent: 25, pause: 2h }, { percent: 100 } ] }",
        ),
    )
    .expect("write");
    eventually("the next controller's passes over every CR", || async {
        (reconciles(&host.metrics, &crd) >= passes + count as u64).then_some(())
    })
    .await;
    let all = states(&ar, &ns).await;
    assert_eq!(
        all.values().filter(|s| s.0 != small).count(),
        10,
        "the edit moved CRs"
    );
    rollout_cli(&["pause", &crd]);
    eventually("paused", || async {
        rollout_status(&crd).filter(|v| v["phase"] == "Paused")
    })
    .await;
    rollout_cli(&["resume", &crd]);
    eventually("resumed", || async {
        rollout_status(&crd).filter(|v| v["phase"] == "Progressing")
    })
    .await;
    rollout_cli(&["promote", &crd]);
    let large = eventually("every CR on the new version", || async {
        let all = states(&ar, &ns).await;
        let by: BTreeSet<&String> = all.values().map(|s| &s.0).collect();
        (by.len() == 1 && !by.contains(&small) && all.values().all(|s| s.1))
            .then(|| by.into_iter().next().cloned())
            .flatten()
    })
    .await;
    assert_eq!(
        rollout_status(&crd).map(|v| v["phase"].clone()),
        Some(serde_json::json!("Complete"))
    );
    // An ended rollout takes no command, so none is left for the next one to find.
    let late = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args([
            "rollout",
            "abort",
            &crd,
            "-n",
            support::identity::NAMESPACE,
            "--kubeconfig",
        ])
        .arg(inrun_testenv::ControlPlane::shared().kubeconfig())
        .output()
        .expect("inrun rollout");
    let said = String::from_utf8_lossy(&late.stderr);
    assert!(
        !late.status.success() && said.contains("is Complete: there is nothing to abort"),
        "{said}"
    );

    // The next change, aborted at its first step: its CRs go back.
    std::fs::write(&file, blueprint(&group, "Shop", &sized("huge"), rollout)).expect("write");
    eventually("the next rollout's first step", || async {
        rollout_status(&crd).filter(|v| v["onNew"] == 10 && v["phase"] == "Progressing")
    })
    .await;
    rollout_cli(&["abort", &crd]);
    eventually("every CR back on the version before", || async {
        let all = states(&ar, &ns).await;
        all.values().all(|s| s.0 == large && s.1).then_some(())
    })
    .await;
    let aborted = rollout_status(&crd).expect("recorded");
    assert_eq!(aborted["phase"], "RolledBack", "{aborted:#}");
    assert!(
        aborted["verdict"]
            .as_str()
            .is_some_and(|v| v.contains("aborted by hand")),
        "{aborted:#}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_a_sigkill_of_the_host_mid_step_and_the_next_host_continues_it() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-kill");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    // The first step holds for an hour: whoever serves next must hold it too.
    let rollout = "{ steps: [ { percent: 20, pause: 1h }, { percent: 100 } ] }";
    let v1 = blueprint(&group, "Kept", &constructor("inrun_test_stamp_v1"), rollout);
    let v2 = blueprint(&group, "Kept", &constructor("inrun_test_stamp_v2"), rollout);
    std::fs::write(&file, &v1).expect("write");
    // `inrun run` as a process, as the ServiceAccount `inrun generate rbac` makes for
    // both versions, keeping its Leases in the identity's namespace.
    let kubeconfig = process_kubeconfig(dir.path(), &[&v1, &v2]).await;
    let flags = PROCESS_FLAGS;
    let mut first =
        support::ring::Replica::spawn_with(&kubeconfig, &file, dir.path(), "first", &flags);
    let ns = inrun_testenv::ControlPlane::shared()
        .namespace("rollout-kill")
        .await
        .expect("namespace");
    let ar = resource(&group, "Kept");
    let count = 50;
    let old = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    std::fs::write(&file, &v2).expect("write");
    let crd = format!("kepts.{group}");
    let on_new = |all: &BTreeMap<String, (String, bool, String)>| -> BTreeSet<String> {
        all.iter()
            .filter(|(_, s)| !s.0.is_empty() && s.0 != old)
            .map(|(n, _)| n.clone())
            .collect()
    };
    let moved = eventually("the first step's CRs on the new version", || async {
        let all = states(&ar, &ns).await;
        let moved = on_new(&all);
        (moved.len() == 10 && all.values().all(|s| s.1)).then_some(moved)
    })
    .await;
    eventually("the step recorded", || async {
        rollout_status(&crd).filter(|v| v["onNew"] == 10)
    })
    .await;
    first.kill().await;
    let before = states(&ar, &ns).await;

    // The next host, on the new Blueprint, goes on at the same step.
    let mut next =
        support::ring::Replica::spawn_with(&kubeconfig, &file, dir.path(), "next", &flags);
    inrun_testenv::wait_for("the next host to continue the rollout", WAIT, || async {
        next.log()
            .contains("continuing a rollout recorded under way")
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", next.log()));
    next.assert_running();
    eventually("the next host's driver at the same step", || async {
        rollout_status(&crd).filter(|v| v["onNew"] == 10 && v["step"] == 1)
    })
    .await;
    let after = states(&ar, &ns).await;
    assert_eq!(on_new(&after), moved, "the same CRs on the new version");
    for (name, state) in &after {
        assert_eq!(
            state.2, before[name].2,
            "{name} was written by the next host"
        );
    }
    // And it finishes there.
    rollout_cli(&["promote", &crd]);
    eventually("every CR on the new version", || async {
        let all = states(&ar, &ns).await;
        (on_new(&all).len() == count && all.values().all(|s| s.1)).then_some(())
    })
    .await;
    next.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_roll_out_as_one_each_cr_on_one_version() {
    let _serial = SERIAL.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let group = unique_group("rollout-ring");
    let ns = cp.namespace("rollout-ring").await.expect("namespace");
    let ring = format!("r{}", &group[..group.find('.').unwrap_or(8).min(12)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    let text = |size: &str| {
        format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: ring }}\nspec:\n  runtime:\n    workers: 4\n    sharding: {{ enabled: true, ring: {ring}, watch: labels }}\n    leaderElection: {{ namespace: {ns}, leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s }}\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: Part\n      reconcile:\n        onReconcile:\n          - {{ apiVersion: v1, kind: ConfigMap, metadata: {{ name: '{{{{ .metadata.name }}}}-size' }}, data: {{ size: {size} }} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n        rollout: {{ steps: [ {{ percent: 20, pause: 1h }}, {{ percent: 100 }} ] }}\n"
        )
    };
    let (v1, v2) = (text("small"), text("large"));
    std::fs::write(&file, &v1).expect("write");
    let kubeconfig = process_kubeconfig(dir.path(), &[&v1, &v2]).await;
    let flags = PROCESS_FLAGS;
    let mut replicas: Vec<support::ring::Replica> = ["a", "b", "c"]
        .iter()
        .map(|n| support::ring::Replica::spawn_with(&kubeconfig, &file, dir.path(), n, &flags))
        .collect();
    let ar = resource(&group, "Part");
    let count = 150;
    let old = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    std::fs::write(&file, &v2).expect("write");
    let crd = format!("parts.{group}");
    // Every CR's versions as seen, in order: none may go back.
    let seen = std::sync::Mutex::new(BTreeMap::<String, Vec<String>>::new());
    let look = || async {
        let all = states(&ar, &ns).await;
        let mut seen = seen.lock().expect("lock");
        for (name, state) in &all {
            let history = seen.entry(name.clone()).or_default();
            if history.last() != Some(&state.0) {
                history.push(state.0.clone());
            }
        }
        all.values()
            .filter(|s| !s.0.is_empty() && s.0 != old)
            .count()
    };
    let first = eventually("the first step on every replica", || async {
        let on_new = look().await;
        (on_new >= 30).then_some(on_new)
    })
    .await;
    let recorded = eventually("the leader's record of the step", || async {
        rollout_status(&crd).filter(|v| v["step"] == 1)
    })
    .await;
    assert_eq!(recorded["phase"], "Progressing", "{recorded:#}");
    // 20 % of 150, each replica rounding its share up: within 3 points.
    let settled = look().await;
    assert!(
        (30..=34).contains(&settled),
        "{first} then {settled} CRs on the new version at 20 %"
    );
    rollout_cli(&["promote", &crd]);
    eventually("every CR on the new version", || async {
        (look().await == count).then_some(())
    })
    .await;
    for (name, history) in seen.into_inner().expect("lock") {
        assert!(
            history.len() <= 2,
            "{name} went back and forth: {history:?}"
        );
    }
    for replica in &mut replicas {
        replica.assert_running();
        replica.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_rewritten_in_place_rolls_out_step_by_step() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-file");
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = dir.path().join("stamp.wasm");
    replace_file(
        &wasm,
        &std::fs::read(plugin("inrun_test_stamp_v1")).expect("read"),
    );
    let file = dir.path().join("blueprint.yaml");
    let rollout = "{ steps: [ { percent: 20, pause: 1h }, { percent: 100 } ] }";
    let reconcile = "        default: false\n        constructor: { location: ./stamp.wasm }\n";
    let (host, ns) = serving_file(
        &file,
        &blueprint(&group, "Filed", reconcile, rollout),
        "rollout-file",
    )
    .await;
    let ar = resource(&group, "Filed");
    let count = 50;
    let old = created_ready(&ar, &ns, count, |_| "{}".into()).await;
    // The same file, a new build: the slot reloads it, and the rollout keeps the old one.
    replace_file(
        &wasm,
        &std::fs::read(plugin("inrun_test_stamp_v2")).expect("read"),
    );
    let crd = format!("fileds.{group}");
    let on_new = |all: &BTreeMap<String, (String, bool, String)>| {
        all.values()
            .filter(|s| !s.0.is_empty() && s.0 != old)
            .count()
    };
    eventually("the first step's CRs on the new build", || async {
        let all = states(&ar, &ns).await;
        (on_new(&all) == 10 && all.values().all(|s| s.1)).then_some(())
    })
    .await;
    let recorded = eventually("the rollout recorded", || async {
        rollout_status(&crd).filter(|v| v["onNew"] == 10)
    })
    .await;
    assert_eq!(recorded["from"], old.as_str(), "{recorded:#}");
    // Those not moved still run the old build: their stamp says v1.
    let stamps = || async {
        let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &configmaps());
        let list = api.list(&ListParams::default()).await.expect("list");
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for cm in list.items {
            if let Some(v) = cm.data["data"]["version"].as_str() {
                *by.entry(v.to_string()).or_default() += 1;
            }
        }
        by
    };
    assert_eq!(
        stamps().await,
        BTreeMap::from([("v1".to_string(), 40), ("v2".to_string(), 10)])
    );
    rollout_cli(&["promote", &crd]);
    eventually("every CR on the new build", || async {
        (stamps().await == BTreeMap::from([("v2".to_string(), count)])).then_some(())
    })
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_plan_that_fails_moves_no_cr() {
    let _serial = SERIAL.lock().await;
    let group = unique_group("rollout-plan");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blueprint.yaml");
    let rollout = "{ steps: [ { percent: 50, pause: 1h }, { percent: 100 } ], requirePlan: true }";
    let (host, ns) = serving_file(
        &file,
        &blueprint(
            &group,
            "Planned",
            &constructor("inrun_test_stamp_v1"),
            rollout,
        ),
        "rollout-plan",
    )
    .await;
    let ar = resource(&group, "Planned");
    let count = 20;
    let spec = |i: usize| {
        if i % 10 < 3 {
            "{}".to_string()
        } else {
            "{ image: nginx }".to_string()
        }
    };
    let v1 = created_ready(&ar, &ns, count, spec).await;
    let before = states(&ar, &ns).await;
    std::fs::write(
        &file,
        blueprint(
            &group,
            "Planned",
            &constructor("inrun_plugin_webapp"),
            rollout,
        ),
    )
    .expect("write");
    let crd = format!("planneds.{group}");
    let refused = eventually("the rollout refused by its plan", || async {
        crd_events(&crd, "RolledBack").await.into_iter().next()
    })
    .await;
    assert!(
        refused.contains("refused before any CR moved")
            && refused.contains("failed on 6 of 20 CRs")
            && refused.contains("spec.image is required"),
        "{refused}"
    );
    // No CR ran the new version: none was written, none has a Deployment.
    let after = states(&ar, &ns).await;
    for (name, state) in &after {
        assert_eq!(state.0, v1, "{name}");
        assert_eq!(state.2, before[name].2, "{name} was written");
    }
    let deployments: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &deployments());
    assert!(
        deployments
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    host.stop().await;
}
