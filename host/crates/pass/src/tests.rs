//! The pass's decisions, without a cluster: the order of steps, what a gated, invalid or
//! deleting CR gets, prune candidates, requeue and what a pass that changes nothing writes.

use std::time::Duration;

use super::record::Recorder;
use super::*;
use inrun_reconcilers::assemble::Assembly;
use serde_json::{Map, Value, json};

fn assembly(crd_extra: &str, reconcile_extra: &str) -> Assembly {
    let text = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: t}}
spec:
  crds:
    - group: t.inrun.dev
      version: v1
      kind: Thing
{crd_extra}      emit:
        status:
          phase: "{{{{ .spec.phase }}}}"
      reconcile:
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            data: {{phase: "{{{{ .spec.phase }}}}"}}
{reconcile_extra}"#
    );
    assemble(&text)
}

/// The Blueprint `text` assembled, with a small engine.
pub(crate) fn assemble(text: &str) -> Assembly {
    let bp = inrun_blueprint::from_str(text, "t.yaml").expect("blueprint");
    let engine = inrun_wasm::Engine::new(inrun_wasm::EngineSettings {
        pooling: false,
        ..Default::default()
    })
    .expect("engine");
    futures::executor::block_on(Assembly::from_blueprint(bp, &engine)).expect("assembly")
}

fn cr(spec: Value) -> Value {
    json!({"apiVersion": "t.inrun.dev/v1", "kind": "Thing",
           "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 1},
           "spec": spec})
}

fn run_pass(a: &Assembly, object: &Value, fx: &mut Recorder) -> Result<Done, Failure> {
    run_pass_with(a, &a.blueprint.spec.runtime, object, fx)
}

/// [`run_pass`] with other runtime settings than the Blueprint's.
fn run_pass_with(
    a: &Assembly,
    runtime: &inrun_blueprint::RuntimeSpec,
    object: &Value,
    fx: &mut Recorder,
) -> Result<Done, Failure> {
    let p = Pass {
        crd: &a.crds()[0],
        runtime,
        object,
        target: None,
        now: "2026-01-01T00:00:00Z".parse().expect("time"),
        infrastructure: None,
        bucket_label: None,
    };
    futures::executor::block_on(run(p, fx))
}

/// The CR as the API server would show it after `fx`'s writes.
fn written(object: &Value, fx: &Recorder) -> Value {
    let mut after = object.clone();
    let mut fields = Vec::new();
    for (manager, m) in &fx.metadata {
        if !m.finalizers.is_empty() {
            after["metadata"]["finalizers"] = json!(m.finalizers);
        }
        for (k, v) in &m.labels {
            after["metadata"]["labels"][k] = json!(v);
        }
        let finalizers: Map<String, Value> = m
            .finalizers
            .iter()
            .map(|f| (format!("v:{}", json!(f)), json!({})))
            .collect();
        let labels: Map<String, Value> = m
            .labels
            .keys()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        fields.push(json!({"manager": manager, "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:finalizers": finalizers, "f:labels": labels}}}));
    }
    if let Some(status) = &fx.status {
        after["status"] = Value::Object(status.clone());
    }
    after["metadata"]["managedFields"] = Value::Array(fields);
    after
}

/// Gate and Prepare write nothing for a CR they let through (what they do to one they
/// hold back: `a_gated_cr_…`, `an_invalid_cr_…`); what follows them is in order.
#[test]
fn a_new_cr_let_through_goes_maintain_reconcile_apply_status_and_event_in_that_order() {
    let a = assembly("", "");
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &cr(json!({"phase": "on"})), &mut fx).expect("pass");
    assert_eq!(
        fx.steps,
        [
            "metadata inrun-finalizer",
            "apply 1 owned",
            "status",
            "event Reconciled"
        ]
    );
    assert_eq!(done, Done::default());
    let status = fx.status.as_ref().expect("status");
    assert_eq!(status["phase"], "on");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(fx.metadata[0].1.finalizers, [meta::FINALIZER]);
}

#[test]
fn a_pass_that_finds_everything_as_desired_writes_nothing_and_records_nothing() {
    let a = assembly("", "");
    let object = cr(json!({"phase": "on"}));
    let mut first = Recorder::new(Some("ns".into()));
    run_pass(&a, &object, &mut first).expect("first pass");
    let settled = written(&object, &first);
    let mut again = Recorder::new(Some("ns".into()));
    // The effects find the child as desired: the apply writes nothing.
    again.up_to_date = true;
    run_pass(&a, &settled, &mut again).expect("second pass");
    assert_eq!(
        again.steps,
        ["apply 1 owned"],
        "no metadata, status or event"
    );
}

