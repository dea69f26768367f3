//! `inrun render`: the pass for one CR with no cluster — [`crate::run`](fn@crate::run)
//! with effects that print instead of writing: what would be applied, the status, labels,
//! annotations, events, requeue and cleanup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::effects::EffectError;
use crate::failure::Failure;
use crate::meta;
use crate::package::Infrastructure;
use crate::pass::{Pass, route};
use crate::reason::{ConditionReason, Reason};
use crate::record::Recorder;
use crate::run::run;
use inrun_blueprint::RuntimeSpec;
use inrun_reconcilers::assemble::Assembly;
use inrun_reconcilers::plan::{CrdPlan, ReconcilePlan, StepError};
use inrun_reconcilers::{ReconcileError, ReconcilerKind};

/// The type of [`RenderInput::now`].
pub use k8s_openapi::jiff::Timestamp;

/// A CR read from a file, and what the cluster is taken to hold.
#[derive(Debug, Clone)]
pub struct RenderInput {
    /// The CR.
    pub object: Value,
    /// Objects as the cluster has them (`--observed`): children are judged on these;
    /// `None`: a child whose readiness reads its status is Unknown.
    pub observed: Option<Vec<Value>>,
    /// The moment the pass runs at (a deletion timestamp, times left, cleanup); `None`:
    /// now, to the whole second, as the API server writes times.
    pub now: Option<Timestamp>,
}

/// Why a render failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The CR file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CR file is not YAML or JSON.
    #[error("{}: not a YAML or JSON object", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// No CRD in the Blueprint has this apiVersion and kind.
    #[error(
        "the Blueprint declares no CRD for apiVersion {api_version:?} kind {kind:?}; it declares: {known}"
    )]
    UnknownKind {
        /// The CR's apiVersion.
        api_version: String,
        /// The CR's kind.
        kind: String,
        /// What the Blueprint declares.
        known: String,
    },
    /// A step before or after the reconciler failed.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The reconciler failed.
    #[error("reconcile failed")]
    Reconcile(#[from] ReconcileError),
    /// The CR would not be reconciled: it breaks the Blueprint's rules or names an unknown
    /// serve target.
    #[error("{0}")]
    Invalid(String),
    /// Writing failed (never offline; kept so every failure of the pass has a place).
    #[error(transparent)]
    Effect(#[from] EffectError),
    /// An infrastructure package's call failed.
    #[error("{reason}: {detail}")]
    Package {
        /// The generic reason.
        reason: ConditionReason,
        /// What the package said.
        detail: String,
    },
}

impl RenderError {
    /// Whether it keeps the CR from being reconciled at all (its rules, a serve target, a
    /// kind outside `managedResources`), rather than the reconciler failing on it: a plan
    /// lists such a CR as blocked, not as a failure of the version.
    pub fn holds_back(&self) -> bool {
        match self {
            RenderError::Invalid(_) => true,
            RenderError::Step(step) => matches!(
                step,
                StepError::Invalid(_)
                    | StepError::Forbidden { .. }
                    | StepError::UnknownTarget { .. }
                    | StepError::UndeclaredType { .. }
            ),
            _ => false,
        }
    }
}

impl From<Failure> for RenderError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Reconcile(e) => RenderError::Reconcile(e),
            Failure::Step(e) => RenderError::Step(e),
            Failure::Effect(e) => RenderError::Effect(e),
            Failure::Package { reason, detail } => RenderError::Package { reason, detail },
        }
    }
}

impl RenderInput {
    /// Reads a CR from a YAML or JSON file.
    ///
    /// # Errors
    /// [`RenderError::Read`] or [`RenderError::Parse`].
    pub fn from_file(path: &Path) -> Result<Self, RenderError> {
        let text = read(path)?;
        let object: Value =
            serde_yaml_ng::from_str(&text).map_err(|source| RenderError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(RenderInput {
            object,
            observed: None,
            now: None,
        })
    }

    /// The same input with the objects in `path` observed: YAML documents (or JSON), each
    /// an object or a `List` of them.
    ///
    /// # Errors
    /// [`RenderError::Read`] or [`RenderError::Parse`].
    pub fn observing(mut self, path: &Path) -> Result<Self, RenderError> {
        let text = read(path)?;
        let mut objects = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).map_err(|source| RenderError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
            match value {
                Value::Null => {}
                Value::Object(mut o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                    if let Some(Value::Array(items)) = o.remove("items") {
                        objects.extend(items);
                    }
                }
                other => objects.push(other),
            }
        }
        self.observed = Some(objects);
        Ok(self)
    }
}

/// A file's text; `-` is standard input.
fn read(path: &Path) -> Result<String, RenderError> {
    let failed = |source| RenderError::Read {
        path: path.to_path_buf(),
        source,
    };
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(failed)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(failed)
    }
}

