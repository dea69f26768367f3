//! The package pass's decisions with a scripted package and the recording effects: the
//! order of writes and calls, what each observation leads to, and what never reaches
//! status.

use std::collections::VecDeque;
use std::sync::Mutex;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::identity::Stored;
use super::*;
use crate::record::Recorder;
use crate::{meta, status};
use inrun_contract::package::{Change, Identity, Observation, Options, Workflow};
use inrun_reconcilers::assemble::Assembly;

/// A package that answers from a script and notes every call.
struct Script {
    /// Shared with the recorder, when set: calls and effects in one order.
    journal: Option<std::sync::Arc<Mutex<Vec<String>>>>,
    observations: Mutex<VecDeque<Observation>>,
    converge: Result<Workflow, CallFailed>,
    validation: Vec<String>,
    zone: Option<String>,
    boundary: String,
    calls: Mutex<Vec<String>>,
}

impl Script {
    fn new(observations: &[Observation]) -> Self {
        Script {
            journal: None,
            observations: Mutex::new(observations.iter().copied().collect()),
            converge: Ok(Workflow::completed()),
            validation: Vec::new(),
            zone: None,
            boundary: "acct".into(),
            calls: Mutex::default(),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note(&self, call: &str, opts: &Options) {
        let line = format!("{call} {}", opts.event.as_str());
        if let Some(journal) = &self.journal {
            journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("call {line}"));
        }
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

#[async_trait]
impl Infrastructure for Script {
    async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallFailed> {
        self.note("validate", opts);
        Ok(self.validation.clone())
    }
    async fn identity(&self, opts: &Options) -> Result<Identity, CallFailed> {
        self.note("identity", opts);
        Ok(Identity {
            boundary: self.boundary.clone(),
            profile: opts.profile.clone(),
            state: vec![Some(opts.name.clone()), self.zone.clone()],
        })
    }
    async fn observe(&self, opts: &Options) -> Result<Observation, CallFailed> {
        self.note("observe", opts);
        Ok(self
            .observations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .unwrap_or_default())
    }
    async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallFailed> {
        self.note(change.name(), opts);
        self.converge.clone()
    }
}

const ABSENT: Observation = Observation {
    exists: false,
    matches: false,
    ready: false,
};
const READY: Observation = Observation {
    exists: true,
    matches: true,
    ready: true,
};
const UNREADY: Observation = Observation {
    exists: true,
    matches: true,
    ready: false,
};
const DRIFTED: Observation = Observation {
    exists: true,
    matches: false,
    ready: true,
};

fn assembly() -> Assembly {
    // The package pass reads only the CRD's names from the plan.
    let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - {group: t.inrun.dev, version: v1, kind: Db}\n";
    crate::tests::assemble(text)
}

fn cr(spec: Value) -> Value {
    json!({"apiVersion": "t.inrun.dev/v1", "kind": "Db",
           "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 1},
           "spec": spec})
}

fn pass(object: &Value, pkg: &Script, fx: &mut Recorder) -> Result<Done, Failure> {
    pass_with(object, pkg, fx, |_| {})
}

/// [`pass`] with the Blueprint's runtime settings changed by `tweak`.
fn pass_with(
    object: &Value,
    pkg: &Script,
    fx: &mut Recorder,
    tweak: impl FnOnce(&mut inrun_blueprint::RuntimeSpec),
) -> Result<Done, Failure> {
    let a = assembly();
    let mut runtime = a.blueprint.spec.runtime.clone();
    tweak(&mut runtime);
    let p = Pass {
        crd: &a.crds()[0],
        runtime: &runtime,
        object,
        target: None,
        now: "2026-01-01T00:00:00Z".parse().expect("time"),
        infrastructure: None,
        bucket_label: None,
    };
    futures::executor::block_on(run(p, fx, pkg))
}

/// `object` after the recorded writes: the last status and the finalizers.
fn after(object: &Value, fx: &Recorder) -> Value {
    let mut o = object.clone();
    if let Some(s) = &fx.status {
        o["status"] = Value::Object(s.clone());
    }
    if let Some(m) = fx.metadata_of(meta::FINALIZER_MANAGER) {
        o["metadata"]["finalizers"] = json!(m.finalizers);
    }
    o
}

fn ready(object: &Value) -> (String, String, String) {
    status::ready_now(object).expect("a Ready condition")
}

#[test]
fn common_fields_have_the_seeds_defaults_and_refuse_bad_values_by_field() {
    let c = Common::of(&cr(json!({}))).expect("defaults");
    assert_eq!(
        (c.state.as_str(), c.suspend, c.interval, c.deletion),
        (
            "running",
            false,
            Duration::from_secs(60),
            DeletionPolicy::Retain
        )
    );
    let c = Common::of(&cr(json!({"reconcileInterval": "1500ms", "deletionPolicy": "Delete", "suspend": true, "state": "stopped"})))
        .expect("set");
    assert_eq!(c.interval, Duration::from_millis(1500));
    assert_eq!(c.deletion, DeletionPolicy::Delete);
    let c = Common::of(&cr(json!({"reconcileInterval": "1m30s"}))).expect("Kubernetes syntax");
    assert_eq!(c.interval, Duration::from_secs(90));
    for (spec, field) in [
        (json!({"reconcileInterval": "5x"}), "spec.reconcileInterval"),
        (json!({"reconcileInterval": "0s"}), "spec.reconcileInterval"),
        (
            json!({"reconcileInterval": "250ms"}),
            "spec.reconcileInterval",
        ),
        (json!({"reconcileInterval": "5d"}), "spec.reconcileInterval"),
        (json!({"reconcileInterval": 60}), "spec.reconcileInterval"),
        (json!({"deletionPolicy": "delete"}), "spec.deletionPolicy"),
        (json!({"suspend": "yes"}), "spec.suspend"),
        (json!({"config": []}), "spec.config"),
        (json!({"config": {"profile": 3}}), "spec.config.profile"),
    ] {
        let err = Common::of(&cr(spec.clone())).expect_err("refused");
        assert!(err.starts_with(field), "{spec}: {err}");
    }
}

#[test]
fn the_identity_hash_is_stable_and_unambiguous() {
    let h = identity_hash(&[Some("ns".into()), None, Some("db".into())]);
    assert_eq!(
        h,
        identity_hash(&[Some("ns".into()), None, Some("db".into())])
    );
    assert_eq!(h.len(), 64);
    assert_ne!(
        identity_hash(&[Some("a".into()), Some("b".into())]),
        identity_hash(&[Some("ab".into())])
    );
    assert_ne!(
        identity_hash(&[None]),
        identity_hash(&[Some(String::new())])
    );
    assert_ne!(identity_hash(&[]), identity_hash(&[None]));
    // The encoding is part of the stored state: it must never change.
    assert_eq!(
        identity_hash(&[Some("a".into()), None]),
        "79932a6254534fdde88c5defbff68bc94a3eced37acd60966de17b6619ddade2"
    );
}

#[test]
fn a_new_cr_stores_its_identity_and_finalizer_before_converging_once() {
    let object = cr(json!({"config": {"size": 1}}));
    let pkg = Script::new(&[ABSENT, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        [
            "validate changed",
            "identity changed",
            "observe changed",
            "converge changed",
            "observe changed"
        ]
    );
    // Finalizer and Reconciling (with the identity) before the converge, Ready after.
    assert_eq!(
        fx.steps,
        [
            "metadata inrun-finalizer",
            "status",
            "status",
            "event Reconciled"
        ]
    );
    assert_eq!(done.after, Some(DEFAULT_INTERVAL));
    assert!(!done.retry);
    let o = after(&object, &fx);
    assert_eq!(o["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(o["status"]["profile"], "ns--a");
    assert_eq!(o["status"]["boundary"], "acct");
    assert_eq!(
        o["status"]["identity"],
        json!(identity_hash(&[Some("a".into()), None]))
    );
    assert_eq!(ready(&o).0, "True");

    // The next check finds it as it is: it writes nothing and converges nothing.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&o, &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        ["validate interval", "identity interval", "observe interval"]
    );
    assert!(fx.steps.is_empty(), "{:?}", fx.steps);
    assert_eq!(done.after, Some(DEFAULT_INTERVAL));
}

fn settled_cr() -> Value {
    let object = cr(json!({"config": {"size": 1}}));
    let pkg = Script::new(&[ABSENT, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    after(&object, &fx)
}

#[test]
fn matching_but_unready_infrastructure_is_observed_again_without_converging() {
    let pkg = Script::new(&[UNREADY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&settled_cr(), &pkg, &mut fx).expect("pass");
    assert!(!pkg.calls().iter().any(|c| c.starts_with("converge")));
    assert!(done.retry);
    let o = after(&settled_cr(), &fx);
    assert_eq!(ready(&o).1, "Progressing");
    // Retried: the event says so.
    let pkg = Script::new(&[UNREADY]);
    pass(&o, &pkg, &mut Recorder::new(Some("ns".into()))).expect("pass");
    assert_eq!(pkg.calls()[2], "observe retry");
}

#[test]
fn drift_is_converged_and_a_suspended_cr_only_observes_it() {
    let pkg = Script::new(&[DRIFTED, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&settled_cr(), &pkg, &mut fx).expect("pass");
    assert!(pkg.calls().contains(&"converge interval".to_string()));

    let mut object = settled_cr();
    object["spec"]["suspend"] = json!(true);
    let pkg = Script::new(&[DRIFTED]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert!(!pkg.calls().iter().any(|c| c.starts_with("converge")));
    assert_eq!(ready(&after(&object, &fx)).1, "Suspended");
    assert_eq!(done.after, Some(DEFAULT_INTERVAL));
}

#[test]
fn a_cr_changed_under_the_first_write_converges_nothing() {
    let object = cr(json!({"config": {"size": 1}}));
    let pkg = Script::new(&[ABSENT]);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.stale = true;
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert!(!pkg.calls().iter().any(|c| c.starts_with("converge")));
    assert_eq!(done.after, Some(crate::pass::STALE_RETRY));
    assert!(fx.status.is_none());
}

#[test]
fn a_failed_converge_shows_a_generic_reason_and_never_the_packages_text() {
    let mut pkg = Script::new(&[ABSENT]);
    pkg.converge = Err("token=hunter2 refused".into());
    let object = cr(json!({"config": {"size": 1}}));
    let mut fx = Recorder::new(Some("ns".into()));
    let err = pass(&object, &pkg, &mut fx).expect_err("failed");
    assert!(matches!(
        err,
        Failure::Package {
            reason: ConditionReason::ConvergeFailed,
            ..
        }
    ));
    assert_eq!(err.condition(), ConditionReason::ConvergeFailed);
    let o = after(&object, &fx);
    assert_eq!(ready(&o).1, "ConvergeFailed");
    let text = serde_json::to_string(&o["status"]).expect("json");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(fx.events.iter().all(|(_, n)| !n.contains("hunter2")));

    // Validation details stay out of status too.
    let mut pkg = Script::new(&[]);
    pkg.validation = vec!["size: hunter2 is not a number".into()];
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    let o = after(&object, &fx);
    assert_eq!(ready(&o).1, "ValidationFailed");
    assert!(
        !serde_json::to_string(&o["status"])
            .expect("json")
            .contains("hunter2")
    );
    assert_eq!(pkg.calls(), ["validate changed"]);
}

#[test]
fn a_call_the_host_stopped_says_why_on_the_cr_but_not_in_the_packages_words() {
    let mut pkg = Script::new(&[ABSENT]);
    pkg.converge = Err(CallFailed {
        cause: Some("the call ran past its deadline of 2s (package.limits.deadline)".into()),
        detail: "plugin infra exceeded its 2s deadline; stderr: token=hunter2".into(),
    });
    let object = cr(json!({"config": {"size": 1}}));
    let mut fx = Recorder::new(Some("ns".into()));
    let err = pass(&object, &pkg, &mut fx).expect_err("failed");
    assert!(matches!(&err, Failure::Package { detail, .. } if detail.contains("hunter2")));
    let o = after(&object, &fx);
    assert_eq!(
        ready(&o),
        (
            "False".to_string(),
            "ConvergeFailed".to_string(),
            "converging the infrastructure failed: the call ran past its deadline of 2s (package.limits.deadline)"
                .to_string()
        )
    );
    assert!(
        fx.events
            .iter()
            .any(|(_, n)| n.contains("ran past its deadline of 2s")),
        "{:?}",
        fx.events
    );
    let text = serde_json::to_string(&o["status"]).expect("json");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn the_host_names_what_stopped_a_call_and_never_what_the_guest_said() {
    use inrun_wasm::{CallError, CallFailure, PluginId};
    let failed = |failure| {
        CallFailed::from(CallError {
            plugin: PluginId {
                name: "infra".into(),
                digest: "d".into(),
            },
            failure,
        })
    };
    let deadline = failed(CallFailure::Deadline(std::time::Duration::from_secs(90)));
    assert_eq!(
        deadline.cause.as_deref(),
        Some("the call ran past its deadline of 1m30s (package.limits.deadline)")
    );
    assert!(deadline.detail.contains("infra"), "{}", deadline.detail);
    let trapped = failed(CallFailure::Trap {
        reason: "unreachable".into(),
        stderr: Some("panicked: token=hunter2".into()),
    });
    assert!(!trapped.cause.expect("a cause").contains("hunter2"));
    assert!(trapped.detail.contains("hunter2"), "the log keeps it all");
    let returned = failed(CallFailure::Returned("token=hunter2".into()));
    assert_eq!(
        returned.cause, None,
        "the package's own words are not shown"
    );
}

#[test]
fn an_identity_that_changes_is_refused_before_any_effect() {
    let mut object = settled_cr();
    object["metadata"]["generation"] = json!(2);
    let mut pkg = Script::new(&[ABSENT]);
    pkg.zone = Some("elsewhere".into());
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(pkg.calls(), ["validate changed", "identity changed"]);
    assert_eq!(ready(&after(&object, &fx)).1, "IdentityChanged");
    // Another boundary (account, region) is other infrastructure too.
    let mut pkg = Script::new(&[ABSENT]);
    pkg.boundary = "other-acct".into();
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(ready(&after(&object, &fx)).1, "IdentityChanged");
    assert!(
        fx.events
            .iter()
            .any(|(_, n)| n.contains("its boundary changed")),
        "{:?}",
        fx.events
    );
}

#[test]
fn a_deletion_acts_on_what_was_created_not_on_what_the_spec_names_now() {
    // The spec was edited to name other infrastructure (refused as IdentityChanged), then
    // the CR deleted: nothing is deleted, the CR says why and keeps its finalizer.
    let object = deleting("Delete");
    let mut pkg = Script::new(&[READY, ABSENT]);
    pkg.zone = Some("elsewhere".into());
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(pkg.calls(), ["identity deleting"]);
    assert_eq!(ready(&after(&object, &fx)).1, "IdentityChanged");
    assert!(fx.events.iter().any(|(r, _)| *r == Reason::DeletionBlocked));
    assert!(fx.metadata_of(meta::FINALIZER_MANAGER).is_none());
    // Restored, it deletes what was created.
    let pkg = Script::new(&[READY, ABSENT]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        [
            "identity deleting",
            "observe deleting",
            "delete deleting",
            "observe deleting"
        ]
    );
}

fn deleting(policy: &str) -> Value {
    let mut object = settled_cr();
    object["spec"]["deletionPolicy"] = json!(policy);
    object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    object
}

#[test]
fn retain_removes_only_the_finalizer_and_calls_nothing() {
    let pkg = Script::new(&[]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&deleting("Retain"), &pkg, &mut fx).expect("pass");
    assert!(pkg.calls().is_empty());
    assert_eq!(fx.steps, ["metadata inrun-finalizer", "event Finalized"]);
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER)
            .is_some_and(|m| m.finalizers.is_empty())
    );
    // The label that says who manages it stays while the CR goes.
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER)
            .is_some_and(|m| m.labels.contains_key(meta::MANAGED_BY.0))
    );
}

#[test]
fn delete_runs_suspended_observes_absence_and_honours_prevent_destroy() {
    let mut object = deleting("Delete");
    object["spec"]["suspend"] = json!(true);
    let pkg = Script::new(&[READY, ABSENT]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        [
            "identity deleting",
            "observe deleting",
            "delete deleting",
            "observe deleting"
        ]
    );
    assert!(
        fx.steps
            .ends_with(&["metadata inrun-finalizer".into(), "event Finalized".into()])
    );

    // Still there after the delete: the finalizer stays; observed again later.
    let pkg = Script::new(&[READY, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert!(done.retry);
    assert!(fx.metadata_of(meta::FINALIZER_MANAGER).is_none());

    object["metadata"]["annotations"] = json!({PREVENT_DESTROY: "true"});
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert!(pkg.calls().is_empty());
    assert_eq!(ready(&after(&object, &fx)).1, "DestroyPrevented");
    assert!(fx.events.iter().any(|(r, _)| *r == Reason::DeletionBlocked));
}

#[test]
fn the_finalizer_settings_release_a_package_cr_and_leave_its_infrastructure() {
    // Held by prevent-destroy, deleted an hour ago.
    let mut object = deleting("Delete");
    object["metadata"]["annotations"] = json!({PREVENT_DESTROY: "true"});
    object["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:00:00Z");
    let hours = |h: u64| Duration::from_secs(h * 3600);
    // Within a 2h timeout: still held, and back when the hour left runs out.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass_with(&object, &pkg, &mut fx, |r| {
        r.finalizers.timeout = Some(hours(2));
    })
    .expect("pass");
    assert_eq!(ready(&after(&object, &fx)).1, "DestroyPrevented");
    assert_eq!(done.after, Some(hours(1)));
    // Past a 10m timeout: released, nothing asked of the package, the timeout told.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&object, &pkg, &mut fx, |r| {
        r.finalizers.timeout = Some(Duration::from_secs(600));
    })
    .expect("pass");
    assert!(pkg.calls().is_empty(), "{:?}", pkg.calls());
    assert!(fx.events.iter().any(|(r, _)| *r == Reason::FinalizeTimeout));
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER)
            .is_some_and(|m| m.finalizers.is_empty())
    );
    // `finalizers.remove`: released at once.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&object, &pkg, &mut fx, |r| r.finalizers.remove = true).expect("pass");
    assert!(pkg.calls().is_empty());
    assert_eq!(fx.steps, ["metadata inrun-finalizer", "event Finalized"]);
}

#[test]
fn with_finalizers_remove_a_package_cr_carries_no_finalizer_so_it_deletes_with_no_host() {
    let remove = |r: &mut inrun_blueprint::RuntimeSpec| r.finalizers.remove = true;
    // A new CR: labelled, no finalizer, converged as usual.
    let object = cr(json!({"config": {"size": 1}}));
    let pkg = Script::new(&[ABSENT, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&object, &pkg, &mut fx, remove).expect("pass");
    let m = fx.metadata_of(meta::FINALIZER_MANAGER).expect("labelled");
    assert!(m.finalizers.is_empty(), "{:?}", m.finalizers);
    assert!(m.labels.contains_key(meta::MANAGED_BY.0));
    assert!(pkg.calls().iter().any(|c| c == "converge changed"));
    let mut settled = after(&object, &fx);
    assert_eq!(settled["metadata"]["finalizers"], json!([]));
    settled["metadata"]["labels"] = json!({meta::MANAGED_BY.0: meta::MANAGED_BY.1});
    // Its next pass writes no metadata.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&settled, &pkg, &mut fx, remove).expect("pass");
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER).is_none(),
        "{:?}",
        fx.steps
    );
    // One an earlier Blueprint finalized: the finalizer is taken off.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&settled_cr(), &pkg, &mut fx, remove).expect("pass");
    let m = fx.metadata_of(meta::FINALIZER_MANAGER).expect("released");
    assert!(m.finalizers.is_empty(), "{:?}", m.finalizers);
}

#[test]
fn a_finalized_package_cr_whose_common_fields_turned_invalid_is_still_deleted_or_released() {
    // `reconcileInterval: 5d` (the schema takes any string): the deletion reads only the
    // deletion policy and config, so it goes on and deletes the infrastructure.
    let mut object = deleting("Delete");
    object["spec"]["reconcileInterval"] = json!("5d");
    object["spec"]["suspend"] = json!("yes");
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass(&object, &pkg, &mut fx).expect("pass");
    assert!(
        pkg.calls().iter().any(|c| c == "delete deleting"),
        "{:?}",
        pkg.calls()
    );
    // An invalid deletion policy: nothing deleted, the CR says why.
    let mut object = deleting("Delete");
    object["spec"]["deletionPolicy"] = json!("delete");
    object["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:00:00Z");
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass_with(&object, &pkg, &mut fx, |r| {
        r.finalizers.timeout = Some(Duration::from_secs(7200));
    })
    .expect("pass");
    assert!(pkg.calls().is_empty(), "{:?}", pkg.calls());
    assert_eq!(ready(&after(&object, &fx)).1, "ValidationFailed");
    assert!(fx.events.iter().any(|(r, _)| *r == Reason::Invalid));
    // Back when the hour left of the timeout runs out...
    assert_eq!(done.after, Some(Duration::from_secs(3600)));
    // ...and released then, or at once with `finalizers.remove`.
    for tweak in [
        (|r: &mut inrun_blueprint::RuntimeSpec| {
            r.finalizers.timeout = Some(Duration::from_secs(600));
        }) as fn(&mut inrun_blueprint::RuntimeSpec),
        |r| r.finalizers.remove = true,
    ] {
        let pkg = Script::new(&[READY]);
        let mut fx = Recorder::new(Some("ns".into()));
        pass_with(&object, &pkg, &mut fx, tweak).expect("pass");
        assert!(pkg.calls().is_empty(), "{:?}", pkg.calls());
        assert!(
            fx.metadata_of(meta::FINALIZER_MANAGER)
                .is_some_and(|m| m.finalizers.is_empty()),
            "{:?}",
            fx.steps
        );
    }
}

#[test]
fn every_effect_that_fails_reaches_the_package_cr_as_ready_false_and_one_warning_event() {
    let new = cr(json!({"config": {"size": 1}}));
    for (object, effect) in [
        (new.clone(), "claim"),
        (new.clone(), "metadata"),
        (new, "status"),
        (deleting("Retain"), "metadata"),
    ] {
        let pkg = Script::new(&[ABSENT, READY]);
        let mut fx = Recorder::new(Some("ns".into()));
        fx.fails = vec![effect];
        let _ = pass(&object, &pkg, &mut fx);
        assert!(
            fx.steps.contains(&format!("{effect} refused")),
            "{effect}: {:?}",
            fx.steps
        );
        let said: Vec<_> = fx
            .events
            .iter()
            .filter(|(r, _)| r.event_type() == "Warning")
            .collect();
        assert_eq!(said.len(), 1, "{effect}: {:?}", fx.events);
        assert!(
            said[0].1.contains("refused by the API server"),
            "{effect}: {said:?}"
        );
        // Nothing was asked of the package past the failed step.
        assert!(
            !pkg.calls().iter().any(|c| c.starts_with("converge")),
            "{effect}"
        );
        if effect != "status" {
            let (status, _, message) = ready(&after(&object, &fx));
            assert_eq!(status, "False", "{effect}");
            assert!(
                message.contains("refused by the API server"),
                "{effect}: {message}"
            );
        }
    }
}

#[test]
fn a_package_cr_gets_the_crds_emitted_status_and_conditions_beside_its_own() {
    let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - {group: t.inrun.dev, version: v1, kind: Db, emit: {status: {size: \"{{ .spec.config.size }}\"}, conditions: [{type: Sized, status: \"{{ .spec.config.size > 0 }}\", reason: Sized, message: sized}]}}\n";
    let a = crate::tests::assemble(text);
    let runtime = a.blueprint.spec.runtime.clone();
    let object = cr(json!({"config": {"size": 3}}));
    let p = Pass {
        crd: &a.crds()[0],
        runtime: &runtime,
        object: &object,
        target: None,
        now: "2026-01-01T00:00:00Z".parse().expect("time"),
        infrastructure: None,
        bucket_label: None,
    };
    let pkg = Script::new(&[ABSENT, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    futures::executor::block_on(run(p, &mut fx, &pkg)).expect("pass");
    let o = after(&object, &fx);
    assert_eq!(o["status"]["size"], 3, "{}", o["status"]);
    assert!(o["status"]["identity"].is_string());
    let types: Vec<&str> = o["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    for t in ["Ready", "Reconciling", "Sized"] {
        assert!(types.contains(&t), "{types:?}");
    }
    assert_eq!(ready(&o).0, "True");
}

#[test]
fn a_package_cr_carries_the_blueprints_finalizer_names_beside_its_own() {
    let object = cr(json!({"config": {"size": 1}}));
    let pkg = Script::new(&[ABSENT, READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    pass_with(&object, &pkg, &mut fx, |r| {
        r.finalizers.names = vec!["example.com/audit".into()];
    })
    .expect("pass");
    let held = fx.metadata_of(meta::FINALIZER_MANAGER).expect("finalizers");
    assert_eq!(held.finalizers, [FINALIZER, "example.com/audit"]);
}

#[test]
fn a_cr_whose_infrastructure_another_cr_holds_changes_nothing_and_deletes_nothing() {
    // Reconciling: refused after identifying, before the finalizer or any effect.
    let object = cr(json!({}));
    let pkg = Script::new(&[ABSENT]);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.held_by = Some("Db ns/other".into());
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert!(
        pkg.calls()
            .iter()
            .all(|c| c.starts_with("validate") || c.starts_with("identity")),
        "{:?}",
        pkg.calls()
    );
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER).is_none(),
        "no finalizer"
    );
    let seen = after(&object, &fx);
    assert_eq!(ready(&seen).1, "IdentityConflict");
    assert!(seen["status"].get("identity").is_none(), "{seen}");
    assert!(
        fx.events.iter().any(|(r, n)| *r == Reason::Invalid
            && n.starts_with("IdentityConflict: Db ns/other already manages")),
        "{:?}",
        fx.events
    );
    assert!(done.after.is_some(), "checked again: the holder may go");

    // Deleting with deletionPolicy Delete: released without a delete call.
    let pkg = Script::new(&[READY]);
    let mut fx = Recorder::new(Some("ns".into()));
    fx.held_by = Some("Db ns/other".into());
    pass(&deleting("Delete"), &pkg, &mut fx).expect("pass");
    assert_eq!(pkg.calls(), ["identity deleting"]);
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER)
            .is_some_and(|m| m.finalizers.is_empty())
    );
    assert!(
        fx.events
            .iter()
            .any(|(r, n)| *r == Reason::Finalized && n.contains("without deleting it")),
        "{:?}",
        fx.events
    );
}

#[test]
fn the_holder_lets_go_of_its_infrastructure_when_it_is_released() {
    let pkg = Script::new(&[]);
    let mut fx = Recorder::new(Some("ns".into()));
    let object = deleting("Retain");
    pass(&object, &pkg, &mut fx).expect("pass");
    let stored = Stored::of(&object);
    assert_eq!(
        fx.unclaimed,
        [(
            stored.boundary.expect("a stored boundary"),
            stored.identity.expect("a stored identity")
        )]
    );
}

#[test]
fn a_pending_converge_is_observed_again_later_and_a_reported_failure_fails_the_step() {
    let object = cr(json!({"config": {"size": 1}}));
    // `pending`: the backend still works; no second observe now, observed again after the
    // retry delay, converged no more meanwhile.
    let mut pkg = Script::new(&[ABSENT]);
    pkg.converge = Ok(Workflow::pending());
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&object, &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        [
            "validate changed",
            "identity changed",
            "observe changed",
            "converge changed"
        ]
    );
    assert!(done.retry, "observed again after the retry delay");
    let o = after(&object, &fx);
    let (status, reason, message) = ready(&o);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Progressing"));
    assert!(message.contains("still working"), "{message}");

    // `failed` with a detail: the step fails (retried with backoff); the detail stays in
    // the host's log.
    let mut pkg = Script::new(&[ABSENT]);
    pkg.converge = Ok(Workflow::failed("quota=hunter2 exceeded"));
    let mut fx = Recorder::new(Some("ns".into()));
    let err = pass(&object, &pkg, &mut fx).expect_err("failed");
    assert_eq!(err.condition(), ConditionReason::ConvergeFailed);
    let o = after(&object, &fx);
    assert_eq!(ready(&o).1, "ConvergeFailed");
    assert!(!o["status"].to_string().contains("hunter2"));
    assert!(fx.events.iter().all(|(_, n)| !n.contains("hunter2")));
}

#[test]
fn a_pending_delete_keeps_the_finalizer_and_a_reported_failure_fails_the_step() {
    let mut pkg = Script::new(&[READY]);
    pkg.converge = Ok(Workflow::pending());
    let mut fx = Recorder::new(Some("ns".into()));
    let done = pass(&deleting("Delete"), &pkg, &mut fx).expect("pass");
    assert_eq!(
        pkg.calls(),
        ["identity deleting", "observe deleting", "delete deleting"]
    );
    assert!(done.retry);
    assert!(
        fx.metadata_of(meta::FINALIZER_MANAGER).is_none(),
        "the finalizer stays"
    );
    assert!(fx.unclaimed.is_empty(), "the thing is still held");

    let mut pkg = Script::new(&[READY]);
    pkg.converge = Ok(Workflow::failed("busy"));
    let mut fx = Recorder::new(Some("ns".into()));
    let err = pass(&deleting("Delete"), &pkg, &mut fx).expect_err("failed");
    assert_eq!(err.condition(), ConditionReason::DeleteFailed);
    assert!(fx.metadata_of(meta::FINALIZER_MANAGER).is_none());
}

#[test]
fn the_identity_and_finalizer_are_stored_before_the_first_call_that_could_create_anything() {
    let journal = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut pkg = Script::new(&[ABSENT, READY]);
    pkg.journal = Some(journal.clone());
    let mut fx = Recorder::new(Some("ns".into()));
    fx.journal = Some(journal.clone());
    pass(&cr(json!({"config": {"size": 1}})), &pkg, &mut fx).expect("pass");
    let order = journal.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let at = |line: &str| {
        order
            .iter()
            .position(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("{line} in {order:?}"))
    };
    let hash = identity_hash(&[Some("a".into()), None]);
    let stored = at(&format!("status stores identity \"{hash}\""));
    // Observing creates nothing; the finalizer and the identity are written before it, so
    // a thing a converge makes is always one the CR can find and delete again.
    assert!(
        at("metadata inrun-finalizer") < at("call observe"),
        "{order:?}"
    );
    assert!(stored < at("call observe"), "{order:?}");
    assert!(stored < at("call converge"), "{order:?}");
}

#[test]
fn a_packages_retries_go_from_one_second_to_one_minute_unless_the_blueprint_says() {
    let a = assembly();
    let runtime = a.blueprint.spec.runtime.clone();
    let floor = |d: Duration| d.max(runtime.min_requeue);
    let mut spec = a.crds()[0].spec.clone();
    // Not a package: runtime.backoff.
    assert_eq!(
        retry_bounds(&spec, &runtime),
        (floor(runtime.backoff.base), floor(runtime.backoff.max))
    );
    spec.reconcile.package =
        Some(serde_json::from_value(json!({"location": "oci://example/db"})).expect("plugin"));
    assert_eq!(
        retry_bounds(&spec, &runtime),
        (floor(RETRY_BASE), floor(RETRY_MAX))
    );
    // A Blueprint's own backoff holds for packages too.
    let mut own = runtime.clone();
    own.backoff.max = Duration::from_secs(10);
    assert_eq!(retry_bounds(&spec, &own).1, floor(Duration::from_secs(10)));
}
