//! Compiled templates: JSON values with templates inside, YAML documents, conditions.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::context::Context;
use super::convert::{is_truthy, is_truthy_text, to_json};
use super::engine::{Compiled, Engine};
use super::error::{TemplateError, TemplateOrigin};
use super::gopath::{has_template_markers, rewrite, rewrite_expression};

impl Engine {
    /// Compiles every template inside a JSON value: object keys and string values that
    /// contain `{{` or `{%`. Other strings, numbers and the like are constants.
    ///
    /// A string that is exactly one expression (`"{{ .spec.replicas }}"`) renders to the
    /// expression's typed value; any other template string renders to a string.
    ///
    /// # Errors
    ///
    /// [`TemplateError::Compile`] for the first template with a syntax error, with its
    /// path inside `value`.
    pub fn compile_value(&self, value: &Value) -> Result<CompiledValue, TemplateError> {
        Ok(CompiledValue {
            root: self.compile_node(value, &mut String::new())?,
        })
    }

    /// Compiles a multi-line template whose output is one or more YAML documents
    /// (separated by `---`), such as an `onReconcile` resource template.
    ///
    /// # Errors
    ///
    /// [`TemplateError::Compile`] when the template's syntax is wrong.
    pub fn compile_documents(&self, text: &str) -> Result<CompiledDocuments, TemplateError> {
        let origin = TemplateOrigin::new("", text);
        Ok(CompiledDocuments {
            template: self.compile_text(origin, super::yaml_guard::guard(&rewrite(text).text))?,
        })
    }

    /// Compiles a condition: either a template (`"{{ .spec.replicas > 2 }}"`, or text with
    /// `{% %}` blocks whose output is judged) or a bare expression (`spec.replicas > 2`).
    ///
    /// # Errors
    ///
    /// [`TemplateError::Compile`] when the condition's syntax is wrong.
    pub fn compile_condition(&self, text: &str) -> Result<CompiledCondition, TemplateError> {
        let origin = TemplateOrigin::new("", text);
        let template = if has_template_markers(text) {
            self.compile_string(origin, text)?
        } else {
            self.compile_typed(origin, &rewrite_expression(text))?
        };
        Ok(CompiledCondition { template })
    }

    fn compile_string(
        &self,
        origin: TemplateOrigin,
        text: &str,
    ) -> Result<Compiled, TemplateError> {
        let rewritten = rewrite(text);
        match rewritten.expression() {
            Some(expr) => self.compile_typed(origin, expr),
            None => self.compile_text(origin, rewritten.text),
        }
    }

    fn compile_node(&self, value: &Value, path: &mut String) -> Result<Node, TemplateError> {
        let node = match value {
            Value::String(s) if has_template_markers(s) => {
                Node::Template(self.compile_string(TemplateOrigin::new(path, s), s)?)
            }
            Value::Array(items) => {
                let mut nodes = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let len = path.len();
                    let _ = write!(path, "[{index}]");
                    nodes.push(self.compile_node(item, path)?);
                    path.truncate(len);
                }
                Node::Array(nodes)
            }
            Value::Object(map) => {
                let mut entries = Vec::with_capacity(map.len());
                for (key, item) in map {
                    let len = path.len();
                    push_key(path, key);
                    let compiled_key = if has_template_markers(key) {
                        let origin = TemplateOrigin::new(path, key);
                        Key::Template(self.compile_text(origin, rewrite(key).text)?)
                    } else {
                        Key::Const(key.clone())
                    };
                    entries.push((compiled_key, self.compile_node(item, path)?));
                    path.truncate(len);
                }
                Node::Object(entries)
            }
            other => Node::Const(other.clone()),
        };
        Ok(node.folded())
    }
}

/// Appends `key` to a path: `.key` when it reads as a name, `["key"]` otherwise.
fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        let _ = write!(path, "[{key:?}]");
    }
}

/// A JSON value with templates compiled; render it against a [`Context`] many times.
#[derive(Debug)]
pub struct CompiledValue {
    root: Node,
}

#[derive(Debug)]
enum Node {
    Const(Value),
    Template(Compiled),
    Array(Vec<Node>),
    Object(Vec<(Key, Node)>),
}