#[test]
fn the_status_says_what_reconciled_the_cr_and_changes_only_when_that_does() {
    let object = cr(json!({"phase": "on"}));
    let by = |a: &Assembly, object: &Value| {
        let mut fx = Recorder::new(Some("ns".into()));
        run_pass(a, object, &mut fx).expect("pass");
        fx.status
            .as_ref()
            .map(|s| s["reconciledBy"].as_str().unwrap_or_default().to_string())
    };
    let running = assembly("", "");
    let first = by(&running, &object).expect("a first status");
    let (kind, digest) = first.split_once(':').expect("kind:digest");
    assert_eq!(kind, "declarative");
    assert!(
        digest.len() == 16 && digest.chars().all(|c| c.is_ascii_hexdigit()),
        "{first}"
    );
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&running, &object, &mut fx).expect("pass");
    let settled = written(&object, &fx);
    let mut again = Recorder::new(Some("ns".into()));
    again.up_to_date = true;
    run_pass(&running, &settled, &mut again).expect("again");
    assert!(
        again.status.is_none(),
        "the same version writes no status again"
    );
    let changed = assembly("", "        prune: {enabled: true}\n");
    let second = by(&changed, &settled).expect("a changed block writes its status");
    assert!(
        second.starts_with("declarative:") && second != first,
        "{first} then {second}"
    );
}

#[test]
fn a_gated_cr_gets_status_and_one_event_but_no_finalizer_and_no_cleanup() {
    let gate = "      preReconcile:\n        - {name: ready, when: \"{{ .spec.go }}\", message: waiting for go}\n";
    let a = assembly(gate, "");
    let mut object = cr(json!({"go": false}));
    object["metadata"]["annotations"] = json!({meta::CLEANUP_AT: "2020-01-01T00:00:00Z"});
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(fx.steps, ["status", "event Gated"]);
    assert_eq!(done.after, Some(GATE_RECHECK));
    assert_eq!(
        fx.status.as_ref().expect("status")["conditions"][0]["reason"],
        "Gated"
    );
    // Still gated on the recheck: the status says so already, nothing is written again.
    let settled = written(&object, &fx);
    let mut again = Recorder::new(Some("ns".into()));
    run_pass(&a, &settled, &mut again).expect("recheck");
    assert!(again.steps.is_empty(), "{:?}", again.steps);
}

#[test]
fn an_invalid_cr_gets_status_and_an_event_and_waits_for_a_change() {
    let rule =
        "      validation:\n        - {rule: \"{{ .spec.phase }}\", message: phase is required}\n";
    let a = assembly(rule, "");
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &cr(json!({})), &mut fx).expect("pass");
    assert_eq!(fx.steps, ["status", "event Invalid"]);
    assert_eq!(done, Done::default());
    assert!(
        fx.events[0].1.contains("phase is required"),
        "{:?}",
        fx.events
    );
}

#[test]
fn a_due_cleanup_deletes_the_cr_after_maintain_and_before_the_reconciler() {
    let a = assembly("", "");
    let mut object = cr(json!({"phase": "on"}));
    object["metadata"]["annotations"] = json!({meta::CLEANUP_AT: "2020-01-01T00:00:00Z"});
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(
        fx.steps,
        ["metadata inrun-finalizer", "delete", "event CleanedUp"]
    );
}

#[test]
fn prune_deletes_only_what_the_result_no_longer_returns() {
    let a = assembly("", "        prune: {enabled: true}\n");
    let mut fx = Recorder::new(Some("ns".into()));
    let stale = ChildKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: "old".into(),
    };
    let current = ChildKey {
        name: "a".into(),
        ..stale.clone()
    };
    fx.existing = vec![stale.clone(), current];
    run_pass(&a, &cr(json!({"phase": "on"})), &mut fx).expect("pass");
    assert!(fx.steps.contains(&"prune 1".to_string()), "{:?}", fx.steps);
    assert_eq!(
        fx.events[0],
        (
            Reason::Pruned,
            format!("deleted {stale}: no longer returned")
        )
    );
}

fn deleting(object: &mut Value) {
    object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    object["metadata"]["finalizers"] = json!([meta::FINALIZER]);
}

