//! The host killed, or failing, at each step boundary of a pass and of a deletion
//! (`inrun_pass::failpoint`), on a real kube-apiserver, as an `inrun run` process under its
//! generated RBAC. Each run drives one story (create, edit, delete) with one failpoint
//! set; when the process dies there, a host without failpoints is started and the story
//! goes on. At every step's end and at the story's end the invariants hold: every child
//! has its CR or is gone, the CR converges or is released, a child another CR owns is
//! never deleted, and a package's converge runs at most once more than asked, on the same
//! identity, its identity lock let go with the CR.

// Stories read top to bottom, as the other end-to-end tests do.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get as route_get;
use axum::{Json, Router};
use inrun::pass::failpoint;
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::ring::Replica;
use support::*;

/// How long one step may take, restarts included.
const STEP: Duration = Duration::from_secs(120);

/// What a failpoint run does there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The process dies at the first hit.
    Kill,
    /// The step fails at the first hit; the host retries.
    Error,
}

/// The story's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Create,
    Edit,
    Delete,
}

const STORY: [Step; 3] = [Step::Create, Step::Edit, Step::Delete];

/// A Blueprint whose `Part` makes, for a CR `x`: `x-a` (apply wave 0), `x-b` (wave 1),
/// `x-keep` (left in place when the CR goes), and with `spec.extra` `x-c` and `x-d` (pruned
/// when it is unset).
fn parts(group: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: failpoints}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Part
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-a"}}
            data: {{v: "{{{{ .spec.value }}}}"}}
          - apiVersion: v1
            kind: ConfigMap
            metadata:
              name: "{{{{ .metadata.name }}}}-b"
              annotations: {{inrun.dev/apply-order: "1"}}
            data: {{v: "{{{{ .spec.value }}}}"}}
          - apiVersion: v1
            kind: ConfigMap
            metadata:
              name: "{{{{ .metadata.name }}}}-keep"
              annotations: {{inrun.dev/delete-policy: orphan-on-delete}}
            data: {{v: "{{{{ .spec.value }}}}"}}
          - |
            {{% if .spec.extra %}}
            apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-c"}}
            {{% endif %}}
          - |
            {{% if .spec.extra %}}
            apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-d"}}
            {{% endif %}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
        prune: {{enabled: true}}
"#
    )
}

/// A Blueprint whose `Thing` is served by the test package `inrun_test_infra`, its things
/// held by the test's backend on `port`.
fn things(group: &str, port: u16) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: failpoints-package}}
spec:
  runtime:
    backoff: {{base: 1s, max: 4s}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Thing
      reconcile:
        default: false
        package:
          location: "{plugin}"
          capabilities:
            http: {{hosts: ["127.0.0.1:{port}"]}}
"#,
        plugin = plugin("inrun_test_infra")
    )
}

/// Where the runs of one test live: the Blueprint file, the kubeconfig of its generated
/// ServiceAccount, and the CRD's resource.
struct World {
    dir: tempfile::TempDir,
    file: PathBuf,
    kubeconfig: PathBuf,
    ar: ApiResource,
    runs: usize,
}

impl World {
    async fn new(text: &str, kind: &str, group: &str) -> World {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("blueprint.yaml");
        std::fs::write(&file, text).expect("write");
        let parsed = inrun::blueprint::from_str(text, "blueprint.yaml").expect("a Blueprint");
        let kubeconfig = support::identity::Identity::for_blueprints(
            &[parsed],
            &support::identity::Identity::options(),
        )
        .await
        .kubeconfig(dir.path());
        World {
            dir,
            file,
            kubeconfig,
            ar: resource(group, kind),
            runs: 0,
        }
    }

    /// An `inrun run` process, with `failpoints` set.
    fn host(&mut self, failpoints: &str) -> Replica {
        self.runs += 1;
        let name = format!("host-{}", self.runs);
        Replica::spawn_env(
            &self.kubeconfig,
            &self.file,
            self.dir.path(),
            &name,
            &["--lock-namespace", support::identity::NAMESPACE],
            &[("INRUN_FAILPOINTS", failpoints)],
        )
    }

