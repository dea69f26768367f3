//! The declarative reconciler: `onCreate`, `onReconcile` and `onDelete` templates rendered
//! against the CR, its args and external results.

use async_trait::async_trait;
use serde_json::Value;

use super::{ReconcileError, Reconciler, ReconcilerKind, finish};
use inrun_contract::{CREATE_ONLY_ANNOTATION, Outcome, Request};
use inrun_template::{CompiledDocuments, CompiledValue, Context, Engine, TemplateError};

/// One resource template: an object whose strings may be templates, or a whole YAML
/// template string that renders to one or more documents.
#[derive(Debug)]
enum ResourceTemplate {
    Value(CompiledValue),
    Documents(CompiledDocuments),
}

impl ResourceTemplate {
    fn compile(engine: &Engine, entry: &Value) -> Result<Self, TemplateError> {
        Ok(match entry {
            Value::String(text) => ResourceTemplate::Documents(engine.compile_documents(text)?),
            other => ResourceTemplate::Value(engine.compile_value(other)?),
        })
    }

    fn render_into(&self, ctx: &Context, out: &mut Vec<Value>) -> Result<(), TemplateError> {
        match self {
            ResourceTemplate::Value(t) => match t.render(ctx)? {
                Value::Null => {}
                Value::Array(items) => out.extend(items.into_iter().filter(|v| !v.is_null())),
                v => out.push(v),
            },
            ResourceTemplate::Documents(t) => out.extend(t.render(ctx)?),
        }
        Ok(())
    }
}

/// A named list of resource templates (`reconcile.onReconcile`, ...).
#[derive(Debug, Default)]
struct TemplateList {
    field: String,
    items: Vec<ResourceTemplate>,
}

impl TemplateList {
    fn compile(engine: &Engine, field: &str, entries: &[Value]) -> Result<Self, DeclarativeError> {
        let items = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                ResourceTemplate::compile(engine, e).map_err(|source| DeclarativeError {
                    field: format!("{field}[{i}]"),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(TemplateList {
            field: field.to_string(),
            items,
        })
    }

    fn render(&self, ctx: &Context, out: &mut Vec<Value>) -> Result<(), ReconcileError> {
        for (i, item) in self.items.iter().enumerate() {
            item.render_into(ctx, out)
                .map_err(|source| ReconcileError::Template {
                    what: format!("{}[{i}]", self.field),
                    source,
                })?;
        }
        Ok(())
    }
}

/// A template in a Blueprint that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("{field}")]
pub struct DeclarativeError {
    /// Where, e.g. `reconcile.onReconcile[1]`.
    pub field: String,
    /// The template error.
    #[source]
    pub source: TemplateError,
}

/// Templates are the reconciler.
#[derive(Debug, Default)]
pub struct Declarative {
    on_create: TemplateList,
    on_reconcile: TemplateList,
    on_delete: TemplateList,
}

impl Declarative {
    /// Compiles the three template lists; `prefix` is the reconcile block's field path.
    ///
    /// # Errors
    /// [`DeclarativeError`] for the first template with a syntax error.
    pub fn compile(
        engine: &Engine,
        prefix: &str,
        on_create: &[Value],
        on_reconcile: &[Value],
        on_delete: &[Value],
    ) -> Result<Self, DeclarativeError> {
        Ok(Declarative {
            on_create: TemplateList::compile(engine, &format!("{prefix}.onCreate"), on_create)?,
            on_reconcile: TemplateList::compile(
                engine,
                &format!("{prefix}.onReconcile"),
                on_reconcile,
            )?,
            on_delete: TemplateList::compile(engine, &format!("{prefix}.onDelete"), on_delete)?,
        })
    }

    /// The templates' context for a request.
    pub fn context(req: &Request) -> Context {
        let mut ctx = Context::new(&req.object)
            .with_args(req.args.clone())
            .with_target(req.target.as_deref());
        if let Some(external) = &req.external {
            ctx = ctx.with_external(external.clone());
        }
        ctx
    }

    /// Renders without the contract's final checks, for hooks that continue from here.
    pub(super) fn render(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        let ctx = Self::context(req);
        let mut resources = Vec::new();
        if req.finalizing {
            self.on_delete.render(&ctx, &mut resources)?;
        } else {
            self.on_create.render(&ctx, &mut resources)?;
            for r in &mut resources {
                mark_create_only(r);
            }
            self.on_reconcile.render(&ctx, &mut resources)?;
        }
        Ok(Outcome {
            resources,
            ..Outcome::default()
        })
    }
}

fn mark_create_only(resource: &mut Value) {
    if let Some(obj) = resource.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            let ann = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(ann) = ann.as_object_mut() {
                ann.insert(CREATE_ONLY_ANNOTATION.into(), Value::String("true".into()));
            }
        }
    }
}

#[async_trait]
impl Reconciler for Declarative {
    fn kind(&self) -> ReconcilerKind {
        ReconcilerKind::Declarative
    }

    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError> {
        finish(self.render(req)?, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(finalizing: bool) -> Request {
        let mut req = Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "web", "namespace": "team-a"},
                   "spec": {"image": "nginx:1.27", "replicas": 2}}),
            json!({"port": 8080}),
        );
        req.finalizing = finalizing;
        req
    }

    fn declarative() -> Declarative {
        let engine = Engine::new();
        Declarative::compile(
            &engine,
            "reconcile",
            &[json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "{{ .metadata.name }}-seed"}, "data": {"a": "b"}})],
            &[
                json!({"type": "deployment", "fields": {"image": "{{ .spec.image }}",
                       "replicas": "{{ .spec.replicas }}", "port": "{{ .args.port }}"}}),
                json!("{% for i in range(2) %}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{{ i }}\n{% endfor %}"),
            ],
            &[json!({"type": "job", "fields": {"name": "{{ .metadata.name }}-backup", "image": "busybox"}})],
        )
        .unwrap()
    }

    #[tokio::test]
    async fn renders_on_create_then_on_reconcile_and_expands_intents() {
        let out = declarative().reconcile(&request(false)).await.unwrap();
        let names: Vec<_> = out
            .resources
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["web-seed", "web", "cm-0", "cm-1"]);
        assert_eq!(
            out.resources[0]["metadata"]["annotations"][CREATE_ONLY_ANNOTATION],
            "true"
        );
        assert_eq!(out.resources[1]["kind"], "Deployment");
        assert_eq!(out.resources[1]["spec"]["replicas"], 2);
        assert_eq!(out.resources[1]["metadata"]["namespace"], "team-a");
    }

    #[tokio::test]
    async fn finalizing_renders_only_on_delete() {
        let out = declarative().reconcile(&request(true)).await.unwrap();
        assert_eq!(out.resources.len(), 1);
        assert_eq!(out.resources[0]["kind"], "Job");
        assert_eq!(out.resources[0]["metadata"]["name"], "web-backup");
    }

    #[test]
    fn a_template_syntax_error_names_the_field() {
        let err = Declarative::compile(
            &Engine::new(),
            "reconcile",
            &[],
            &[json!({"a": "{{ x "})],
            &[],
        )
        .unwrap_err();
        assert_eq!(err.field, "reconcile.onReconcile[0]");
    }
}