#[test]
fn requeue_after_alone_never_holds_a_deleting_cr() {
    let a = assembly("", "        requeue: {after: 30s}\n");
    let mut object = cr(json!({"phase": "on"}));
    deleting(&mut object);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &object, &mut fx).expect("pass");
    assert!(!done.holds);
    assert_eq!(
        fx.steps,
        ["delete children 0", "release", "event Finalized"]
    );
}

#[test]
fn a_wave_that_waits_shows_progressing_prunes_nothing_and_runs_again_soon() {
    let a = assembly("", "        prune: {enabled: true}\n");
    let mut fx = Recorder::new(Some("ns".into()));
    fx.waiting = Some("waiting for CustomResourceDefinition gizmos.x to be Established".into());
    fx.existing = vec![ChildKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: "of-a-later-wave".into(),
    }];
    let done = run_pass(&a, &cr(json!({"phase": "on"})), &mut fx).expect("pass");
    assert_eq!(done.after, Some(WAVE_RECHECK));
    assert_eq!(
        fx.steps,
        ["metadata inrun-finalizer", "apply 1 owned", "status"],
        "no prune, no event"
    );
    let status = fx.status.as_ref().expect("status");
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "Progressing");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("gizmos.x"))
    );
}

#[test]
fn a_deletion_blocked_or_mid_wave_keeps_the_finalizer_and_says_why() {
    let a = assembly("", "");
    let mut object = cr(json!({"phase": "on"}));
    deleting(&mut object);
    let mut blocked = Recorder::new(Some("ns".into()));
    blocked.teardown = Some(Teardown::Blocked(
        "deletion blocked: Gizmo (1: b/theirs)".into(),
    ));
    let done = run_pass(&a, &object, &mut blocked).expect("pass");
    assert_eq!(done.after, Some(SAFEGUARD_RECHECK));
    assert_eq!(
        blocked.steps,
        ["delete children 0", "status", "event DeletionBlocked"]
    );
    let mut waiting = Recorder::new(Some("ns".into()));
    waiting.teardown = Some(Teardown::Waiting(
        "waiting for Gizmo ns/own to be gone".into(),
    ));
    let done = run_pass(&a, &object, &mut waiting).expect("pass");
    assert_eq!(done.after, Some(WAVE_RECHECK));
    assert_eq!(waiting.steps, ["delete children 0", "status"], "no event");
    let status = waiting.status.as_ref().expect("status");
    assert_eq!(status["conditions"][0]["reason"], "Finalizing");
}

#[test]
fn a_teardown_that_fails_says_the_step_and_why_once_and_keeps_the_finalizer() {
    let a = assembly("", "");
    let mut object = cr(json!({"phase": "on"}));
    deleting(&mut object);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.teardown_fails = Some("the API server is gone".into());
    let done = run_pass(&a, &object, &mut fx).expect("pass");
    assert!(done.retry, "retried with backoff");
    let status = fx.status.as_ref().expect("status");
    let ready = &status["conditions"][0];
    assert_eq!(ready["reason"], "DeletionFailed");
    // The step is named once, then the cause: no prefix repeated by the pass.
    assert_eq!(
        ready["message"],
        "deleting the CR's children: the API server is gone"
    );
    assert!(!fx.steps.iter().any(|s| s == "release"), "{:?}", fx.steps);
}

/// The warning events `fx` recorded.
fn warnings(fx: &Recorder) -> Vec<&(Reason, String)> {
    fx.events
        .iter()
        .filter(|(r, _)| r.event_type() == "Warning")
        .collect()
}

#[test]
fn every_effect_that_fails_reaches_the_cr_as_ready_false_and_one_warning_event() {
    let a = assembly("", "");
    let new = cr(json!({"phase": "on"}));
    let mut gone = new.clone();
    deleting(&mut gone);
    for (object, effect) in [
        (&new, "metadata"),
        (&new, "apply"),
        (&new, "status"),
        (&gone, "tear_down"),
        (&gone, "release"),
    ] {
        let mut fx = Recorder::new(Some("ns".into()));
        fx.fails = vec![effect];
        let _ = run_pass(&a, object, &mut fx);
        assert!(
            fx.steps.contains(&format!("{effect} refused")),
            "{effect}: {:?}",
            fx.steps
        );
        // One warning naming the cause, whichever step met it.
        let said = warnings(&fx);
        assert_eq!(said.len(), 1, "{effect}: {:?}", fx.events);
        assert!(
            said[0].1.contains("refused by the API server"),
            "{effect}: {said:?}"
        );
        // On the CR too, unless the status is what cannot be written.
        if effect != "status" {
            let (status, _, message) = status::ready_now(&written(object, &fx)).expect("Ready");
            assert_eq!(status, "False", "{effect}");
            assert!(
                message.contains("refused by the API server"),
                "{effect}: {message}"
            );
        }
    }
}

