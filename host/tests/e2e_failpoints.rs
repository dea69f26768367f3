//! The host killed, or failing, at each step boundary of a pass and of a deletion
//! (`inrun_pass::failpoint`), on a real kube-apiserver, as an `inrun run` process under its
//! generated RBAC. Each run drives one story (create, edit, delete) with one failpoint
//! set; when the process dies there, a host without failpoints is started and the story
//! goes on. At every step's end and at the story's end the invariants hold: every child
//! has its CR or is gone, the CR converges or is released, a child another CR owns is
//! never deleted, and a package's converge runs at most once more than asked, on the same
//! identity, its identity lock let go with the CR.
//!
//! Also here, on the same process harness: a randomized run killing the host at random
//! failpoints; a fault proxy between the host and the API server; a host that may not keep
//! its identity locks where it would, refusing to start; and a package's credentials kept
//! out of the host's log.

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
/// `x-keep` (left in place when the CR goes, adopted by a CR of the same name made later), and with `spec.extra` `x-c` and `x-d` (pruned
/// when it is unset).
fn parts(group: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: failpoints}}
spec:
  runtime:
    backoff: {{base: 1s, max: 4s}}
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
          # A CR made again under the name of one deleted finds its `-keep` left in
          # place, and takes it back.
          - {{apiVersion: v1, kind: ConfigMap, adopt: true}}
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

    fn ar_of(&self, group: &str, kind: Kind) -> ApiResource {
        resource(group, &format!("{kind:?}"))
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
            if host.exited_or_said("killing the process") && died.is_none() && mode == Mode::Kill {
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
    if mode == Mode::Error {
        // The step did fail there: a story that never met the failpoint shows nothing.
        let log = host.log();
        assert!(
            log.contains(&format!("failpoint {point}: hit 1, failing the step")),
            "{point}: never failed a step:\n{log}"
        );
    }
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
        assert_eq!(owners(child), std::slice::from_ref(&uid_y), "{point}: {c}");
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
    /// The `Authorization` header of every converge.
    authorizations: Arc<Mutex<Vec<String>>>,
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
            headers: axum::http::HeaderMap,
            Json(body): Json<Value>,
        ) -> StatusCode {
            b.calls.lock().expect("calls").push(("PUT", id.clone()));
            if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
                b.authorizations
                    .lock()
                    .expect("authorizations")
                    .push(auth.to_string());
            }
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
                    let uid = uid.lock().expect("uid").clone();
                    let held = leases_of(&uid).await;
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

/// A small, seeded generator (SplitMix64): a run is replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or_default()
    }
}

/// The three kinds of the randomized run: templates, a Wasm constructor, a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Part,
    Pair,
    Thing,
}

/// A Blueprint serving `Part` (the templates of [`parts`]), `Pair` (the `pair` Wasm
/// constructor: a ConfigMap and a headless Service) and `Thing` (the test package).
fn mixed(group: &str, port: u16) -> String {
    let part = parts(group);
    let part_crd = &part[part.find("    - group:").expect("the CRD")..];
    let thing = things(group, port);
    let thing_crd = &thing[thing.find("    - group:").expect("the CRD")..];
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: failpoints-mixed}}
spec:
  runtime:
    backoff: {{base: 1s, max: 4s}}
  crds:
{part_crd}    - group: {group}
      version: v1alpha1
      kind: Pair
      reconcile:
        default: false
        constructor: {{location: "{pair}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
          - {{apiVersion: v1, kind: Service}}
{thing_crd}"#,
        pair = plugin("inrun_bench_pair")
    )
}

/// What the test last asked of one CR.
#[derive(Debug, Clone)]
struct Wanted {
    kind: Kind,
    name: String,
    /// Its spec's value (`value`, `message` or `size`), `None` once deleted.
    value: Option<u64>,
    /// `Part`'s `spec.extra`.
    extra: bool,
    /// The uids it had (one per creation).
    uids: Vec<String>,
}