/// What `inrun render` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderOutput {
    /// `plural.group` of the CRD.
    pub crd: String,
    /// How it is reconciled.
    pub reconciler: ReconcilerKind,
    /// The serve target used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Why the CR would wait, when a `preReconcile` condition does not hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gated: Option<String>,
    /// Objects that would be applied.
    pub resources: Vec<Value>,
    /// The CR's status after `emit.status` and the Result (without the conditions and
    /// `observedGeneration` the host adds: see `ready`).
    pub status: Map<String, Value>,
    /// The `Ready` condition the pass would set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyOutput>,
    /// Every condition the pass would write, `Ready` and the reconciler's own (merged by
    /// type), without their transition times (those are the server's moment).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Value>,
    /// Labels set on the CR.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations set on the CR.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Events the pass would record, as `Reason: note`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// When it would run again (`30s`), if at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after: Option<String>,
    /// Whether that requeue would hold a deleting CR.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub requeue_holds: bool,
    /// Delete the CR after this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_after: Option<String>,
    /// For a package: its calls in order (`observe: exists, not matching`), and the
    /// `converge` or `delete` the host would run, which render never runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub infrastructure: Vec<String>,
    /// For a package: the changes to the infrastructure the host would run (`converge`,
    /// `delete`), in order; render runs none of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_run: Vec<String>,
}

/// A package as `inrun render` calls it: reads (`validate`, `identity`, `observe`) go
/// through; `converge` and `delete` change the infrastructure, so they are only noted, and
/// answer `pending` (the host would observe again later).
struct DryRun<'a> {
    package: &'a dyn crate::package::Infrastructure,
    calls: std::sync::Mutex<Vec<String>>,
    /// The changes it would have run.
    changes: std::sync::Mutex<Vec<String>>,
}

impl DryRun<'_> {
    /// The calls noted, and the changes it would have run, in order.
    fn calls(self) -> (Vec<String>, Vec<String>) {
        let take = |m: std::sync::Mutex<Vec<String>>| {
            m.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        (take(self.calls), take(self.changes))
    }

    fn note(&self, call: String) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
    }
}

#[async_trait::async_trait]
impl crate::package::Infrastructure for DryRun<'_> {
    async fn validate(
        &self,
        opts: &inrun_contract::package::Options,
    ) -> Result<Vec<String>, crate::package::CallFailed> {
        let answer = self.package.validate(opts).await;
        match &answer {
            Ok(problems) if problems.is_empty() => self.note("validate: valid".into()),
            Ok(problems) => self.note(format!("validate: {}", problems.join("; "))),
            Err(e) => self.note(format!("validate failed: {e}")),
        }
        answer
    }
    async fn identity(
        &self,
        opts: &inrun_contract::package::Options,
    ) -> Result<inrun_contract::package::Identity, crate::package::CallFailed> {
        let answer = self.package.identity(opts).await;
        match &answer {
            Ok(id) => self.note(format!(
                "identity: boundary {}, profile {}, hash {}",
                id.boundary,
                id.profile,
                crate::infrastructure::identity_hash(&id.state)
            )),
            Err(e) => self.note(format!("identity failed: {e}")),
        }
        answer
    }
    async fn observe(
        &self,
        opts: &inrun_contract::package::Options,
    ) -> Result<inrun_contract::package::Observation, crate::package::CallFailed> {
        let answer = self.package.observe(opts).await;
        match &answer {
            Ok(o) => self.note(format!(
                "observe: exists {}, matches {}, ready {}",
                o.exists, o.matches, o.ready
            )),
            Err(e) => self.note(format!("observe failed: {e}")),
        }
        answer
    }
    async fn workflow(
        &self,
        change: inrun_contract::package::Change,
        _opts: &inrun_contract::package::Options,
    ) -> Result<inrun_contract::package::Workflow, crate::package::CallFailed> {
        self.note(format!("{}: would run (not offline)", change.name()));
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(change.name().to_string());
        Ok(inrun_contract::package::Workflow::pending())
    }
}