#[test]
fn after_the_finalizer_timeout_the_teardown_is_forced_and_what_it_spared_is_told() {
    let a = assembly("", "");
    let mut object = cr(json!({"phase": "on"}));
    deleting(&mut object);
    let mut runtime_spec = a.blueprint.spec.runtime.clone();
    runtime_spec.finalizers.timeout = Some(Duration::from_secs(1));
    let mut fx = Recorder::new(Some("ns".into()));
    fx.teardown = Some(Teardown::Done {
        deleted: Vec::new(),
        orphaned: Vec::new(),
        spared: Some(
            "CustomResourceDefinition gizmos.x, with foreign instances of Gizmo (1: b/theirs)"
                .into(),
        ),
    });
    let p = Pass {
        crd: &a.crds()[0],
        runtime: &runtime_spec,
        object: &object,
        target: None,
        now: "2026-01-01T00:00:05Z".parse().expect("time"),
        infrastructure: None,
        bucket_label: None,
    };
    futures::executor::block_on(run(p, &mut fx)).expect("pass");
    assert_eq!(
        fx.steps,
        [
            "delete children 0 forced",
            "event FinalizeTimeout",
            "release",
            "event Finalized"
        ],
        "the reconciler is not asked again after the timeout"
    );
    assert!(
        fx.events[0]
            .1
            .contains("left in place instead of deleted: CustomResourceDefinition gizmos.x")
    );
}

#[test]
fn a_true_requeue_condition_holds_a_deleting_cr_and_says_why_once() {
    let a = assembly(
        "",
        "        requeue: {after: 2s, when: \"{{ .spec.hold }}\"}\n",
    );
    let mut object = cr(json!({"hold": true}));
    deleting(&mut object);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &object, &mut fx).expect("pass");
    assert!(done.holds);
    assert_eq!(done.after, Some(Duration::from_secs(2)));
    assert_eq!(fx.steps, ["status", "event DeletionBlocked"]);
    let again_object = written(&object, &fx);
    let mut again = Recorder::new(Some("ns".into()));
    run_pass(&a, &again_object, &mut again).expect("recheck");
    assert!(again.steps.is_empty(), "{:?}", again.steps);
}

#[test]
fn on_delete_templates_are_applied_unowned_while_the_cr_is_deleted() {
    let on_delete = "        onDelete:\n          - {apiVersion: v1, kind: ConfigMap, metadata: {name: backup}}\n";
    let a = assembly("", on_delete);
    let mut object = cr(json!({"phase": "on"}));
    deleting(&mut object);
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(fx.steps[0], "apply 1 unowned");
    assert_eq!(fx.applied[0]["metadata"]["name"], "backup");
    assert!(fx.steps.contains(&"release".to_string()));
}

#[test]
fn a_result_requeue_asks_again_and_a_resync_is_the_longest_wait() {
    let a = assembly("", "        requeue: {after: 30s}\n");
    let mut runtime = a.blueprint.spec.runtime.clone();
    runtime.resync = Some(Duration::from_secs(600));
    let object = cr(json!({"phase": "on"}));
    let mut fx = Recorder::new(Some("ns".into()));
    let p = Pass {
        crd: &a.crds()[0],
        runtime: &runtime,
        object: &object,
        target: None,
        now: "2026-01-01T00:00:00Z".parse().expect("time"),
        infrastructure: None,
        bucket_label: None,
    };
    let done = futures::executor::block_on(run(p, &mut fx)).expect("pass");
    assert_eq!(done.after, Some(Duration::from_secs(30)));
    let b = assembly("", "");
    let p = Pass {
        crd: &b.crds()[0],
        ..p
    };
    let done = futures::executor::block_on(run(p, &mut Recorder::default())).expect("pass");
    assert_eq!(done.after, Some(Duration::from_secs(600)));
}

fn deployment_assembly(ready_when: &str) -> Assembly {
    assemble(&format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: t}}
spec:
  crds:
    - group: t.inrun.dev
      version: v1
      kind: Thing
      reconcile:
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap{ready_when}}}
          - {{apiVersion: apps/v1, kind: Deployment}}
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            spec: {{replicas: 2}}
"#
    ))
}

