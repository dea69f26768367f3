//! The Request a reconciler is sent: `reconcile.external` calls run, `reconcile.args`
//! rendered, excluded paths stripped from the CR. The remote reconciler's HTTP body is this
//! Request's serde form.

use serde_json::Value;

use super::{ReconcilePlan, StepError, template};
use inrun_contract::Request;
use inrun_template::Context;

impl ReconcilePlan {
    /// The prepare step's calls and the Request: `reconcile.external` calls run (their
    /// results are `.external.<name>` in args), then [`ReconcilePlan::request`].
    ///
    /// # Errors
    /// [`StepError::External`] naming the call that failed; [`StepError::Template`] when
    /// `reconcile.args` fail to render.
    pub async fn prepare(
        &self,
        object: &Value,
        target: Option<&str>,
        finalizing: bool,
    ) -> Result<Request, StepError> {
        let external = if self.external.is_empty() {
            None
        } else {
            let ctx = Context::new(object).with_target(target);
            let namespace = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let results = self.external.run(&ctx, namespace).await;
            Some(results.map_err(|e| StepError::External(Box::new(e)))?)
        };
        self.request(object, target, finalizing, external)
    }

    /// The Request for a CR: args rendered, excluded paths stripped.
    ///
    /// # Errors
    /// [`StepError::Template`] when `reconcile.args` fail to render.
    pub fn request(
        &self,
        object: &Value,
        target: Option<&str>,
        finalizing: bool,
        external: Option<Value>,
    ) -> Result<Request, StepError> {
        let mut ctx = Context::new(object).with_target(target);
        if let Some(ext) = &external {
            ctx = ctx.with_external(ext.clone());
        }
        let args = self.args.render(&ctx).map_err(template("reconcile.args"))?;
        let mut visible = object.clone();
        inrun_blueprint::FieldPath::remove_all(&self.spec.request.object.exclude, &mut visible);
        let mut req = Request::for_object(visible, args);
        req.finalizing = finalizing;
        req.target = target.map(str::to_string);
        req.external = external;
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use crate::assemble::testing::assembly;
    use serde_json::json;

    #[test]
    fn the_request_leaves_out_excluded_paths_even_keys_with_dots() {
        let a = assembly(
            "        request:\n          object:\n            exclude:\n              - .metadata.managedFields\n              - .status\n              - .spec.nothing\n              - .metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\"\n",
        );
        let cr = json!({
            "apiVersion": "t.inrun.dev/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "n", "managedFields": [1], "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "x"}},
            "spec": {"size": 1},
            "status": {"x": 1},
        });
        let req = a.crds()[0]
            .default
            .request(&cr, None, false, None)
            .expect("request");
        assert_eq!(
            req.object,
            json!({
                "apiVersion": "t.inrun.dev/v1", "kind": "Thing",
                "metadata": {"name": "a", "namespace": "n", "annotations": {"team": "x"}},
                "spec": {"size": 1},
            })
        );
    }
}