impl Wanted {
    fn yaml(&self, group: &str, port: u16) -> String {
        let v = self.value.unwrap_or_default();
        let spec = match self.kind {
            Kind::Part => format!("{{value: \"{v}\", extra: {}}}", self.extra),
            Kind::Pair => format!("{{message: \"{v}\"}}"),
            Kind::Thing => format!(
                "{{deletionPolicy: Delete, config: {{endpoint: \"http://127.0.0.1:{port}\", size: {v}}}}}"
            ),
        };
        format!(
            "apiVersion: {group}/v1alpha1\nkind: {:?}\nmetadata: {{name: {}}}\nspec: {spec}\n",
            self.kind, self.name
        )
    }
}

/// Whether every CR is as last asked: a live one Ready at its generation with its
/// children (or its thing) at its value, a deleted one gone with everything of its own.
async fn settled(
    group: &str,
    ns: &str,
    wanted: &[Wanted],
    backend: &Backend,
) -> Result<(), String> {
    let maps = config_maps(ns).await;
    let services: HashMap<String, DynamicObject> = {
        let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, &services());
        api.list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
            .collect()
    };
    let mut live_uids = Vec::new();
    for w in wanted {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client(), ns, &resource(group, &format!("{:?}", w.kind)));
        let cr = api.get_opt(&w.name).await.map_err(|e| e.to_string())?;
        let Some(v) = w.value else {
            if cr.is_some() {
                return Err(format!("{} not gone", w.name));
            }
            if w.kind == Kind::Thing
                && backend
                    .things
                    .lock()
                    .expect("things")
                    .contains_key(&format!("{ns}--{}", w.name))
            {
                return Err(format!("{}'s thing not deleted", w.name));
            }
            continue;
        };
        let cr = cr.ok_or(format!("{} missing", w.name))?;
        if !ready(&cr) {
            return Err(format!("{} not ready: {}", w.name, cr.data["status"]));
        }
        let uid = cr.metadata.uid.clone().unwrap_or_default();
        let owned = |child: Option<&DynamicObject>, what: &str| -> Result<(), String> {
            let child = child.ok_or(format!("{what} missing"))?;
            (owners(child) == [uid.clone()])
                .then_some(())
                .ok_or(format!("{what} not owned by its CR alone"))
        };
        let value = v.to_string();
        match w.kind {
            Kind::Part => {
                for s in ["a", "b", "keep"] {
                    let name = format!("{}-{s}", w.name);
                    owned(maps.get(&name), &name)?;
                    if maps[&name].data["data"]["v"] != value.as_str() {
                        return Err(format!("{name} not at {value}"));
                    }
                }
                for s in ["c", "d"] {
                    let name = format!("{}-{s}", w.name);
                    if w.extra {
                        owned(maps.get(&name), &name)?;
                    } else if maps.contains_key(&name) {
                        return Err(format!("{name} not pruned"));
                    }
                }
            }
            Kind::Pair => {
                owned(maps.get(&w.name), &w.name)?;
                owned(services.get(&w.name), &w.name)?;
                if maps[&w.name].data["data"]["message"] != value.as_str() {
                    return Err(format!("{} not at {value}", w.name));
                }
            }
            Kind::Thing => {
                let thing = backend
                    .things
                    .lock()
                    .expect("things")
                    .get(&format!("{ns}--{}", w.name))
                    .copied();
                if thing != i64::try_from(v).ok() {
                    return Err(format!("{}'s thing is {thing:?}, not {v}", w.name));
                }
            }
        }
        live_uids.push(uid);
    }
    // Nothing is left owned by a CR that is gone, and no identity lock is held by one.
    for (name, child) in maps.iter().chain(&services) {
        if let Some(dead) = owners(child).into_iter().find(|u| !live_uids.contains(u)) {
            return Err(format!("{name} is owned by a CR that is gone ({dead})"));
        }
    }
    for w in wanted {
        for uid in &w.uids {
            if !live_uids.contains(uid) && leases_of(uid).await > 0 {
                return Err(format!(
                    "an identity lock is held by {} that is gone ({uid})",
                    w.name
                ));
            }
        }
    }
    Ok(())
}

