//! JSON Schema pieces for the parts of a Blueprint that hold arbitrary JSON (templates,
//! schemas, args), written as Kubernetes' structural schemas want them: the API server
//! keeps such a field as written instead of pruning it.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value.
pub(crate) fn any(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// An object with any fields.
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of any JSON values.
pub(crate) fn any_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}})
}
