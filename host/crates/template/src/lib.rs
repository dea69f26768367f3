//! The template engine behind declarative reconcilers, `reconcile.args`, `emit.status` and
//! Blueprint conditions: minijinja, with Go-style paths and typed rendering.
//!
//! ```
//! use inrun_template::{Context, Engine};
//! use serde_json::json;
//!
//! let engine = Engine::new();
//! let args = engine.compile_value(&json!({
//!     "image": "{{ .spec.image }}",
//!     "replicas": "{{ .spec.replicas }}",
//!     "greeting": "hello {{ metadata.name | upper }}",
//! }))?;
//! let cr = json!({"metadata": {"name": "web"}, "spec": {"image": "nginx", "replicas": 3}});
//! let rendered = args.render(&Context::new(&cr))?;
//! assert_eq!(rendered, json!({"image": "nginx", "replicas": 3, "greeting": "hello WEB"}));
//! # Ok::<(), inrun_template::TemplateError>(())
//! ```
//!
//! What templates can rely on:
//!
//! - **Paths**: `{{ .spec.image }}` and `{{ spec.image }}` are the same; the leading dot of
//!   a Go-template path is dropped inside `{{ }}` and `{% %}` (never in string literals).
//! - **Variables**: the CR's top-level fields, plus `args`, `external` and `target` (see
//!   [`Context`]).
//! - **Missing paths** are undefined, not errors: `{{ .spec.missing.deeper }}` renders as
//!   an empty string, or `null` as a typed value. Use `| default(x)` or `| required(msg)`.
//! - **Typed values**: a string that is exactly `{{ expr }}` yields the value (number,
//!   bool, list, map, null); any other template string yields a string.
//! - **Filters**: minijinja's builtins (`default`, `upper`, `tojson`, `join`, ...) plus
//!   `toJson`, `toYaml`, `b64enc`, `b64dec` and `required`.
//! - **Whitespace**: `trim_blocks` and `lstrip_blocks` are on, so a `{% for %}` on its own
//!   line leaves no blank line in YAML output; trailing newlines are kept.
//!
//! Compile once at Blueprint load (syntax errors surface there), render per reconcile.
//!
//! Start reading at [`Engine`] (`engine.rs`); `gopath.rs` turns Go-style paths into
//! minijinja, `compiled.rs` holds what a compile yields.

mod compiled;
mod context;
mod convert;
mod engine;
mod error;
mod filters;
mod gopath;
mod yaml_guard;

pub use compiled::{CompiledCondition, CompiledDocuments, CompiledValue};
pub use context::Context;
pub use engine::Engine;
pub use error::{TemplateError, TemplateOrigin};

#[cfg(test)]
mod tests;