#[derive(Debug)]
enum Key {
    Const(String),
    Template(Compiled),
}

impl Node {
    /// Turns a subtree without templates into one constant.
    fn folded(self) -> Node {
        match self {
            Node::Array(nodes) if nodes.iter().all(|n| matches!(n, Node::Const(_))) => Node::Const(
                Value::Array(nodes.into_iter().filter_map(Node::into_const).collect()),
            ),
            Node::Object(entries)
                if entries
                    .iter()
                    .all(|(k, n)| matches!((k, n), (Key::Const(_), Node::Const(_)))) =>
            {
                let map = entries
                    .into_iter()
                    .filter_map(|(k, n)| match (k, n) {
                        (Key::Const(k), Node::Const(v)) => Some((k, v)),
                        _ => None,
                    })
                    .collect();
                Node::Const(Value::Object(map))
            }
            node => node,
        }
    }

    fn into_const(self) -> Option<Value> {
        match self {
            Node::Const(v) => Some(v),
            _ => None,
        }
    }

    fn render(&self, ctx: &Context) -> Result<Value, TemplateError> {
        match self {
            Node::Const(v) => Ok(v.clone()),
            Node::Template(t) => {
                let value = t.render_value(ctx)?;
                to_json(&value).map_err(|reason| TemplateError::NotJson {
                    origin: t.origin().clone(),
                    reason,
                })
            }
            Node::Array(nodes) => nodes.iter().map(|n| n.render(ctx)).collect(),
            Node::Object(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for (key, node) in entries {
                    let key = match key {
                        Key::Const(k) => k.clone(),
                        Key::Template(t) => t.render_text(ctx)?,
                    };
                    map.insert(key, node.render(ctx)?);
                }
                Ok(Value::Object(map))
            }
        }
    }
}

impl CompiledValue {
    /// Renders the value: templates replaced by their output, constants as they were.
    ///
    /// # Errors
    ///
    /// [`TemplateError::Render`] when a template fails (e.g. `required` found nothing);
    /// [`TemplateError::NotJson`] when one yields a value JSON cannot hold.
    pub fn render(&self, ctx: &Context) -> Result<Value, TemplateError> {
        self.root.render(ctx)
    }

    /// Whether the value holds no template at all (rendering returns it unchanged).
    pub fn is_constant(&self) -> bool {
        matches!(self.root, Node::Const(_))
    }
}

/// A template that renders YAML documents (resource templates).
#[derive(Debug)]
pub struct CompiledDocuments {
    template: Compiled,
}

impl CompiledDocuments {
    /// Renders the template and parses the output as YAML documents separated by `---`;
    /// empty documents (and documents that are only `null`) are skipped.
    ///
    /// # Errors
    ///
    /// [`TemplateError::Render`] when rendering fails; [`TemplateError::Yaml`] when the
    /// output is not YAML (the source has the position in the rendered text).
    pub fn render(&self, ctx: &Context) -> Result<Vec<Value>, TemplateError> {
        let text = self.template.render_text(ctx)?;
        let mut documents = Vec::new();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).map_err(|source| TemplateError::Yaml {
                origin: self.template.origin().clone(),
                source,
            })?;
            if !value.is_null() {
                documents.push(value);
            }
        }
        Ok(documents)
    }
}

/// A compiled condition (`preReconcile[].when`, `validation[].rule`, `requeue.when`).
#[derive(Debug)]
pub struct CompiledCondition {
    template: Compiled,
}

impl CompiledCondition {
    /// Evaluates the condition. `false`, null or undefined, `""`, `"false"` (any case),
    /// `0` and empty lists or maps are false; everything else is true. A condition that
    /// renders text (with `{% %}` blocks) is judged by its trimmed text.
    ///
    /// # Errors
    ///
    /// [`TemplateError::Render`] when evaluating fails.
    pub fn eval(&self, ctx: &Context) -> Result<bool, TemplateError> {
        let value = self.template.render_value(ctx)?;
        Ok(match value.as_str() {
            Some(text) => is_truthy_text(text),
            None => is_truthy(&value),
        })
    }
}
