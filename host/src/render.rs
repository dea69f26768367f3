//! `inrun render`: the reconcile step for one CR with no cluster — what would be applied,
//! the status, labels, annotations, requeue and cleanup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::assemble::{Assembly, PassError};
use crate::contract::Outcome;
use crate::reconcilers::{ReconcileError, ReconcilerKind};
use crate::template::Context;

/// A CR read from a file.
#[derive(Debug, Clone)]
pub struct RenderInput {
    /// The CR.
    pub object: Value,
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
    Pass(#[from] PassError),
    /// The reconciler failed.
    #[error("reconcile failed")]
    Reconcile(#[from] ReconcileError),
}

impl RenderInput {
    /// Reads a CR from a YAML or JSON file.
    ///
    /// # Errors
    /// [`RenderError::Read`] or [`RenderError::Parse`].
    pub fn from_file(path: &Path) -> Result<Self, RenderError> {
        let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let object: Value =
            serde_yaml_ng::from_str(&text).map_err(|source| RenderError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(RenderInput { object })
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
    /// The CR's status after `emit.status` and the Result.
    pub status: Map<String, Value>,
    /// Labels set on the CR.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations set on the CR.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// When it would run again (`30s`), if at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after: Option<String>,
    /// Whether that requeue would hold a deleting CR.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub requeue_holds: bool,
    /// Delete the CR after this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_after: Option<String>,
}

/// Runs the reconcile step for one CR: target, validation, gate (reported, not enforced),
/// args, the reconciler, status, and the next requeue.
///
/// # Errors
/// [`RenderError`] naming the step that failed.
pub async fn render(
    assembly: &Assembly,
    input: RenderInput,
    target: Option<&str>,
    finalizing: bool,
) -> Result<RenderOutput, RenderError> {
    let object = input.object;
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let crd = assembly
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
        })?;
    let target = crd.target_of(&object, target);
    let plan = crd.plan_for(target.as_deref())?;
    let ctx = Context::new(&object).with_target(target.as_deref());
    crd.validate(&object, &ctx)?;
    let gated = if finalizing { None } else { crd.gate(&ctx)? };
    let req = plan.prepare(&object, target.as_deref(), finalizing).await?;
    let outcome: Outcome = plan.reconciler.reconcile(&req).await?;
    if !finalizing {
        plan.fence(
            &outcome,
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )?;
    }
    let external = req
        .external
        .clone()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let status = crd.status(
        &Context::new(&object)
            .with_args(req.args.clone())
            .with_external(external),
        Some(&outcome),
    )?;
    let mut updated = object.clone();
    updated["status"] = Value::Object(status.clone());
    let next = plan.next(
        &outcome,
        &Context::new(&updated).with_args(req.args.clone()),
    )?;
    Ok(RenderOutput {
        crd: crd.spec.crd_name(),
        reconciler: plan.reconciler.kind(),
        target,
        gated,
        resources: outcome.resources,
        status,
        labels: outcome.labels,
        annotations: outcome.annotations,
        requeue_after: next.after.map(crate::duration::format),
        requeue_holds: next.holds,
        cleanup_after: outcome.cleanup.map(|c| crate::duration::format(c.after)),
    })
}