/// v1 Service.
fn services() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Service".into(),
        plural: "services".into(),
    }
}

/// A number from the environment, else `default`.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_mix_with_the_host_killed_at_random_failpoints_ends_with_nothing_lost_or_stuck()
-> TestResult {
    // `make chaos` runs 200 CRs and 50 kills; `INRUN_FAILPOINT_SEED` replays a run.
    let count = usize::try_from(env_or("INRUN_FAILPOINT_CRS", 30)).unwrap_or(30);
    let kills = env_or("INRUN_FAILPOINT_KILLS", 6);
    let seed = env_or(
        "INRUN_FAILPOINT_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    eprintln!(
        "randomized failpoint run: seed {seed} ({count} CRs, {kills} kills): INRUN_FAILPOINT_SEED={seed} replays it"
    );
    let mut rng = Rng(seed);
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("failpoints-mixed");
    let mut world = World::new(&mixed(&group, port), "Part", &group).await;
    let ns = ControlPlane::shared().namespace("fp-mixed").await?;
    let kinds = [Kind::Part, Kind::Pair, Kind::Thing];
    let mut wanted: Vec<Wanted> = (0..count)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            Wanted {
                kind,
                name: format!("{}-{i}", format!("{kind:?}").to_lowercase()),
                value: None,
                extra: false,
                uids: Vec::new(),
            }
        })
        .collect();
    let puts_before = backend.calls("PUT").len();
    let mut thing_changes = 0usize;
    let mut died = 0;
    let ops_per_round = (count * 3).div_ceil(usize::try_from(kills.max(1)).unwrap_or(1));
    for round in 0..kills {
        let point = ALL_KILLABLE[rng.below(ALL_KILLABLE.len())];
        let at = 1 + rng.below(3);
        let mut host = world.host(&format!("{point}=kill@{at}"));
        if round == 0 {
            // The first host installs the CRDs.
            for kind in ["Part", "Pair", "Thing"] {
                served(&resource(&group, kind)).await;
            }
        }
        for _ in 0..ops_per_round {
            let w = &mut wanted[rng.below(count)];
            let api: Api<DynamicObject> =
                Api::namespaced_with(client(), &ns, &resource(&group, &format!("{:?}", w.kind)));
            if w.value.is_some() && rng.below(4) == 0 {
                w.value = None;
                // A CR already gone (a create the API server had not finished) is fine.
                let _ = api.delete(&w.name, &DeleteParams::default()).await;
            } else {
                // Not while a deletion of the same name is pending: the apply would be refused.
                if w.value.is_none() && api.get_opt(&w.name).await?.is_some() {
                    continue;
                }
                w.value = Some(1 + rng.next() % 9);
                w.extra = rng.below(2) == 0;
                let created =
                    apply_cr(&world.ar_of(&group, w.kind), &ns, &w.yaml(&group, port)).await;
                let uid = created.metadata.uid.clone().unwrap_or_default();
                if !w.uids.contains(&uid) {
                    w.uids.push(uid);
                }
                if w.kind == Kind::Thing {
                    thing_changes += 1;
                }
            }
        }
        // Killed at its failpoint, or by SIGKILL if the round never reached it.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !host.exited_or_said("killing the process") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if host.log().contains("killing the process") {
            died += 1;
        }
        host.kill().await;
        eprintln!("  round {round}: {point}@{at}");
    }
    // A host without failpoints finishes the work.
    let mut host = world.host("");
    let started = Instant::now();
    let result = inrun_testenv::wait_for(
        "every CR as last asked",
        Duration::from_secs(300),
        || async { settled(&group, &ns, &wanted, &backend).await.ok() },
    )
    .await;
    if result.is_err() {
        let why = settled(&group, &ns, &wanted, &backend).await;
        panic!("seed {seed}: not settled: {why:?}\n{}", host.log());
    }
    host.assert_running();
    // Most rounds end at their failpoint; a run in which none did tested only SIGKILLs.
    assert!(died > 0, "seed {seed}: no round reached its failpoint");
    let puts = backend.calls("PUT").len() - puts_before;
    // Each converge asked for runs once, and at most once more for each kill.
    assert!(
        puts <= thing_changes + usize::try_from(kills).unwrap_or_default(),
        "seed {seed}: {puts} converges for {thing_changes} changes and {kills} kills"
    );
    eprintln!(
        "randomized failpoint run: seed {seed}: {count} CRs, {kills} kills ({died} at their failpoint), settled {:.1}s after the last; {puts} converges for {thing_changes} package changes",
        started.elapsed().as_secs_f64()
    );
    host.kill().await;
    Ok(())
}