    fn api(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client(), ns, &self.ar)
    }
}

/// Whether `cr` is Ready at its generation.
fn ready(cr: &DynamicObject) -> bool {
    let generation = cr.metadata.generation.unwrap_or_default();
    cr.data["status"]["observedGeneration"].as_i64() == Some(generation)
        && cr.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The ConfigMaps in `ns`, by name.
async fn config_maps(ns: &str) -> HashMap<String, DynamicObject> {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, &configmaps());
    api.list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect()
}

/// The uids `child`'s owner references name.
fn owners(child: &DynamicObject) -> Vec<String> {
    child
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect()
}

/// Drives the story's steps, acting for each with `act` and waiting until `reached` says
/// the step's end state holds; when the host dies, checks it died at `point` and starts
/// one without failpoints. Returns the step the host died in, if it did, and the host
/// running at the end.
async fn drive<A, AF, R, RF>(
    world: &mut World,
    point: &str,
    mode: Mode,
    mut act: A,
    mut reached: R,
) -> (Option<Step>, Replica)
where
    A: FnMut(Step) -> AF,
    AF: std::future::Future<Output = ()>,
    R: FnMut(Step) -> RF,
    RF: std::future::Future<Output = Result<(), String>>,
{
    let setting = match mode {
        Mode::Kill => format!("{point}=kill"),
        Mode::Error => format!("{point}=error@1"),
    };
    let mut host = world.host(&setting);
    let mut died = None;
    for step in STORY {
        act(step).await;
        let deadline = Instant::now() + STEP;
        loop {
            let why = match reached(step).await {
                Ok(()) => break,
                Err(why) => why,
            };
            if host.exited_or_said("failpoint ") && died.is_none() && mode == Mode::Kill {
                assert!(
                    host.exited().await,
                    "{point}: the host said it was killed but runs on"
                );
                let log = host.log();
                assert!(
                    log.contains(&format!("failpoint {point}: hit 1, killing the process")),
                    "{point}: the host died elsewhere:\n{log}"
                );
                died = Some(step);
                host = world.host("");
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "{point} ({mode:?}): step {step:?} not reached: {why}\n{}",
                host.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    host.assert_running();
    (died, host)
}

/// One failpoint run of the `Part` story in a namespace of its own: CRs `x` (the story's)
/// and `y` (a bystander, created beside it and never touched after).
async fn parts_run(world: &mut World, point: &'static str, mode: Mode) -> Option<Step> {
    let cp = ControlPlane::shared();
    let ns = cp
        .namespace(&format!("fp-{}", point.replace('.', "-")))
        .await
        .expect("namespace");
    let api = world.api(&ns);
    let ar = world.ar.clone();
    let group = ar.group.clone();
    let uid_x: Arc<Mutex<String>> = Arc::default();
    let act = |step: Step| {
        let (ar, ns, api, group) = (ar.clone(), ns.clone(), api.clone(), group.clone());
        async move {
            let cr = |name: &str, spec: &str| {
                format!(
                    "apiVersion: {group}/v1alpha1\nkind: Part\nmetadata: {{name: {name}}}\nspec: {spec}\n"
                )
            };
            match step {
                Step::Create => {
                    apply_cr(&ar, &ns, &cr("y", "{value: y, extra: true}")).await;
                    apply_cr(&ar, &ns, &cr("x", "{value: one, extra: true}")).await;
                }
                Step::Edit => {
                    apply_cr(&ar, &ns, &cr("x", "{value: two, extra: false}")).await;
                }
                Step::Delete => {
                    api.delete("x", &DeleteParams::default())
                        .await
                        .expect("delete x");
                }
            }
        }
    };
    let reached = |step: Step| {
        let (ns, api, uid_x) = (ns.clone(), api.clone(), uid_x.clone());
        async move {
            let maps = config_maps(&ns).await;
            let x = api.get_opt("x").await.map_err(|e| e.to_string())?;
            if let Some(x) = &x {
                *uid_x.lock().expect("uid") = x.metadata.uid.clone().unwrap_or_default();
            }
            let uid = uid_x.lock().expect("uid").clone();
            let owned_by_x = |name: &str, value: Option<&str>| -> Result<(), String> {
                let child = maps.get(name).ok_or(format!("{name} missing"))?;
                if !owners(child).contains(&uid) {
                    return Err(format!("{name} is not x's"));
                }
                match value {
                    Some(v) if child.data["data"]["v"] != v => Err(format!("{name} not at {v}")),
                    _ => Ok(()),
                }
            };
            match step {
                Step::Create => {
                    let x = x.ok_or("x missing")?;
                    if !ready(&x) {
                        return Err("x not ready".into());
                    }
                    let y = api.get_opt("y").await.map_err(|e| e.to_string())?;
                    if !y.as_ref().is_some_and(ready) {
                        return Err("y not ready".into());
                    }
                    for c in ["x-a", "x-b", "x-keep"] {
                        owned_by_x(c, Some("one"))?;
                    }
                    for c in ["x-c", "x-d"] {
                        owned_by_x(c, None)?;
                    }
                    Ok(())
                }
                Step::Edit => {
                    let x = x.ok_or("x missing")?;
                    if !ready(&x) {
                        return Err("x not ready at its edit".into());
                    }
                    for c in ["x-a", "x-b", "x-keep"] {
                        owned_by_x(c, Some("two"))?;
                    }
                    match ["x-c", "x-d"].iter().find(|c| maps.contains_key(**c)) {
                        Some(c) => Err(format!("{c} not pruned")),
                        None => Ok(()),
                    }
                }
                Step::Delete => {
                    if x.is_some() {
                        return Err("x not gone".into());
                    }
                    if let Some(c) = ["x-a", "x-b", "x-c", "x-d"]
                        .iter()
                        .find(|c| maps.contains_key(**c))
                    {
                        return Err(format!("{c} left behind"));
                    }
                    let keep = maps.get("x-keep").ok_or("x-keep was deleted")?;
                    if owners(keep).contains(&uid) {
                        return Err("x-keep still names x as its owner".into());
                    }
                    Ok(())
                }
            }
        }
    };
    let (died, mut host) = drive(world, point, mode, act, reached).await;
    // The bystander: Ready, every child of its there and its own.
    let y = api.get("y").await.expect("y");
    assert!(ready(&y), "{point}: y is not ready: {:?}", y.data["status"]);
    let maps = config_maps(&ns).await;
    let uid_y = y.metadata.uid.clone().unwrap_or_default();
    for c in ["y-a", "y-b", "y-keep", "y-c", "y-d"] {
        let child = maps
            .get(c)
            .unwrap_or_else(|| panic!("{point}: {c} was deleted"));
        assert_eq!(owners(child), [uid_y.clone()], "{point}: {c}");
    }
    // No child is left whose CR is gone.
    for (name, child) in &maps {
        for uid in owners(child) {
            assert!(
                uid == uid_y,
                "{point}: {name} names an owner that is gone ({uid})"
            );
        }
    }
    host.kill().await;
    died
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_killed_at_each_step_of_a_pass_and_a_deletion_leaves_nothing_lost_or_stuck()
-> TestResult {
    let group = unique_group("failpoints");
    let mut world = World::new(&parts(&group), "Part", &group).await;
    let points = [
        (failpoint::FINALIZER_STORED, Step::Create),
        (failpoint::APPLY_WAVE, Step::Create),
        (failpoint::STATUS_BEFORE, Step::Create),
        (failpoint::STATUS_AFTER, Step::Create),
        (failpoint::PRUNE_DELETED, Step::Edit),
        (failpoint::TEARDOWN_ORPHANED, Step::Delete),
        (failpoint::TEARDOWN_DELETED, Step::Delete),
        (failpoint::RELEASE_BEFORE, Step::Delete),
    ];
    let mut table = Vec::new();
    for (point, expected) in points {
        let started = Instant::now();
        let died = parts_run(&mut world, point, Mode::Kill).await;
        assert_eq!(died, Some(expected), "{point}: where the host died");
        table.push(format!(
            "{point}: killed in {expected:?}, converged after a restart; {:.1}s",
            started.elapsed().as_secs_f64()
        ));
    }
    eprintln!("failpoints, kill:\n  {}", table.join("\n  "));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_failing_at_each_failpoint_is_retried_until_the_story_ends_as_without_it()
-> TestResult {
    let group = unique_group("failpoints-error");
    let mut world = World::new(&parts(&group), "Part", &group).await;
    for point in [
        failpoint::FINALIZER_STORED,
        failpoint::APPLY_WAVE,
        failpoint::STATUS_BEFORE,
        failpoint::STATUS_AFTER,
        failpoint::PRUNE_DELETED,
        failpoint::TEARDOWN_ORPHANED,
        failpoint::TEARDOWN_DELETED,
        failpoint::RELEASE_BEFORE,
    ] {
        let died = parts_run(&mut world, point, Mode::Error).await;
        assert_eq!(died, None, "{point}: an error must not end the host");
    }
    Ok(())
}

/// The package story's backend: things by id, and the PUTs and DELETEs it answered.
#[derive(Clone, Default)]
struct Backend {
    things: Arc<Mutex<HashMap<String, i64>>>,
    calls: Arc<Mutex<Vec<(&'static str, String)>>>,
}

impl Backend {
    async fn start(&self) -> u16 {
        async fn observe(
            State(b): State<Backend>,
            Path(id): Path<String>,
        ) -> (StatusCode, Json<Value>) {
            match b.things.lock().expect("things").get(&id) {
                Some(size) => (StatusCode::OK, Json(json!({"size": size, "ready": true}))),
                None => (StatusCode::NOT_FOUND, Json(json!({}))),
            }
        }
        async fn converge(
            State(b): State<Backend>,
            Path(id): Path<String>,
            Json(body): Json<Value>,
        ) -> StatusCode {
            b.calls.lock().expect("calls").push(("PUT", id.clone()));
            let size = body["size"].as_i64().unwrap_or_default();
            b.things.lock().expect("things").insert(id, size);
            StatusCode::OK
        }
        async fn remove(State(b): State<Backend>, Path(id): Path<String>) -> StatusCode {
            b.calls.lock().expect("calls").push(("DELETE", id.clone()));
            match b.things.lock().expect("things").remove(&id) {
                Some(_) => StatusCode::OK,
                None => StatusCode::NOT_FOUND,
            }
        }
        let app = Router::new()
            .route(
                "/things/{id}",
                route_get(observe).put(converge).delete(remove),
            )
            .with_state(self.clone());
        serve(app).await
    }

    fn calls(&self, method: &str) -> Vec<String> {
        self.calls
            .lock()
            .expect("calls")
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

/// The identity-lock Leases held by the CR with `uid`.
async fn leases_of(uid: &str) -> usize {
    let api: Api<Lease> = Api::namespaced(client(), support::identity::NAMESPACE);
    api.list(&ListParams::default())
        .await
        .expect("list Leases")
        .items
        .iter()
        .filter(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(uid))
        .count()
}

/// One failpoint run of the package story: `p` created (size 1), resized (2), deleted
/// (deletionPolicy Delete).
async fn package_run(
    world: &mut World,
    backend: &Backend,
    port: u16,
    point: &'static str,
) -> Option<Step> {
    let cp = ControlPlane::shared();
    let ns = cp
        .namespace(&format!("fpp-{}", point.replace('.', "-")))
        .await
        .expect("namespace");
    let id = format!("{ns}--p");
    let api = world.api(&ns);
    let ar = world.ar.clone();
    let group = ar.group.clone();
    let uid: Arc<Mutex<String>> = Arc::default();
    let act = |step: Step| {
        let (ar, ns, api, group) = (ar.clone(), ns.clone(), api.clone(), group.clone());
        async move {
            let cr = |size: u32| {
                format!(
                    "apiVersion: {group}/v1alpha1\nkind: Thing\nmetadata: {{name: p}}\nspec: {{deletionPolicy: Delete, config: {{endpoint: \"http://127.0.0.1:{port}\", size: {size}}}}}\n"
                )
            };
            match step {
                Step::Create => {
                    apply_cr(&ar, &ns, &cr(1)).await;
                }
                Step::Edit => {
                    apply_cr(&ar, &ns, &cr(2)).await;
                }
                Step::Delete => {
                    api.delete("p", &DeleteParams::default())
                        .await
                        .expect("delete p");
                }
            }
        }
    };
    let reached = |step: Step| {
        let (api, uid, id, backend) = (api.clone(), uid.clone(), id.clone(), backend.clone());
        async move {
            let p = api.get_opt("p").await.map_err(|e| e.to_string())?;
            if let Some(p) = &p {
                *uid.lock().expect("uid") = p.metadata.uid.clone().unwrap_or_default();
            }
            let thing = backend.things.lock().expect("things").get(&id).copied();
            match step {
                Step::Create | Step::Edit => {
                    let size = if step == Step::Create { 1 } else { 2 };
                    let p = p.ok_or("p missing")?;
                    if !ready(&p) {
                        return Err(format!("p not ready: {}", p.data["status"]));
                    }
                    (thing == Some(size))
                        .then_some(())
                        .ok_or(format!("the thing is {thing:?}, not {size}"))
                }
                Step::Delete => {
                    if p.is_some() {
                        return Err("p not gone".into());
                    }
                    if thing.is_some() {
                        return Err("the thing was not deleted".into());
                    }
                    let held = leases_of(&uid.lock().expect("uid")).await;
                    (held == 0)
                        .then_some(())
                        .ok_or(format!("{held} identity lock(s) still held by p"))
                }
            }
        }
    };
    let before = (backend.calls("PUT").len(), backend.calls("DELETE").len());
    let (died, mut host) = drive(world, point, Mode::Kill, act, reached).await;
    host.kill().await;
    // Two converges were asked for (create, resize) and one delete: at most one more of
    // either, and every call on the one thing the CR names.
    let puts: Vec<String> = backend.calls("PUT").split_off(before.0);
    let deletes: Vec<String> = backend.calls("DELETE").split_off(before.1);
    assert!(
        (2..=3).contains(&puts.len()) && (1..=2).contains(&deletes.len()),
        "{point}: {} converges, {} deletes",
        puts.len(),
        deletes.len()
    );
    assert!(
        puts.iter().chain(&deletes).all(|i| *i == id),
        "{point}: a call on another identity: {puts:?} {deletes:?}"
    );
    died
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_host_killed_at_each_step_converges_at_most_once_more_on_the_same_identity()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("failpoints-package");
    let mut world = World::new(&things(&group, port), "Thing", &group).await;
    let points = [
        (failpoint::LOCK_CLAIM_BEFORE, Step::Create),
        (failpoint::LOCK_CLAIM_AFTER, Step::Create),
        (failpoint::FINALIZER_STORED, Step::Create),
        (failpoint::PACKAGE_IDENTITY_STORED, Step::Create),
        (failpoint::PACKAGE_CONVERGE_BEFORE, Step::Create),
        (failpoint::PACKAGE_CONVERGE_AFTER, Step::Create),
        (failpoint::STATUS_AFTER, Step::Create),
        (failpoint::PACKAGE_DELETE_BEFORE, Step::Delete),
        (failpoint::PACKAGE_DELETE_AFTER, Step::Delete),
        (failpoint::RELEASE_BEFORE, Step::Delete),
        (failpoint::LOCK_RELEASE_BEFORE, Step::Delete),
        (failpoint::LOCK_RELEASE_AFTER, Step::Delete),
    ];
    let mut table = Vec::new();
    for (point, expected) in points {
        let died = package_run(&mut world, &backend, port, point).await;
        assert_eq!(died, Some(expected), "{point}: where the host died");
        table.push(format!("{point}: killed in {expected:?}"));
    }
    eprintln!("package failpoints, kill:\n  {}", table.join("\n  "));
    Ok(())
}