fn deployment(available: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "a", "namespace": "ns", "generation": 1},
           "spec": {"replicas": 2},
           "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                      "readyReplicas": available, "availableReplicas": available}})
}

fn condition_of(fx: &Recorder, kind: &str) -> (String, String, String) {
    status::condition_now(&json!({"status": fx.status.clone().expect("status")}), kind)
        .unwrap_or_else(|| panic!("a {kind} condition"))
}

#[test]
fn ready_waits_for_every_child_and_names_the_first_one_not_ready() {
    let a = deployment_assembly("");
    let object = cr(json!({}));
    // Not observed (offline): the Deployment's state is not known; the ConfigMap, whose
    // readiness reads nothing back, is not even looked at.
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(
        condition_of(&fx, "Reconciled"),
        (
            "True".into(),
            "Reconciled".into(),
            "applied 2 resource(s)".into()
        )
    );
    assert_eq!(
        condition_of(&fx, "Ready"),
        (
            "Unknown".into(),
            "Progressing".into(),
            "Deployment a: not observed".into()
        )
    );
    assert_eq!(
        fx.steps
            .iter()
            .filter(|s| s.starts_with("observe"))
            .collect::<Vec<_>>(),
        ["observe Deployment ns/a"]
    );
    // Observed, unavailable: Progressing, and status.resources says which and why.
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(vec![deployment(0)]);
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(
        condition_of(&fx, "Ready"),
        (
            "False".into(),
            "Progressing".into(),
            "Deployment a: 0/2 replicas available".into()
        )
    );
    let resources = &fx.status.as_ref().expect("status")["resources"];
    assert_eq!(
        resources,
        &json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "state": "Current"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "state": "InProgress",
             "message": "0/2 replicas available"}
        ])
    );
    // The child becomes available; nothing else changes: one status write and one
    // `Ready` event, no apply counted as a change.
    let before = written(&object, &fx);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(vec![deployment(2)]);
    fx.up_to_date = true;
    run_pass(&a, &before, &mut fx).expect("pass");
    assert_eq!(
        condition_of(&fx, "Ready"),
        (
            "True".into(),
            "Ready".into(),
            "all 2 resource(s) ready".into()
        )
    );
    assert_eq!(
        fx.events,
        [(Reason::Ready, "all 2 resource(s) ready".to_string())]
    );
    // A deleted child is not ready either.
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(Vec::new());
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(
        condition_of(&fx, "Ready").2,
        "Deployment a: not found on the server"
    );
}

#[test]
fn a_ready_when_rule_replaces_the_kinds_rules_and_a_failed_child_is_named_first() {
    let a = deployment_assembly(", readyWhen: \"{{ .data.phase == 'Running' }}\"");
    let object = cr(json!({}));
    let config = |phase: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a", "namespace": "ns"}, "data": {"phase": phase}})
    };
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(vec![config("Pending"), deployment(2)]);
    run_pass(&a, &object, &mut fx).expect("pass");
    let (status, reason, message) = condition_of(&fx, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Progressing"));
    assert!(message.starts_with("ConfigMap a: readyWhen"), "{message}");
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(vec![config("Running"), deployment(2)]);
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(condition_of(&fx, "Ready").0, "True");
    // A rollout past its deadline fails; it is named although the ConfigMap comes first.
    let mut stuck = deployment(0);
    stuck["status"]["conditions"] =
        json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.observed = Some(vec![config("Pending"), stuck]);
    run_pass(&a, &object, &mut fx).expect("pass");
    let (status, reason, message) = condition_of(&fx, "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ResourceFailed")
    );
    assert!(message.starts_with("Deployment a:"), "{message}");
    assert_eq!(condition_of(&fx, "Reconciled").0, "True");
}

#[test]
fn a_failed_pass_says_so_in_both_conditions_and_keeps_the_childrens_states() {
    // The Result writes a kind `managedResources` does not allow: the fence fails the pass.
    let a = assembly(
        "",
        "          - {apiVersion: v1, kind: \"{{ .spec.kind }}\", metadata: {name: x}}\n",
    );
    let mut object = cr(json!({"phase": "on", "kind": "Secret"}));
    let states =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "state": "Current"}]);
    object["status"] = json!({"resources": states});
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &object, &mut fx).expect_err("the fence refuses the Secret");
    let reconciled = condition_of(&fx, "Reconciled");
    assert_eq!(reconciled.0, "False");
    assert_eq!(reconciled, condition_of(&fx, "Ready"));
    assert_eq!(fx.status.as_ref().expect("status")["resources"], states);
}