/// The failpoints a randomized run picks from: all but a dropped CRD's release, which no
/// step of the run reaches.
const ALL_KILLABLE: &[&str] = &[
    failpoint::FINALIZER_STORED,
    failpoint::APPLY_WAVE,
    failpoint::PRUNE_DELETED,
    failpoint::STATUS_BEFORE,
    failpoint::STATUS_AFTER,
    failpoint::TEARDOWN_DELETED,
    failpoint::TEARDOWN_ORPHANED,
    failpoint::RELEASE_BEFORE,
    failpoint::PACKAGE_IDENTITY_STORED,
    failpoint::PACKAGE_CONVERGE_BEFORE,
    failpoint::PACKAGE_CONVERGE_AFTER,
    failpoint::PACKAGE_DELETE_BEFORE,
    failpoint::PACKAGE_DELETE_AFTER,
    failpoint::LOCK_CLAIM_BEFORE,
    failpoint::LOCK_CLAIM_AFTER,
    failpoint::LOCK_RELEASE_BEFORE,
    failpoint::LOCK_RELEASE_AFTER,
];

/// Run as an operator would out of a cluster: a kubeconfig for the ServiceAccount `inrun
/// generate rbac` made, no `$POD_NAMESPACE`, no `--lock-namespace`. The identity locks go
/// in the kubeconfig context's namespace; where the host may not write Leases, it refuses
/// to start naming the flag (it once started, and every package CR failed on a 403 only
/// its log told of).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_may_not_keep_identity_locks_in_its_namespace_refuses_to_start_naming_the_flag()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("lock-namespace");
    let mut world = World::new(&things(&group, port), "Thing", &group).await;
    // The generated RBAC grants Leases in the harness's host namespace; the kubeconfig's
    // context names `default`.
    let mut refused = Replica::spawn_env(
        &world.kubeconfig,
        &world.file,
        world.dir.path(),
        "refused",
        &[],
        &[],
    );
    assert!(
        refused.exited().await,
        "the host started: {}",
        refused.log()
    );
    let log = refused.log();
    assert!(
        log.contains("lacks permissions")
            && log.contains("leases.coordination.k8s.io in namespace default")
            && log.contains("--lock-namespace"),
        "{log}"
    );
    // The context naming the namespace the RBAC was generated for: it starts, and a package
    // CR converges with its lock there.
    let text = std::fs::read_to_string(&world.kubeconfig)?;
    let there = world.dir.path().join("context.kubeconfig");
    std::fs::write(
        &there,
        text.replace(
            r#""namespace":"default""#,
            &format!(r#""namespace":"{}""#, support::identity::NAMESPACE),
        ),
    )?;
    world.kubeconfig = there;
    let mut host = Replica::spawn_env(
        &world.kubeconfig,
        &world.file,
        world.dir.path(),
        "context",
        &[],
        &[],
    );
    let ns = ControlPlane::shared().namespace("lock-context").await?;
    let cr = format!(
        "apiVersion: {group}/v1alpha1\nkind: Thing\nmetadata: {{name: p}}\nspec: {{config: {{endpoint: \"http://127.0.0.1:{port}\", size: 1}}}}\n"
    );
    let created = apply_cr(&world.ar, &ns, &cr).await;
    let api = world.api(&ns);
    eventually("p to be Ready", || async {
        api.get("p").await.ok().filter(ready).map(|_| ())
    })
    .await;
    assert_eq!(
        leases_of(created.metadata.uid.as_deref().unwrap_or_default()).await,
        1,
        "its identity lock, in the context's namespace"
    );
    host.kill().await;
    Ok(())
}

