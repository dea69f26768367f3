//! The CRD manifest the API server gets for a Blueprint CRD: its schema with the fields the
//! host reads and writes, a status subresource, names and printer columns.

use serde_json::{Value, json};

use super::crd::{CrdSpec, Scope};

impl CrdSpec {
    /// The CRD manifest for a Blueprint CRD: its schema (or an open one), a status
    /// subresource, and its printer columns.
    pub fn manifest(&self) -> Value {
        let columns = self.printer_column_manifests();
        let mut version = json!({
            "name": self.version,
            "served": true,
            "storage": true,
            "schema": {"openAPIV3Schema": self.schema_manifest()},
            "subresources": {"status": {}},
        });
        if !columns.is_empty() {
            version["additionalPrinterColumns"] = json!(columns);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.crd_name(), "labels": {"app.kubernetes.io/managed-by": "inrun"}},
            "spec": {
                "group": self.group,
                "names": self.names_manifest(),
                "scope": match self.scope { Scope::Cluster => "Cluster", Scope::Namespaced => "Namespaced" },
                "versions": [version],
            },
        })
    }

    /// The schema the API server checks CRs against: the Blueprint's (or an open one),
    /// with the fields the host reads and writes added where it leaves them out.
    fn schema_manifest(&self) -> Value {
        let mut schema = self.schema.clone().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        // Whether any block serving this CRD, the default or a serve target's, is a package.
        let package = self.serves_a_package();
        if package {
            add_package_spec_fields(&mut schema);
        }
        add_host_status_fields(&mut schema, package);
        schema
    }

    /// The Blueprint's printer columns, then `Ready`, `Reason` and `Age` unless it names
    /// them itself: `kubectl get` shows whether each CR is ready, why not, and its age
    /// (which it drops once a CRD has columns of its own).
    fn printer_column_manifests(&self) -> Vec<Value> {
        let mut columns: Vec<Value> = self
            .printer_columns
            .iter()
            .map(|c| {
                let mut col = json!({"name": c.name, "type": c.type_, "jsonPath": c.json_path});
                if let Some(d) = &c.description {
                    col["description"] = json!(d);
                }
                if let Some(p) = c.priority {
                    col["priority"] = json!(p);
                }
                col
            })
            .collect();
        for (name, type_, path, description) in [
            (
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
                "Whether the CR is ready",
            ),
            (
                "Reason",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].reason",
                "Why it is or is not ready",
            ),
            (
                "Age",
                "date",
                ".metadata.creationTimestamp",
                "Since when the CR exists",
            ),
        ] {
            if !self
                .printer_columns
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(name))
            {
                columns.push(json!({"name": name, "type": type_, "jsonPath": path, "description": description}));
            }
        }
        columns
    }

    /// `spec.names`: kind, list kind, plural, singular, categories and short names.
    fn names_manifest(&self) -> Value {
        let mut names = json!({
            "kind": self.kind,
            "listKind": format!("{}List", self.kind),
            "plural": self.plural(),
            "singular": self.kind.to_lowercase(),
            "categories": self.categories(),
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        names
    }
}

/// A package CR's common fields, typed where the schema types the spec (the host checks
/// their values, so a bad one is a condition on the CR, not a refused write).
fn add_package_spec_fields(schema: &mut Value) {
    let Some(spec) = schema
        .pointer_mut("/properties/spec/properties")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (field, def) in [
        (
            "state",
            json!({"type": "string", "description": "What the infrastructure should be; the package interprets it (default running)."}),
        ),
        (
            "suspend",
            json!({"type": "boolean", "description": "Stop converging (deletion still runs)."}),
        ),
        (
            "reconcileInterval",
            json!({"type": "string", "description": "How often the infrastructure is checked, as Kubernetes writes durations: 30s, 1m30s, 1.5h (default 60s)."}),
        ),
        (
            "deletionPolicy",
            json!({"type": "string", "enum": ["Retain", "Delete"], "description": "Retain (default) leaves the infrastructure when the CR is deleted; Delete deletes it first."}),
        ),
        (
            "config",
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "The package's options; config.profile names the credentials profile (default <namespace>--<name>)."}),
        ),
    ] {
        spec.entry(field).or_insert(def);
    }
}

