//! A CR as the controller's cache keeps it: typed metadata (what the controller, the
//! triggers and the owner index read), the rest of the object as compact JSON text that a
//! pass parses when it starts. A parsed `serde_json::Value` costs several times its text in
//! memory (a map node, a `String` and a `Value` per field); with 10,000 CRs the cache was
//! the host's largest allocation.
//!
//! The cache also drops what no pass reads and every write would keep current for nobody:
//! other field managers' `managedFields` entries (the pass reads only the host's own, to
//! know which labels, finalizers and status fields it owns) and kubectl's
//! `last-applied-configuration` annotation, a second copy of the object. The host's own
//! entries keep what the pass reads (manager, operation, subresource), and their field
//! sets as JSON text (a tree of maps per entry was most of a
//! small CR's cached size), parsed back with the rest of the object.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ObjectMeta};
use kube::api::{DynamicObject, TypeMeta};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use inrun_pass::meta::{FINALIZER_MANAGER, RECONCILER_MANAGER, STATUS_MANAGER};

/// kubectl's copy of the object it last applied client-side.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The largest CR body (all but apiVersion, kind and metadata, as compact JSON) the cache
/// keeps ([`set_max_body_bytes`]; `--max-cr-size`): anyone who may create a CR of a served
/// kind could otherwise fill the host's memory with CRs of a megabyte and more.
static MAX_BODY: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_BODY);

/// The default of the largest CR body the cache keeps.
pub const DEFAULT_MAX_BODY: usize = 256 * 1024;

/// Sets the largest CR body the cache keeps, for every controller of this process.
pub fn set_max_body_bytes(bytes: usize) {
    MAX_BODY.store(bytes, Ordering::Relaxed);
}

/// A cached CR. Deserializes from the API server's JSON like a [`DynamicObject`].
#[derive(Clone, Debug)]
pub struct CachedCr {
    pub types: Option<TypeMeta>,
    pub metadata: ObjectMeta,
    /// Everything but apiVersion, kind and metadata, as JSON text (`{"spec":…}`); `{}`
    /// for a CR too large to keep.
    body: Box<str>,
    /// The body's size when it was too large to keep (and the CR not being deleted).
    dropped: Option<usize>,
}

impl CachedCr {
    /// `obj` trimmed and compacted.
    pub fn new(obj: DynamicObject) -> Self {
        let DynamicObject {
            types,
            mut metadata,
            data,
        } = obj;
        if let Some(entries) = &mut metadata.managed_fields {
            entries.retain(|e| {
                matches!(
                    e.manager.as_deref(),
                    Some(FINALIZER_MANAGER | RECONCILER_MANAGER | STATUS_MANAGER)
                )
            });
            for entry in entries.iter_mut() {
                // The pass reads manager, operation, subresource and the field set.
                entry.api_version = None;
                entry.fields_type = None;
                entry.time = None;
                if let Some(FieldsV1(fields)) = &mut entry.fields_v1 {
                    *fields = Value::String(fields.to_string());
                }
            }
        }
        if let Some(annotations) = &mut metadata.annotations {
            annotations.remove(LAST_APPLIED);
        }
        let body = data.to_string();
        let max = MAX_BODY.load(Ordering::Relaxed);
        // A CR being deleted keeps its body: its finalizing pass may need it, and it goes.
        if body.len() > max && metadata.deletion_timestamp.is_none() {
            return CachedCr {
                types,
                metadata,
                body: "{}".into(),
                dropped: Some(body.len()),
            };
        }
        CachedCr {
            types,
            metadata,
            body: body.into_boxed_str(),
            dropped: None,
        }
    }

    /// Why the CR is not reconciled, when its body was too large to keep.
    pub fn too_large(&self) -> Option<String> {
        self.dropped.map(|len| {
            format!(
                "the CR is {} KiB (without its metadata); this host reconciles CRs of at most {} KiB (--max-cr-size)",
                len.div_ceil(1024),
                MAX_BODY.load(Ordering::Relaxed).div_ceil(1024)
            )
        })
    }

    /// The CR as a pass reads it: the whole object as JSON (apiVersion, kind, metadata,
    /// then the rest), built from the text in one parse.
    pub fn value(&self) -> Value {
        let mut object = Map::new();
        if let Some(types) = &self.types {
            object.insert("apiVersion".into(), types.api_version.clone().into());
            object.insert("kind".into(), types.kind.clone().into());
        }
        let mut metadata = serde_json::to_value(&self.metadata).unwrap_or_default();
        if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
            for entry in entries {
                if let Some(fields) = entry.get_mut("fieldsV1")
                    && let Value::String(text) = fields
                    && let Ok(parsed) = serde_json::from_str(text)
                {
                    *fields = parsed;
                }
            }
        }
        object.insert("metadata".into(), metadata);
        // The text was written from a JSON object by this type, so it parses back as one.
        if let Ok(Value::Object(body)) = serde_json::from_str(&self.body) {
            object.extend(body);
        }
        Value::Object(object)
    }

    /// What its status says of its last pass: `status.reconciledBy`, and whether its
    /// `Ready` condition is `True` (read from the body alone, the rest of it skipped).
    pub fn reconciled_by_and_ready(&self) -> (Option<String>, bool) {
        #[derive(serde::Deserialize)]
        struct Body {
            #[serde(default)]
            status: Option<Status>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            #[serde(default)]
            reconciled_by: Option<String>,
            #[serde(default)]
            conditions: Vec<Condition>,
        }
        #[derive(serde::Deserialize)]
        struct Condition {
            #[serde(rename = "type", default)]
            type_: String,
            #[serde(default)]
            status: String,
        }
        let Ok(Body {
            status: Some(status),
        }) = serde_json::from_str::<Body>(&self.body)
        else {
            return (None, false);
        };
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (status.reconciled_by, ready)
    }

    /// The CR's identity and metadata without its body: what the pass's effects address
    /// it by (names, uid, resourceVersion, labels) — they read nothing else.
    pub fn head(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.clone(),
            metadata: self.metadata.clone(),
            data: Value::Object(Map::new()),
        }
    }
}

