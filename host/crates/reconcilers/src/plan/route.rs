//! Which reconcile block a CR goes to: its serve target, picked by name or selector.

use serde_json::Value;

use super::{CrdPlan, ReconcilePlan, StepError};
use inrun_blueprint::DEFAULT_TARGET_ANNOTATION;

impl CrdPlan {
    /// The serve target a CR selects: `explicit` if given, else the selector's annotation or
    /// field (default annotation `inrun.dev/target`); `None` when the CRD has no targets or
    /// the CR names none.
    pub fn target_of(&self, object: &Value, explicit: Option<&str>) -> Option<String> {
        if let Some(t) = explicit {
            return Some(t.to_string());
        }
        let serve = self.spec.serve.as_ref()?;
        let picked = match (&serve.selector.field, &serve.selector.annotation) {
            (Some(field), _) => field.get(object),
            (None, annotation) => {
                let key = annotation.as_deref().unwrap_or(DEFAULT_TARGET_ANNOTATION);
                object
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(key))
            }
        };
        picked.and_then(Value::as_str).map(str::to_string)
    }

    /// The reconcile block for `target` (the CRD's own for `None`).
    ///
    /// # Errors
    /// [`StepError::UnknownTarget`].
    pub fn plan_for(&self, target: Option<&str>) -> Result<&ReconcilePlan, StepError> {
        let Some(target) = target else {
            return Ok(&self.default);
        };
        self.targets
            .iter()
            .find(|(n, _)| n == target)
            .map(|(_, p)| p)
            .ok_or_else(|| StepError::UnknownTarget {
                target: target.to_string(),
                known: self
                    .targets
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}
