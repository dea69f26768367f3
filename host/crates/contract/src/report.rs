//! The conditions and events a reconciler asks the host to set and record: what Kubernetes
//! takes as their types and reasons, and the host's own, which a reconciler's may not
//! take. [`Outcome::check`](crate::Outcome::check) holds an outcome's to these rules.

use serde::{Deserialize, Serialize};

/// Conditions only the host sets: a reconciler's condition of one of these types is
/// dropped.
pub const HOST_CONDITIONS: [&str; 2] = ["Reconciled", "Ready"];

/// The reasons of the host's own events; a reconciler's event may not take one, so what
/// the host says cannot be forged.
pub const HOST_EVENT_REASONS: [&str; 19] = [
    "Reconciled",
    "ReconcileError",
    "Pruned",
    "Finalized",
    "FinalizeTimeout",
    "Invalid",
    "Gated",
    "CleanedUp",
    "DeletionBlocked",
    "DeletionFailed",
    "Ready",
    "Progressing",
    "ResourceFailed",
    "Released",
    "BreakingSchemaChange",
    "RolloutStep",
    "RolloutComplete",
    "RolledBack",
    "RolloutPaused",
];

/// Most conditions one Result may set.
pub const MAX_CONDITIONS: usize = 16;

/// Most events one Result may ask for.
pub const MAX_EVENTS: usize = 8;

/// A condition of the reconciler's on the CR, as the Kubernetes API conventions shape it;
/// the host adds `observedGeneration` and `lastTransitionTime`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    /// CamelCase type, e.g. `Degraded`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason; the type when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// A condition of `kind` that is True (`true`) or False, with `reason` and `message`.
    pub fn new(kind: &str, status: bool, reason: &str, message: &str) -> Self {
        Condition {
            kind: kind.to_owned(),
            status: if status { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A condition of `kind` whose status is Unknown.
    pub fn unknown(kind: &str, reason: &str, message: &str) -> Self {
        Condition {
            status: "Unknown".to_owned(),
            ..Condition::new(kind, false, reason, message)
        }
    }

    /// A condition whose status is `truth`, as WIT carries it: `Some(true)` True,
    /// `Some(false)` False, `None` Unknown.
    pub fn of(kind: String, truth: Option<bool>, reason: String, message: String) -> Self {
        let status = match truth {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        Condition {
            kind,
            status: status.to_owned(),
            reason,
            message,
        }
    }

    /// The status as WIT carries it (see [`Condition::of`]).
    pub fn truth(&self) -> Option<bool> {
        match self.status.as_str() {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        }
    }
}

/// An event to record on the CR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Event {
    /// `Normal` (the default) or `Warning`.
    #[serde(rename = "type", default = "normal")]
    pub kind: String,
    /// CamelCase reason, e.g. `BackupStarted`.
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn normal() -> String {
    "Normal".to_owned()
}

impl Event {
    /// A `Normal` event.
    pub fn normal(reason: &str, message: &str) -> Self {
        Event {
            kind: normal(),
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, message: &str) -> Self {
        Event {
            kind: "Warning".to_owned(),
            ..Event::normal(reason, message)
        }
    }

    /// A `Warning` event when `warning`, else a `Normal` one.
    pub fn of(warning: bool, reason: String, message: String) -> Self {
        Event {
            kind: if warning { "Warning" } else { "Normal" }.to_owned(),
            reason,
            message,
        }
    }

    /// Whether it is a `Warning`.
    pub fn is_warning(&self) -> bool {
        self.kind == "Warning"
    }
}

/// Whether `text` is a reason as Kubernetes takes one for a condition or an event:
/// a letter, then letters, digits, `_`, `,` or `:`, not ending in `,` or `:`; at most 128
/// characters (Kubernetes allows 1024 for a condition's, 128 for an event's).
pub fn is_reason(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        && !text.ends_with([',', ':'])
}

/// Whether `text` is a condition type: a reason-like name (`Degraded`), or one under a
/// DNS prefix (`example.com/Degraded`); at most 316 characters.
pub fn is_condition_type(text: &str) -> bool {
    let name = text.rsplit_once('/').map_or(text, |(prefix, name)| {
        if prefix.is_empty()
            || prefix.len() > 253
            || !prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        {
            ""
        } else {
            name
        }
    });
    text.len() <= 316
        && !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
