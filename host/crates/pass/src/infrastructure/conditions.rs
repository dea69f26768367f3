//! The status a package pass writes: its `Ready` and `Reconciling` conditions
//! ([`Conditions`]) beside the stored identity and the CRD's own emitted fields.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::RECONCILE_REQUEST;
use super::identity::Stored;
use super::spec::annotation;
use crate::pass::Pass;
use crate::reason::ConditionReason;
use crate::{meta, status};
use inrun_template::Context;

/// The `Ready` and `Reconciling` conditions a pass ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Conditions {
    /// `Ready` is true.
    pub(super) ready: bool,
    /// `Reconciling` is true.
    pub(super) reconciling: bool,
    /// Both conditions' reason.
    pub(super) reason: ConditionReason,
    /// Both conditions' message.
    pub(super) message: Cow<'static, str>,
}

impl Conditions {
    pub(super) const fn new(
        ready: bool,
        reconciling: bool,
        reason: ConditionReason,
        message: &'static str,
    ) -> Self {
        Conditions {
            ready,
            reconciling,
            reason,
            message: Cow::Borrowed(message),
        }
    }
}

/// What a pass shows while it works on the infrastructure.
pub(super) const RECONCILING: Conditions = Conditions::new(
    false,
    true,
    ConditionReason::Progressing,
    "reconciling the infrastructure",
);

/// The status a pass writes: the stored identity, the request handled, the generation it
/// read, and both conditions (transition times kept while a condition's status holds).
pub(super) fn desired(
    p: &Pass<'_>,
    view: &Value,
    stored: &Stored,
    c: &Conditions,
) -> Map<String, Value> {
    let now = meta::format_time(p.now);
    // The CRD's `emit.status` and `emit.conditions`, as for any CR; the package steps' own
    // fields win. A template that fails renders nothing here (the host's log says why).
    let mut fields = match p.crd.status(&Context::new(view), None) {
        Ok(emitted) => emitted,
        Err(e) => {
            tracing::warn!(error = %inrun_contract::errors::chain(&e), "emit.status of a package CR did not render");
            Map::new()
        }
    };
    for (k, v) in [
        ("profile", &stored.profile),
        ("boundary", &stored.boundary),
        ("identity", &stored.identity),
    ] {
        if let Some(v) = v {
            fields.insert(k.into(), json!(v));
        }
    }
    if let Some(request) = annotation(view, RECONCILE_REQUEST) {
        fields.insert("lastHandledReconcileAt".into(), json!(request));
    }
    let truth = |b: bool| if b { "True" } else { "False" };
    let ready = status::Ready {
        status: truth(c.ready),
        reason: c.reason,
        message: c.message.to_string(),
    };
    let mut fields = status::desired(view, fields, &status::Verdict::ready(ready), &now);
    let reconciling = status::condition(
        view,
        "Reconciling",
        truth(c.reconciling),
        c.reason.as_str(),
        &c.message,
        &now,
    );
    if let Some(Value::Array(conditions)) = fields.get_mut("conditions") {
        conditions.retain(|c| c["type"] != "Reconciling");
        conditions.push(reconciling);
    }
    fields
}
