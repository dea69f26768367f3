//! The CRD of `Blueprint` resources (tenants that arrive as cluster-scoped custom
//! resources), its `spec` schema derived from the Blueprint model itself: `kubectl
//! explain blueprint.spec.crds` shows the documented fields, and a field the model does not
//! know is refused by `kubectl apply` (strict field validation) instead of vanishing.

use kube_core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Value, json};

use inrun_blueprint::{BLUEPRINT_CRD, BlueprintSpec, CATEGORY};

/// Drops `default` from every subschema: the API server would write defaults into the
/// stored object, and the host applies its own defaults when it loads the Blueprint.
#[derive(Debug, Clone, Copy)]
struct NoDefaults;

impl Transform for NoDefaults {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        transform_subschemas(self, schema);
        if let Some(object) = schema.as_object_mut() {
            object.remove("default");
        }
    }
}

/// The formats the API server knows for integers; schemars's `uint32`, `uint16`, ... draw
/// a warning on every apply (`minimum: 0` already says what they mean).
const INTEGER_FORMATS: [&str; 2] = ["int32", "int64"];

/// Drops integer formats Kubernetes does not know.
#[derive(Debug, Clone, Copy)]
struct KubernetesFormats;

impl Transform for KubernetesFormats {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        transform_subschemas(self, schema);
        if let Some(object) = schema.as_object_mut()
            && object.get("type").and_then(Value::as_str) == Some("integer")
            && object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !INTEGER_FORMATS.contains(&f))
        {
            object.remove("format");
        }
    }
}

/// Makes the model's doc comments read as `kubectl explain` text: paragraphs on one line,
/// rustdoc links (`` [`CrdSpec::plural`] ``) as plain code.
#[derive(Debug, Clone, Copy)]
struct Descriptions;

impl Transform for Descriptions {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        transform_subschemas(self, schema);
        if let Some(Value::String(text)) = schema
            .as_object_mut()
            .and_then(|o| o.get_mut("description"))
        {
            *text = explain_text(text);
        }
    }
}

fn explain_text(doc: &str) -> String {
    let paragraphs: Vec<String> = doc
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let joined = paragraphs.join("\n\n");
    let mut out = String::with_capacity(joined.len());
    let mut rest = joined.as_str();
    while let Some(start) = rest.find("[`") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find("`]") {
            Some(end) => {
                let code = &after[..end + 1];
                // `Type::item` reads as `item`: the reader knows no Rust types.
                let name = code
                    .trim_matches('`')
                    .rsplit("::")
                    .next()
                    .unwrap_or_default();
                out.push('`');
                out.push_str(name);
                out.push('`');
                rest = &after[end + 2..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The structural `openAPIV3Schema` of a Blueprint's `spec`, as schemars derives it from
/// [`BlueprintSpec`] and Kubernetes accepts it (inlined, no `$schema`, nullable options).
pub fn spec_schema() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(StructuralSchemaRewriter)
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
        .with_transform(NoDefaults)
        .with_transform(KubernetesFormats)
        .with_transform(Descriptions)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<BlueprintSpec>().to_value();
    if let Some(object) = schema.as_object_mut() {
        // The root's title names the Rust type; kubectl explain shows the description.
        object.remove("title");
    }
    schema
}

/// The `Blueprint` CustomResourceDefinition: cluster-scoped, a status subresource, the
/// `Accepted` condition in `kubectl get`, short name `bp`, category `inrun`.
pub fn blueprint_crd() -> Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": BLUEPRINT_CRD, "labels": {"app.kubernetes.io/managed-by": "inrun"}},
        "spec": {
            "group": "inrun.dev",
            "scope": "Cluster",
            "names": {
                "kind": "Blueprint",
                "listKind": "BlueprintList",
                "plural": "blueprints",
                "singular": "blueprint",
                "shortNames": ["bp"],
                "categories": [CATEGORY],
            },
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Accepted", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"},
                    {"name": "Reason", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].reason"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "Custom resource types and how Inrun reconciles them; the host serves each Blueprint as a tenant.",
                    "properties": {"spec": spec_schema(), "status": open},
                }},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node of `schema` with its path, for the structural rules.
    fn walk<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((path.clone(), schema));
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(v, format!("{path}.{k}"), out);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(items, format!("{path}[]"), out);
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            walk(extra, format!("{path}{{}}"), out);
        }
    }

    #[test]
    fn descriptions_read_as_plain_text() {
        assert_eq!(
            explain_text(
                "Plural name; see [`CrdSpec::plural`] for\nthe default.\n\nSecond [`CATEGORY`]."
            ),
            "Plural name; see `plural` for the default.\n\nSecond `CATEGORY`."
        );
        assert_eq!(explain_text("a [b] [`c"), "a [b] [`c");
    }

    #[test]
    fn the_spec_schema_is_structural() {
        let schema = spec_schema();
        let mut nodes = Vec::new();
        walk(&schema, "spec".into(), &mut nodes);
        assert!(nodes.len() > 100, "the model is described field by field");
        for (path, node) in nodes {
            let open = node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
                || node.get("x-kubernetes-int-or-string") == Some(&json!(true));
            assert!(
                node.get("type").is_some() || open,
                "{path} has no type: {node}"
            );
            for banned in [
                "$ref",
                "$schema",
                "definitions",
                "$defs",
                "default",
                "oneOf",
            ] {
                assert!(node.get(banned).is_none(), "{path} has {banned}: {node}");
            }
            if let Some(format) = node.get("format").and_then(Value::as_str) {
                assert!(
                    ["int32", "int64", "double", "float", "date-time", "byte"].contains(&format),
                    "{path} has a format Kubernetes does not know: {node}"
                );
            }
            assert!(
                node.get("additionalProperties") != Some(&json!(false)),
                "{path} forbids extra fields in the schema: {node}"
            );
        }
    }

    #[test]
    fn the_spec_schema_documents_and_types_the_fields() {
        let schema = spec_schema();
        let crd = &schema["properties"]["crds"]["items"];
        assert_eq!(crd["properties"]["kind"]["type"], "string");
        assert!(
            crd["properties"]["kind"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("UpperCamelCase")),
            "{}",
            crd["properties"]["kind"]
        );
        assert_eq!(
            crd["properties"]["scope"]["enum"],
            json!(["Namespaced", "Cluster"])
        );
        assert_eq!(crd["required"], json!(["group", "kind", "version"]));
        let reconcile = &crd["properties"]["reconcile"]["properties"];
        assert_eq!(
            reconcile["onReconcile"]["items"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            reconcile["args"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            schema["properties"]["runtime"]["properties"]["minRequeue"]["type"],
            "string"
        );
    }
}
