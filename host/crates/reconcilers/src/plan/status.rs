//! What a pass ends with: the CR's status (`emit.status` under the Result's) and when it
//! runs again (the Result's requeue and `reconcile.requeue`).

use serde_json::{Map, Value};

use super::{CrdPlan, DEFAULT_REQUEUE, Next, ReconcilePlan, RequeuePlan, StepError, template};
use inrun_contract::Outcome;
use inrun_template::Context;

impl CrdPlan {
    /// `emit.status` rendered, then the Result's status merged over it (the Result wins).
    ///
    /// # Errors
    /// [`StepError::Template`] when `emit.status` fails to render.
    pub fn status(
        &self,
        ctx: &Context,
        outcome: Option<&Outcome>,
    ) -> Result<Map<String, Value>, StepError> {
        let mut status = match self
            .emit_status
            .render(ctx)
            .map_err(template("emit.status"))?
        {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(extra) = outcome.and_then(|o| o.status.as_ref()) {
            merge(&mut status, extra);
        }
        // The reconciler's conditions, first come first kept by type: the Result's own,
        // then its status's (over `emit.status`'s), then `emit.conditions`.
        let mut conditions: Vec<Value> = outcome
            .into_iter()
            .flat_map(|o| &o.conditions)
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        if let Some(Value::Array(given)) = status.remove("conditions") {
            conditions.extend(given);
        }
        if let Value::Array(emitted) = self
            .emit_conditions
            .render(ctx)
            .map_err(template("emit.conditions"))?
        {
            conditions.extend(emitted);
        }
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        Ok(status)
    }
}

impl ReconcilePlan {
    /// When to run again after `outcome` succeeded; `ctx` sees the CR with its new status.
    ///
    /// # Errors
    /// [`StepError::Template`] when a `requeue` condition fails to render.
    pub fn next(&self, outcome: &Outcome, ctx: &Context) -> Result<Next, StepError> {
        // The Result: `requeue` asks (and holds a deleting CR); `requeueAfter` alone is a
        // refresh, like a conditional rule's `after` alone.
        let mut next = Next {
            after: outcome
                .requeue_after
                .or(outcome.requeue.then_some(DEFAULT_REQUEUE)),
            holds: outcome.requeue,
        };
        if let Some(rule) = &self.requeue {
            let asked = rule.asked(ctx)?;
            let after = match asked {
                None => rule.after,
                Some(true) => Some(rule.after.unwrap_or(DEFAULT_REQUEUE)),
                Some(false) => None,
            };
            next.holds |= asked == Some(true);
            next.after = [next.after, after].into_iter().flatten().min();
        }
        Ok(next)
    }
}

impl RequeuePlan {
    /// Whether one of the rule's conditions holds; `None` for a rule without conditions (a
    /// plain periodic refresh).
    fn asked(&self, ctx: &Context) -> Result<Option<bool>, StepError> {
        if self.conditions.is_empty() {
            return Ok(None);
        }
        for c in &self.conditions {
            if c.eval(ctx).map_err(template("reconcile.requeue"))? {
                return Ok(Some(true));
            }
        }
        Ok(Some(false))
    }
}

/// Deep merge: objects merge key by key, anything else in `extra` replaces.
fn merge(base: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (k, v) in extra {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(e)) => merge(b, e),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::testing::assembly as plan;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn only_a_requested_requeue_holds_a_deleting_cr() {
        let a = plan("");
        let p = &a.crds()[0].default;
        let ctx = Context::new(&json!({"spec": {}}));
        let refresh = Outcome {
            requeue_after: Some(Duration::from_secs(3)),
            ..Outcome::default()
        };
        assert_eq!(
            p.next(&refresh, &ctx).unwrap(),
            Next {
                after: Some(Duration::from_secs(3)),
                holds: false
            }
        );
        let asked = Outcome {
            requeue: true,
            ..Outcome::default()
        };
        assert_eq!(
            p.next(&asked, &ctx).unwrap(),
            Next {
                after: Some(DEFAULT_REQUEUE),
                holds: true
            }
        );
        assert_eq!(
            p.next(&Outcome::default(), &ctx).unwrap(),
            Next {
                after: None,
                holds: false
            }
        );
    }

    #[test]
    fn a_conditional_rule_holds_only_while_its_condition_is_true() {
        let a = plan("        requeue: {after: 2s, when: \"{{ .spec.hold }}\"}\n");
        let p = &a.crds()[0].default;
        let held = p
            .next(
                &Outcome::default(),
                &Context::new(&json!({"spec": {"hold": true}})),
            )
            .unwrap();
        assert_eq!(
            held,
            Next {
                after: Some(Duration::from_secs(2)),
                holds: true
            }
        );
        let free = p
            .next(
                &Outcome::default(),
                &Context::new(&json!({"spec": {"hold": false}})),
            )
            .unwrap();
        assert_eq!(
            free,
            Next {
                after: None,
                holds: false
            }
        );
        let periodic = plan("        requeue: {after: 30s}\n");
        let n = periodic.crds()[0]
            .default
            .next(&Outcome::default(), &Context::new(&json!({})))
            .unwrap();
        assert_eq!(
            n,
            Next {
                after: Some(Duration::from_secs(30)),
                holds: false
            }
        );
    }

    #[test]
    fn merge_lets_the_result_win_key_by_key() {
        let mut base = json!({"phase": "Pending", "url": {"host": "a", "port": 80}});
        let extra = json!({"phase": "Ready", "url": {"port": 8080}});
        merge(base.as_object_mut().unwrap(), extra.as_object().unwrap());
        assert_eq!(
            base,
            json!({"phase": "Ready", "url": {"host": "a", "port": 8080}})
        );
    }
}