impl<'de> Deserialize<'de> for CachedCr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(deserializer).map(CachedCr::new)
    }
}

/// `impl Resource` for a cached type of any kind (its kind an `ApiResource` known at
/// run time) whose metadata is its `metadata` field: [`CachedCr`], and the children's
/// `CachedChild`.
macro_rules! dynamic_resource {
    ($cached:ty) => {
        impl ::kube::Resource for $cached {
            type DynamicType = ::kube::discovery::ApiResource;
            type Scope = ::kube::core::DynamicResourceScope;

            fn group(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }

            fn version(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }

            fn kind(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }

            fn api_version(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }

            fn plural(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use dynamic_resource;

dynamic_resource!(CachedCr);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    fn watched() -> serde_json::Value {
        json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {
                "name": "web", "namespace": "a", "uid": "u1", "generation": 2,
                "resourceVersion": "7",
                "labels": {"team": "x"},
                "annotations": {"note": "kept", LAST_APPLIED: "{\"spec\":{}}"},
                "finalizers": ["inrun.dev/cleanup"],
                "managedFields": [
                    {"manager": "kubectl", "operation": "Apply", "apiVersion": "demo.inrun.dev/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:image": {}}}},
                    {"manager": FINALIZER_MANAGER, "operation": "Apply",
                     "apiVersion": "demo.inrun.dev/v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"inrun.dev/cleanup\"": {}}}}},
                    {"manager": STATUS_MANAGER, "operation": "Apply", "subresource": "status",
                     "apiVersion": "demo.inrun.dev/v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:url": {}}}},
                ],
            },
            "spec": {"image": "nginx", "replicas": 2},
            "status": {"url": "http://web"},
        })
    }

    #[test]
    fn a_cached_cr_reads_back_as_the_object_without_what_no_pass_reads() {
        let cached: CachedCr = serde_json::from_value(watched()).expect("deserializes");
        let object = cached.value();
        let mut expected = watched();
        let meta = &mut expected["metadata"];
        meta["annotations"]
            .as_object_mut()
            .expect("map")
            .remove(LAST_APPLIED);
        let entries = meta["managedFields"].as_array_mut().expect("list");
        entries.remove(0);
        for entry in entries {
            let entry = entry.as_object_mut().expect("entry");
            entry.remove("apiVersion");
            entry.remove("fieldsType");
        }
        assert_eq!(object, expected);
    }

    #[test]
    fn a_body_past_the_cap_is_not_kept_unless_the_cr_is_being_deleted() {
        let mut big = watched();
        big["spec"]["blob"] = "x".repeat(DEFAULT_MAX_BODY).into();
        let cached: CachedCr = serde_json::from_value(big.clone()).expect("deserializes");
        assert_eq!(&*cached.body, "{}");
        let why = cached.too_large().expect("too large");
        assert!(why.contains("at most 256 KiB (--max-cr-size)"), "{why}");
        assert_eq!(cached.meta().name.as_deref(), Some("web"));
        big["metadata"]["deletionTimestamp"] = "2026-12-03T00:00:00Z".into();
        let deleting: CachedCr = serde_json::from_value(big).expect("deserializes");
        assert!(deleting.too_large().is_none());
        assert!(deleting.body.len() > DEFAULT_MAX_BODY);
        let small: CachedCr = serde_json::from_value(watched()).expect("deserializes");
        assert!(small.too_large().is_none());
    }

    #[test]
    fn the_host_field_sets_are_kept_as_text_and_read_back_as_objects() {
        let cached: CachedCr = serde_json::from_value(watched()).expect("deserializes");
        let entries = cached.metadata.managed_fields.as_ref().expect("entries");
        assert_eq!(
            entries[0].fields_v1.as_ref().map(|f| &f.0),
            Some(&Value::String(
                r#"{"f:metadata":{"f:finalizers":{"v:\"inrun.dev/cleanup\"":{}}}}"#.into()
            ))
        );
        let object = cached.value();
        assert_eq!(
            object["metadata"]["managedFields"][1]["fieldsV1"],
            serde_json::json!({"f:status": {"f:url": {}}})
        );
    }

    #[test]
    fn the_cache_holds_the_body_as_text() {
        let cached: CachedCr = serde_json::from_value(watched()).expect("deserializes");
        assert_eq!(
            &*cached.body,
            r#"{"spec":{"image":"nginx","replicas":2},"status":{"url":"http://web"}}"#
        );
        assert_eq!(cached.meta().name.as_deref(), Some("web"));
        let head = cached.head();
        assert_eq!(head.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(head.data, serde_json::json!({}));
    }
}