/// The host writes status whatever the schema says about it: an open status, or, in a
/// typed one, the fields the host writes (else the API server would prune them and every
/// pass would write them again).
fn add_host_status_fields(schema: &mut Value, package: bool) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let status = props
        .entry("status")
        .or_insert_with(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let Some(fields) = status.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let open_list = || json!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    fields.entry("conditions").or_insert_with(open_list);
    fields.entry("resources").or_insert_with(open_list);
    fields
        .entry("observedGeneration")
        .or_insert_with(|| json!({"type": "integer", "format": "int64"}));
    fields.entry("reconciledBy").or_insert_with(|| {
        json!({"type": "string", "description": "What reconciled this CR: the sha256 digests of its plugins, or its reconcile block's kind and digest."})
    });
    // A package CR's stored identity and the request it handled: pruned, the identity
    // guard would never hold and every pass would write them again.
    if !package {
        return;
    }
    for (field, description) in [
        (
            "profile",
            "The credentials profile the infrastructure was created with.",
        ),
        (
            "boundary",
            "The boundary the infrastructure was created in.",
        ),
        (
            "identity",
            "A hash of the state that names the infrastructure.",
        ),
        (
            "lastHandledReconcileAt",
            "The reconcile-request annotation last acted on.",
        ),
    ] {
        fields
            .entry(field)
            .or_insert_with(|| json!({"type": "string", "description": description}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(yaml: &str) -> CrdSpec {
        serde_yaml_ng::from_str(yaml).expect("crd")
    }

    #[test]
    fn generated_crds_are_in_the_inrun_category_and_carry_their_short_names() {
        let plain = crd("{ group: a.b, version: v1, kind: A }");
        let names = &plain.manifest()["spec"]["names"];
        assert_eq!(names["categories"], json!(["inrun"]));
        assert!(names.get("shortNames").is_none(), "{names}");
        let named = crd(
            "{ group: a.b, version: v1, kind: WebApp, shortNames: [wa], categories: [all, inrun, apps] }",
        );
        let names = &named.manifest()["spec"]["names"];
        assert_eq!(names["categories"], json!(["inrun", "all", "apps"]));
        assert_eq!(names["shortNames"], json!(["wa"]));
    }

    #[test]
    fn generated_crds_show_ready_reason_and_age_unless_the_blueprint_names_them() {
        let names = |c: &CrdSpec| -> Vec<String> {
            c.manifest()["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .expect("columns")
                .iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        let plain = crd("{ group: a.b, version: v1, kind: A }");
        assert_eq!(names(&plain), ["Ready", "Reason", "Age"]);
        let own = crd(
            "{ group: a.b, version: v1, kind: A, printerColumns: [ { name: Phase, type: string, jsonPath: .status.phase }, { name: age, type: date, jsonPath: .metadata.creationTimestamp } ] }",
        );
        assert_eq!(names(&own), ["Phase", "age", "Ready", "Reason"]);
        assert_eq!(
            plain.manifest()["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"],
            ".status.conditions[?(@.type==\"Ready\")].status"
        );
    }

    #[test]
    fn a_typed_status_schema_gets_the_fields_the_host_writes() {
        let c = crd(
            "{ group: a.b, version: v1, kind: A, schema: { type: object, properties: { status: { type: object, properties: { phase: { type: string } } } } } }",
        );
        let m = c.manifest();
        let status = &m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"];
        assert_eq!(status["phase"]["type"], "string");
        for field in ["conditions", "resources"] {
            assert_eq!(status[field]["type"], "array", "{field}");
            assert_eq!(
                status[field]["items"]["x-kubernetes-preserve-unknown-fields"],
                true
            );
        }
        assert_eq!(status["observedGeneration"]["type"], "integer");
        assert!(status.get("identity").is_none(), "not a package: {status}");
        // A package CRD's typed status keeps what the package steps store there too.
        let p = crd(
            "{ group: a.b, version: v1, kind: P, reconcile: { default: false, package: { location: ./p.wasm } }, schema: { type: object, properties: { status: { type: object, properties: { phase: { type: string } } } } } }",
        );
        let m = p.manifest();
        let status = &m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"];
        for field in ["profile", "boundary", "identity", "lastHandledReconcileAt"] {
            assert_eq!(status[field]["type"], "string", "{field}: {status}");
        }
        assert_eq!(status["phase"]["type"], "string");
        // So does one whose package is a serve target's, with a typed spec as well.
        let t = crd(
            "{ group: a.b, version: v1, kind: T, serve: { targets: [ { name: infra, reconcile: { default: false, package: { location: ./p.wasm } } } ] }, schema: { type: object, properties: { spec: { type: object, properties: { size: { type: integer } } }, status: { type: object, properties: { phase: { type: string } } } } } }",
        );
        assert!(t.serves_a_package());
        let m = t.manifest();
        let schema = &m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        for field in ["profile", "boundary", "identity", "lastHandledReconcileAt"] {
            assert_eq!(
                schema["status"]["properties"][field]["type"], "string",
                "{field}"
            );
        }
        for field in ["state", "reconcileInterval", "config"] {
            assert!(
                schema["spec"]["properties"].get(field).is_some(),
                "{field}: {schema}"
            );
        }
    }
}
