//! A package CR's spec and metadata as the pass reads them: the common spec fields
//! ([`Common`]), the options every call receives, and what woke the CR.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{DEFAULT_INTERVAL, FINALIZER, RECONCILE_REQUEST};
use crate::pass::Pass;
use crate::{meta, status};
use inrun_contract::package::{Descriptor, Event, Options};

/// `spec.deletionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Leave the infrastructure; only the finalizer is removed.
    Retain,
    /// Delete the infrastructure before the CR goes.
    Delete,
}

/// The spec fields every package CR has, with their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// `spec.state` (`running`).
    pub state: String,
    /// `spec.suspend` (false).
    pub suspend: bool,
    /// `spec.reconcileInterval` (`60s`).
    pub interval: Duration,
    /// `spec.deletionPolicy` (`Retain`).
    pub deletion: DeletionPolicy,
    /// `spec.config` (`{}`).
    pub config: Map<String, Value>,
}

impl Common {
    /// Reads the common fields of `object`'s spec.
    ///
    /// # Errors
    /// The field and what is wrong with it (host text: safe for status).
    pub fn of(object: &Value) -> Result<Common, String> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let field = |name: &str| spec.get(name).filter(|v| !v.is_null());
        let state = match field("state") {
            None => "running".to_string(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => return Err("spec.state: must be a non-empty string".into()),
        };
        let suspend = match field("suspend") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("spec.suspend: must be true or false".into()),
        };
        let interval = match field("reconcileInterval") {
            None => DEFAULT_INTERVAL,
            Some(Value::String(s)) => {
                let interval = inrun_contract::duration::parse(s)
                    .map_err(|e| format!("spec.reconcileInterval: {e}"))?;
                // Requeues run no sooner than a second: a shorter interval would not be
                // what it says.
                if interval < Duration::from_secs(1) {
                    return Err(format!(
                        "spec.reconcileInterval: {s} is under 1s, the shortest the host checks at"
                    ));
                }
                interval
            }
            Some(_) => {
                return Err(
                    "spec.reconcileInterval: must be a string like 60s (ms, s, m or h)".into(),
                );
            }
        };
        let deletion = match field("deletionPolicy") {
            None => DeletionPolicy::Retain,
            Some(v) if v == "Retain" => DeletionPolicy::Retain,
            Some(v) if v == "Delete" => DeletionPolicy::Delete,
            Some(_) => return Err("spec.deletionPolicy: must be Retain or Delete".into()),
        };
        let config = match field("config") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err("spec.config: must be an object".into()),
        };
        if config.get("profile").is_some_and(|p| !p.is_string()) {
            return Err("spec.config.profile: must be a string".into());
        }
        Ok(Common {
            state,
            suspend,
            interval,
            deletion,
            config,
        })
    }

    /// The common fields of a CR being deleted: only `deletionPolicy` and `config` decide
    /// what a deletion does, so a field the deletion never reads (`state`, `suspend`,
    /// `reconcileInterval`) that became invalid takes its default instead of freezing the
    /// deletion.
    ///
    /// # Errors
    /// `deletionPolicy` or `config` is invalid (host text: safe for status).
    pub fn for_deletion(object: &Value) -> Result<Common, String> {
        if let Ok(common) = Common::of(object) {
            return Ok(common);
        }
        let mut kept = object.clone();
        if let Some(spec) = kept.get_mut("spec").and_then(Value::as_object_mut) {
            spec.retain(|k, _| k == "deletionPolicy" || k == "config");
        }
        Common::of(&kept)
    }
}

/// The options every call of this pass receives.
pub(super) fn options(p: &Pass<'_>, common: &Common, event: Event) -> Options {
    let spec = &p.crd.spec;
    let namespace = text(p.object, "/metadata/namespace").map(str::to_string);
    let name = text(p.object, "/metadata/name")
        .unwrap_or_default()
        .to_string();
    let profile = match common.config.get("profile").and_then(Value::as_str) {
        Some(p) => p.to_string(),
        None => match &namespace {
            Some(ns) => format!("{ns}--{name}"),
            None => name.clone(),
        },
    };
    Options {
        config: common.config.clone(),
        profile,
        state: common.state.clone(),
        event,
        resource: Descriptor {
            group: spec.group.clone(),
            version: spec.version.clone(),
            plural: spec.plural(),
            kind: spec.kind.clone(),
        },
        namespace,
        name,
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

pub(super) fn generation(object: &Value) -> i64 {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

pub(super) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// What woke the CR, from what the status acknowledged last.
pub(super) fn event(object: &Value) -> Event {
    let status = object.get("status");
    let seen = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    if seen != Some(generation(object)) {
        return Event::Changed;
    }
    let handled = status
        .and_then(|s| s.get("lastHandledReconcileAt"))
        .and_then(Value::as_str);
    if annotation(object, RECONCILE_REQUEST).is_some_and(|r| Some(r) != handled) {
        return Event::Requested;
    }
    match status::ready_now(object) {
        Some((ok, _, _)) if ok == "True" => Event::Interval,
        _ => Event::Retry,
    }
}

/// Whether the CR carries the package finalizer.
pub(super) fn finalized(object: &Value) -> bool {
    meta::has_finalizer(object, FINALIZER)
}