/// The CA file the harness's admin kubeconfig names.
fn harness_ca() -> PathBuf {
    let text = std::fs::read_to_string(ControlPlane::shared().kubeconfig()).expect("kubeconfig");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("kubeconfig");
    PathBuf::from(
        doc["clusters"][0]["cluster"]["certificate-authority"]
            .as_str()
            .expect("a CA file"),
    )
}

/// One burst of `Part`s through the proxy: `count` created, half of them edited, a third
/// deleted, until every CR is as last asked. Returns how long it took.
async fn burst(world: &World, ns: &str, count: usize, backend: &Backend) -> Duration {
    let started = Instant::now();
    let group = world.ar.group.clone();
    let mut wanted: Vec<Wanted> = (0..count)
        .map(|i| Wanted {
            kind: Kind::Part,
            name: format!("part-{i}"),
            value: Some(1),
            extra: true,
            uids: Vec::new(),
        })
        .collect();
    for w in &wanted {
        apply_cr(&world.ar, ns, &w.yaml(&group, 0)).await;
    }
    // Created and settled first, so both runs make the same work of the edits.
    until_settled(&group, ns, &wanted, backend).await;
    let api = world.api(ns);
    for (i, w) in wanted.iter_mut().enumerate() {
        if i % 3 == 0 {
            w.value = None;
            api.delete(&w.name, &DeleteParams::default())
                .await
                .expect("delete");
        } else if i % 2 == 0 {
            w.value = Some(2);
            w.extra = false;
            apply_cr(&world.ar, ns, &w.yaml(&group, 0)).await;
        }
    }
    until_settled(&group, ns, &wanted, backend).await;
    started.elapsed()
}