/// The `Ready` condition, as `inrun render` prints it.
#[derive(Debug, Serialize)]
pub struct ReadyOutput {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

/// Runs the pass for one CR offline: gate, prepare, reconcile and every decision after it,
/// with writes printed instead of made. `finalizing` runs the deletion steps instead, as
/// for a CR with a deletion timestamp.
///
/// # Errors
/// [`RenderError`] naming the step that failed, or why the CR would not be reconciled.
pub async fn render(
    assembly: &Assembly,
    input: RenderInput,
    target: Option<&str>,
    finalizing: bool,
) -> Result<RenderOutput, RenderError> {
    let mut object = input.object;
    let crd = crd_of(assembly, &object)?;
    // Whole seconds: the deletion timestamp below is written to the second, and the time
    // left before a finalizer timeout must not depend on the sub-second the render ran.
    let now = input.now.unwrap_or_else(|| {
        let now = Timestamp::now();
        Timestamp::from_second(now.as_second()).unwrap_or(now)
    });
    // Offline there is no later pass to resync.
    let runtime = RuntimeSpec {
        resync: None,
        ..assembly.blueprint.spec.runtime.clone()
    };
    let (target, plan) = route(crd, &object, target);
    if finalizing {
        being_deleted(&mut object, plan, now);
    }
    let mut fx = Recorder::new(
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string),
    );
    fx.observed = input.observed;
    let dry = plan.package.as_deref().map(|package| DryRun {
        package,
        calls: std::sync::Mutex::default(),
        changes: std::sync::Mutex::default(),
    });
    let p = Pass {
        crd,
        runtime: &runtime,
        object: &object,
        target: target.as_deref(),
        now,
        infrastructure: dry.as_ref().map(|d| d as &dyn Infrastructure),
        bucket_label: None,
    };
    let done = run(p, &mut fx).await?;
    let (infrastructure, would_run) = dry.map(DryRun::calls).unwrap_or_default();
    // A package's own validation is shown with its problems (in `infrastructure`): offline
    // they are the developer's to read.
    if let Some((_, message)) = fx
        .events
        .iter()
        .find(|(r, _)| *r == Reason::Invalid)
        .filter(|_| infrastructure.is_empty())
    {
        return Err(RenderError::Invalid(message.clone()));
    }
    let gated = fx
        .events
        .iter()
        .find(|(r, _)| *r == Reason::Gated)
        .map(|(_, m)| m.clone());
    let shown = Shown::of(&fx, &object);
    let decorated = fx
        .metadata_of(meta::RECONCILER_MANAGER)
        .cloned()
        .unwrap_or_default();
    let mut annotations = decorated.annotations;
    annotations.remove(meta::CLEANUP_AT);
    // A retry starts at the package's first retry delay.
    let after = done
        .after
        .or(done.retry.then_some(crate::infrastructure::RETRY_BASE));
    let requeue_after = after
        .filter(|_| gated.is_none())
        .map(inrun_contract::duration::format);
    Ok(RenderOutput {
        crd: crd.spec.crd_name(),
        reconciler: plan.reconciler.kind(),
        target,
        gated,
        resources: std::mem::take(&mut fx.applied),
        status: shown.status,
        ready: shown.ready,
        conditions: shown.conditions,
        labels: decorated.labels,
        annotations,
        events: events(&fx),
        requeue_after,
        requeue_holds: done.holds,
        cleanup_after: done.cleanup.map(inrun_contract::duration::format),
        infrastructure,
        would_run,
    })
}

/// The CRD plan for `object`'s apiVersion and kind.
fn crd_of<'a>(assembly: &'a Assembly, object: &Value) -> Result<&'a CrdPlan, RenderError> {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    assembly
        .crd_for(&api_version, &kind)
        .ok_or_else(|| RenderError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
            known: assembly
                .crds()
                .iter()
                .map(|c| format!("{} {}", c.spec.api_version(), c.spec.kind))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// `object` as the API server shows a CR being deleted: a deletion timestamp, and the
/// finalizer of the block that serves it (a package's, on a serve target too).
fn being_deleted(object: &mut Value, plan: &ReconcilePlan, now: Timestamp) {
    object["metadata"]["deletionTimestamp"] = Value::String(meta::format_time(now));
    let finalizer = if plan.package.is_some() {
        crate::infrastructure::FINALIZER
    } else {
        meta::FINALIZER
    };
    object["metadata"]["finalizers"] = serde_json::json!([finalizer]);
}

/// The status as `inrun render` shows it: the fields, the `Ready` condition, and every
/// condition without its transition time.
struct Shown {
    status: Map<String, Value>,
    ready: Option<ReadyOutput>,
    conditions: Vec<Value>,
}

impl Shown {
    /// The status `fx` wrote, or (no status written: the CR already shows what the pass
    /// wants) `object`'s.
    fn of(fx: &Recorder, object: &Value) -> Self {
        let mut status = fx
            .status
            .clone()
            .or_else(|| object.get("status").and_then(Value::as_object).cloned())
            .unwrap_or_default();
        let ready = crate::status::ready_now(&serde_json::json!({"status": status})).map(
            |(status, reason, message)| ReadyOutput {
                status,
                reason,
                message,
            },
        );
        let conditions = match status.remove("conditions") {
            Some(Value::Array(all)) => all
                .into_iter()
                .map(|mut c| {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("lastTransitionTime");
                    }
                    c
                })
                .collect(),
            _ => Vec::new(),
        };
        status.remove("observedGeneration");
        status.remove("reconciledBy");
        Shown {
            status,
            ready,
            conditions,
        }
    }
}

/// The events `fx` recorded, the host's and then the reconciler's, as `Reason: note`.
fn events(fx: &Recorder) -> Vec<String> {
    fx.events
        .iter()
        .map(|(r, n)| format!("{}: {n}", r.as_str()))
        .chain(fx.emitted.iter().map(|e| match e.kind.as_str() {
            "Warning" => format!("{} (Warning): {}", e.reason, e.message),
            _ => format!("{}: {}", e.reason, e.message),
        }))
        .collect()
}
