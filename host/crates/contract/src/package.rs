//! The values of an infrastructure package (the `package` world of
//! `inrun:reconciler@0.2.0`), as plain Rust: what the host passes to every call and what
//! each call answers.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The custom resource type a package serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Kind.
    pub kind: String,
}

/// Which of a package's two calls that change infrastructure: both answer a workflow
/// outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `converge`: make the thing as the spec says.
    Converge,
    /// `delete`: remove the thing.
    Delete,
}

impl Change {
    /// The call's name: `converge` or `delete`.
    pub fn name(self) -> &'static str {
        match self {
            Change::Converge => "converge",
            Change::Delete => "delete",
        }
    }
}

/// What woke the CR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// The CR is new, or its generation changed.
    Changed,
    /// `spec.reconcileInterval` passed.
    Interval,
    /// The `inrun.dev/reconcile-request` annotation changed.
    Requested,
    /// A retry after a failure, or a re-observation of unready infrastructure.
    Retry,
    /// Deletion with `deletionPolicy: Delete`.
    Deleting,
}

impl Event {
    /// The lowercase name, as logs show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Changed => "changed",
            Event::Interval => "interval",
            Event::Requested => "requested",
            Event::Retry => "retry",
            Event::Deleting => "deleting",
        }
    }
}

/// What every call receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// `spec.config` (an empty object when absent).
    pub config: Map<String, Value>,
    /// `spec.config.profile`, else `<namespace>--<name>`.
    pub profile: String,
    /// `spec.state`.
    pub state: String,
    /// What woke the CR.
    pub event: Event,
    /// The CR's type.
    pub resource: Descriptor,
    /// The CR's namespace.
    pub namespace: Option<String>,
    /// The CR's name.
    pub name: String,
}

/// Who owns the infrastructure and which thing it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The backend boundary.
    pub boundary: String,
    /// The credentials profile.
    pub profile: String,
    /// What identifies the thing within the boundary.
    pub state: Vec<Option<String>>,
}

/// What `observe` saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Observation {
    /// The thing exists.
    pub exists: bool,
    /// It is as the options describe.
    pub matches: bool,
    /// It is usable.
    pub ready: bool,
}

/// How a `converge` or `delete` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Progress {
    /// Done; observe again.
    Completed,
    /// Still running on the backend; observe again later.
    Pending,
    /// Did not work; retry with backoff.
    Failed,
}

/// A workflow outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    /// How it went.
    pub progress: Progress,
    /// Text for the host's log only.
    pub detail: Option<String>,
}

impl Workflow {
    /// Done.
    pub fn completed() -> Self {
        Workflow {
            progress: Progress::Completed,
            detail: None,
        }
    }

    /// Started; still running on the backend.
    pub fn pending() -> Self {
        Workflow {
            progress: Progress::Pending,
            detail: None,
        }
    }

    /// Did not work; `detail` says why (for the host's log).
    pub fn failed(detail: impl Into<String>) -> Self {
        Workflow {
            progress: Progress::Failed,
            detail: Some(detail.into()),
        }
    }
}