#[test]
fn emit_conditions_render_beside_the_hosts_and_a_typed_answer_reads_as_true_or_false() {
    let a = assemble(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  crds:
    - group: t.inrun.dev
      version: v1
      kind: Thing
      emit:
        conditions:
          - {type: Phased, status: "{{ .spec.phase == 'on' }}", reason: Phase, message: "phase {{ .spec.phase }}"}
      reconcile:
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
        onReconcile: []
"#,
    );
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &cr(json!({"phase": "on"})), &mut fx).expect("pass");
    assert_eq!(
        condition_of(&fx, "Phased"),
        ("True".into(), "Phase".into(), "phase on".into())
    );
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass(&a, &cr(json!({"phase": "off"})), &mut fx).expect("pass");
    assert_eq!(condition_of(&fx, "Phased").0, "False");
}

#[test]
fn every_reason_of_the_hosts_events_is_one_a_reconciler_may_not_take() {
    let hosts: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(hosts, inrun_contract::HOST_EVENT_REASONS);
}

#[test]
fn the_gate_never_holds_a_cr_being_deleted() {
    let gate = "      preReconcile:\n        - {name: ready, when: \"{{ .spec.go }}\", message: waiting for go}\n";
    let a = assembly(gate, "");
    let mut object = cr(json!({"go": false}));
    deleting(&mut object);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(
        fx.steps,
        ["delete children 0", "release", "event Finalized"]
    );
    assert!(!done.holds);
    assert!(fx.events.iter().all(|(r, _)| *r != Reason::Gated));
}

#[test]
fn an_empty_result_prunes_only_when_allow_empty_says_so() {
    // A reconciler that returns nothing (its one object only when `spec.phase` is set).
    let text = r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  crds:
    - group: t.inrun.dev
      version: v1
      kind: Thing
      reconcile:
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
        onReconcile:
          - "{% if .spec.phase %}{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}{% endif %}"
        PRUNE
"#;
    let stale = ChildKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: "old".into(),
    };
    let pruned = |prune: &str| {
        let a = assemble(&text.replace("PRUNE", prune));
        let mut fx = Recorder::new(Some("ns".into()));
        fx.existing = vec![stale.clone()];
        run_pass(&a, &cr(json!({})), &mut fx).expect("pass");
        fx.steps.iter().any(|s| s.starts_with("prune"))
    };
    // An empty Result is more often a reconciler's mistake than a wish to delete all.
    assert!(!pruned("prune: {enabled: true}"));
    assert!(pruned("prune: {enabled: true, allowEmpty: true}"));
}

#[test]
fn a_cr_outside_the_crds_namespaces_is_invalid_before_anything_is_written_for_it() {
    let rules = "      namespaces: {include: [team-a, team-b], exclude: [team-b]}\n";
    let a = assembly(rules, "");
    for ns in ["elsewhere", "team-b"] {
        let mut object = cr(json!({"phase": "on"}));
        object["metadata"]["namespace"] = json!(ns);
        let mut fx = Recorder::new(Some(ns.into()));
        run_pass(&a, &object, &mut fx).expect("pass");
        assert_eq!(fx.steps, ["status", "event Invalid"], "{ns}");
        assert!(fx.applied.is_empty() && fx.metadata.is_empty(), "{ns}");
    }
    let mut object = cr(json!({"phase": "on"}));
    object["metadata"]["namespace"] = json!("team-a");
    let mut fx = Recorder::new(Some("team-a".into()));
    run_pass(&a, &object, &mut fx).expect("pass");
    assert_eq!(fx.applied.len(), 1, "an included namespace is reconciled");
}

#[test]
fn the_blueprints_finalizer_names_join_the_hosts_on_a_new_cr() {
    let a = assembly("", "");
    let mut runtime = a.blueprint.spec.runtime.clone();
    runtime.finalizers.names = vec!["example.com/drain".into()];
    let mut fx = Recorder::new(Some("ns".into()));
    run_pass_with(&a, &runtime, &cr(json!({"phase": "on"})), &mut fx).expect("pass");
    assert_eq!(
        fx.metadata_of(meta::FINALIZER_MANAGER)
            .map(|m| m.finalizers.clone()),
        Some(vec![
            meta::FINALIZER.to_string(),
            "example.com/drain".into()
        ])
    );
}