/// Waits until [`settled`], or panics saying what is not.
async fn until_settled(group: &str, ns: &str, wanted: &[Wanted], backend: &Backend) {
    let done = inrun_testenv::wait_for(
        "every CR as last asked",
        Duration::from_secs(300),
        || async { settled(group, ns, wanted, backend).await.ok() },
    )
    .await;
    if done.is_err() {
        panic!(
            "not settled: {:?}",
            settled(group, ns, wanted, backend).await
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_an_api_server_that_delays_throttles_fails_and_cuts_requests_nothing_is_lost()
-> TestResult {
    let count = usize::try_from(env_or("INRUN_FAULT_CRS", 20)).unwrap_or(20);
    let group = unique_group("faults");
    let mut world = World::new(&parts(&group), "Part", &group).await;
    let proxy = support::faults::FaultProxy::start(
        ControlPlane::shared().server(),
        &harness_ca(),
        &group,
        env_or("INRUN_FAILPOINT_SEED", 7),
    )
    .await;
    world.kubeconfig = proxy.kubeconfig(&world.kubeconfig, world.dir.path());
    let mut host = world.host("");
    served(&world.ar).await;
    let backend = Backend::default();
    // The same burst without faults, then with them, through one host.
    let calm_ns = ControlPlane::shared().namespace("faults-calm").await?;
    let calm = burst(&world, &calm_ns, count, &backend).await;
    let before = proxy.tally();
    proxy.set(support::faults::Faults {
        latency: Duration::from_millis(200),
        reset: 0.05,
        throttle: 0.10,
        error: 0.05,
    });
    let rough_ns = ControlPlane::shared().namespace("faults-rough").await?;
    let rough = burst(&world, &rough_ns, count, &backend).await;
    proxy.set(support::faults::Faults::default());
    let after = proxy.tally();
    host.assert_running();
    let calm_writes = before.writes;
    let rough_writes = after.writes - before.writes;
    // Writes per CR within 1.5× of the calm run's.
    assert!(
        rough_writes * 2 <= calm_writes * 3,
        "{rough_writes} writes with faults against {calm_writes} without"
    );
    // Every write refused with `Retry-After: 1` came again no sooner.
    assert!(
        after.throttled > 0 && !after.retried_after.is_empty(),
        "{after:?}"
    );
    let soonest = after
        .retried_after
        .iter()
        .min()
        .copied()
        .unwrap_or_default();
    assert!(
        soonest >= Duration::from_millis(950),
        "a write came again {soonest:?} after a 429 with Retry-After: 1"
    );
    eprintln!(
        "faults: {count} CRs; calm {:.1}s, {calm_writes} writes; with faults {:.1}s, {rough_writes} writes ({:.2}×); {} throttled (soonest retry {:.2}s), {} 5xx, {} cut before, {} cut after the API server did it",
        calm.as_secs_f64(),
        rough.as_secs_f64(),
        rough_writes as f64 / calm_writes.max(1) as f64,
        after.throttled,
        soonest.as_secs_f64(),
        after.errors,
        after.reset_before,
        after.reset_after
    );
    host.kill().await;
    Ok(())
}

/// Seed 002's credentials clause, for the log: a package reads a granted Secret key and
/// sends it to its backend, is refused a key not granted, and neither value appears in
/// the host's log, even at debug level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packages_credentials_never_reach_the_hosts_log() -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("creds-log");
    let text = things(&group, port).replace(
        "            http: {hosts:",
        "            credentials: [{secret: backend, keys: [token]}]\n            http: {hosts:",
    );
    assert!(text.contains("credentials"), "{text}");
    let world = World::new(&text, "Thing", &group).await;
    let mut host = Replica::spawn_env(
        &world.kubeconfig,
        &world.file,
        world.dir.path(),
        "creds",
        &["--lock-namespace", support::identity::NAMESPACE],
        &[("INRUN_LOG", "debug")],
    );
    let ns = ControlPlane::shared().namespace("creds-log").await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client(), &ns);
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "backend"},
        "stringData": {"token": "granted-t0ken-7731", "admin": "refused-passw0rd-7731"},
    }))?;
    secrets.create(&Default::default(), &secret).await?;
    let cr = |name: &str, key: &str| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: Thing\nmetadata: {{name: {name}}}\nspec: {{config: {{endpoint: \"http://127.0.0.1:{port}\", size: 1, token: {{secret: backend, key: {key}}}}}}}\n"
        )
    };
    apply_cr(&world.ar, &ns, &cr("granted", "token")).await;
    apply_cr(&world.ar, &ns, &cr("refused", "admin")).await;
    let api = world.api(&ns);
    eventually("granted to be Ready", || async {
        api.get("granted").await.ok().filter(ready).map(|_| ())
    })
    .await;
    eventually("refused to fail", || async {
        let cr = api.get("refused").await.ok()?;
        let failed = cr.data["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "False");
        failed.then_some(())
    })
    .await;
    assert!(
        backend
            .authorizations
            .lock()
            .expect("authorizations")
            .contains(&"Bearer granted-t0ken-7731".to_string()),
        "the package sent the credential it read"
    );
    host.kill().await;
    let log = host.log();
    assert!(log.contains("DEBUG"), "the host logged at debug level");
    for secret in ["granted-t0ken-7731", "refused-passw0rd-7731"] {
        assert!(!log.contains(secret), "{secret} in the host's log");
    }
    Ok(())
}
