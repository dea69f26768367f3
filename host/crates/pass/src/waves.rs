//! The order children are applied and deleted in, and what a child's annotations say about
//! its deletion. Pure functions over kinds and annotation values; the runtime carries the
//! waves out.
//!
//! # Ordering rules
//! - A child's *wave* is its `inrun.dev/apply-order` (apply) or `inrun.dev/delete-order`
//!   (delete) annotation, an integer, 0 when absent; waves run in ascending order.
//! - Within a wave, apply goes foundations (Namespaces, CustomResourceDefinitions,
//!   APIServices), then ordinary objects, then instances of managed types; delete goes the
//!   other way round: instances, ordinary objects, foundations.
//! - Each stage (wave and class) starts only when the one before is done: on apply, every
//!   CRD of earlier stages `Established` and every APIService `Available`, and before a
//!   later wave or a stage of instances every object of earlier stages whose kind's rules
//!   read its status ready (the operator that serves them); on delete, every object of the
//!   earlier stage gone.
//! - Managed types are the types defined by CRDs and served by APIServices among the
//!   objects, and the reconcile block's `managedTypes`.

use std::collections::HashSet;

use inrun_blueprint::ManagedType;
use inrun_contract::api_version::group_of;
use serde_json::Value;

/// Annotation on a child: its apply wave (an integer, default 0).
pub const APPLY_ORDER: &str = "inrun.dev/apply-order";
/// Annotation on a child: its delete wave (an integer, default 0).
pub const DELETE_ORDER: &str = "inrun.dev/delete-order";
/// Annotation on a child: `orphan` leaves it in place when the CR is deleted or the Result
/// stops returning it (the owner label and owner reference are removed); `delete` (the
/// default) deletes it.
pub const DELETE_POLICY: &str = "inrun.dev/delete-policy";

/// A CustomResourceDefinition's apiVersion and kind.
pub const CRD: (&str, &str) = ("apiextensions.k8s.io/v1", "CustomResourceDefinition");
/// An APIService's apiVersion and kind.
pub const API_SERVICE: (&str, &str) = ("apiregistration.k8s.io/v1", "APIService");

/// What an object is to the waves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A Namespace, CustomResourceDefinition or APIService: applied first, deleted last.
    Foundation,
    /// Anything else that is not an instance of a managed type.
    Ordinary,
    /// An instance of a managed type: applied last, deleted first.
    Instance,
}

/// Whether `api_version`/`kind` is a CRD or an APIService (a type-defining object).
pub fn defines_types(api_version: &str, kind: &str) -> bool {
    let group = group_of(api_version);
    (group == "apiextensions.k8s.io" && kind == CRD.1)
        || (group == "apiregistration.k8s.io" && kind == API_SERVICE.1)
}

/// The managed types of a set of objects.
#[derive(Debug, Clone, Default)]
pub struct ManagedTypes {
    /// (group, kind) defined by CRDs.
    defined: HashSet<(String, String)>,
    /// (group, version) served by APIServices.
    served: HashSet<(String, String)>,
    /// The reconcile block's `managedTypes`.
    declared: Vec<ManagedType>,
}

impl ManagedTypes {
    /// The types defined or served by `objects` (whole objects, as a Result returns them or
    /// the API server lists them), and `declared`.
    pub fn of<'a>(objects: impl IntoIterator<Item = &'a Value>, declared: &[ManagedType]) -> Self {
        let mut types = ManagedTypes {
            declared: declared.to_vec(),
            ..ManagedTypes::default()
        };
        for o in objects {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_string);
            let (api_version, kind) = (text("/apiVersion"), text("/kind"));
            let (Some(api_version), Some(kind)) = (api_version, kind) else {
                continue;
            };
            if !defines_types(&api_version, &kind) {
                continue;
            }
            if kind == CRD.1 {
                if let (Some(g), Some(k)) = (text("/spec/group"), text("/spec/names/kind")) {
                    types.defined.insert((g, k));
                }
            } else if let (Some(g), Some(v)) = (text("/spec/group"), text("/spec/version")) {
                types.served.insert((g, v));
            }
        }
        types
    }

    /// Whether `api_version`/`kind` is a managed type.
    pub fn contains(&self, api_version: &str, kind: &str) -> bool {
        self.brought(api_version, kind)
            || self
                .declared
                .iter()
                .any(|t| t.matches(group_of(api_version), kind))
    }

    /// Whether `api_version`/`kind` is defined by a CRD or served by an APIService among
    /// the objects (so it may not be served before they are ready).
    pub fn brought(&self, api_version: &str, kind: &str) -> bool {
        let group = group_of(api_version);
        let version = inrun_contract::api_version::split(api_version).1;
        self.defined
            .contains(&(group.to_string(), kind.to_string()))
            || self
                .served
                .contains(&(group.to_string(), version.to_string()))
    }
}

/// The class of an object of `api_version`/`kind`.
pub fn class(api_version: &str, kind: &str, types: &ManagedTypes) -> Class {
    if defines_types(api_version, kind) || (api_version == "v1" && kind == "Namespace") {
        Class::Foundation
    } else if types.contains(api_version, kind) {
        Class::Instance
    } else {
        Class::Ordinary
    }
}

/// The wave an order annotation's value names: 0 when absent.
///
/// # Errors
/// A message naming the annotation when the value is not an integer.
pub fn wave(value: Option<&str>, annotation: &str) -> Result<i32, String> {
    match value {
        None => Ok(0),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("annotation {annotation} must be an integer, not {v:?}")),
    }
}

/// Where an object goes on apply: its wave, then its class.
pub fn apply_stage(wave: i32, class: Class) -> (i32, u8) {
    (wave, class as u8)
}

/// Where an object goes on delete: its wave, then its class, instances first.
pub fn delete_stage(wave: i32, class: Class) -> (i32, u8) {
    (wave, 2 - class as u8)
}

/// What happens to a child when it goes: its delete policy annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletePolicy {
    /// Deleted when the Result drops it and when the CR is deleted (the default).
    Delete,
    /// Left in place (and released) in both cases.
    Orphan,
    /// Deleted when the Result drops it (an update), left in place when the CR is deleted
    /// (an uninstall): what an operator's CRDs or data want.
    OrphanOnDelete,
}

impl DeletePolicy {
    /// Whether the child stays when a later Result no longer holds it.
    pub fn kept_on_prune(self) -> bool {
        self == DeletePolicy::Orphan
    }

    /// Whether the child stays when its CR is deleted.
    pub fn kept_on_delete(self) -> bool {
        self != DeletePolicy::Delete
    }
}

/// The delete policy an annotation's value names.
///
/// # Errors
/// A message when it is none of `delete`, `orphan` and `orphan-on-delete`.
pub fn delete_policy(value: Option<&str>) -> Result<DeletePolicy, String> {
    match value {
        None | Some("delete") => Ok(DeletePolicy::Delete),
        Some("orphan") => Ok(DeletePolicy::Orphan),
        Some("orphan-on-delete") => Ok(DeletePolicy::OrphanOnDelete),
        Some(other) => Err(format!(
            "annotation {DELETE_POLICY} must be delete, orphan or orphan-on-delete, not {other:?}"
        )),
    }
}

/// An annotation of a Result's resource, if it is a string.
pub fn annotation<'a>(resource: &'a Value, name: &str) -> Option<&'a str> {
    resource
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(group: &str, kind: &str) -> Value {
        json!({"apiVersion": CRD.0, "kind": CRD.1,
               "spec": {"group": group, "names": {"kind": kind}}})
    }

    #[test]
    fn instances_of_types_the_objects_bring_or_the_blueprint_declares_are_managed() {
        let api_service = json!({"apiVersion": API_SERVICE.0, "kind": API_SERVICE.1,
                                 "spec": {"group": "metrics.example.org", "version": "v1beta1"}});
        let declared = [ManagedType {
            group: "*.widgets.io".into(),
            kind: "*".into(),
        }];
        let types = ManagedTypes::of([&crd("example.com", "Gizmo"), &api_service], &declared);
        assert_eq!(class("example.com/v1", "Gizmo", &types), Class::Instance);
        assert_eq!(class("example.com/v1", "Other", &types), Class::Ordinary);
        assert_eq!(
            class("metrics.example.org/v1beta1", "PodMetrics", &types),
            Class::Instance
        );
        assert_eq!(
            class("metrics.example.org/v1", "PodMetrics", &types),
            Class::Ordinary,
            "another version than the APIService serves"
        );
        assert_eq!(class("a.widgets.io/v1", "Widget", &types), Class::Instance);
        assert_eq!(class("widgets.io/v1", "Widget", &types), Class::Ordinary);
        assert!(types.brought("example.com/v1", "Gizmo"));
        assert!(!types.brought("a.widgets.io/v1", "Widget"));
        for (api_version, kind) in [CRD, API_SERVICE, ("v1", "Namespace")] {
            assert_eq!(class(api_version, kind, &types), Class::Foundation);
        }
        assert_eq!(class("apps/v1", "Deployment", &types), Class::Ordinary);
    }

    #[test]
    fn waves_order_by_annotation_then_class_and_delete_reverses_the_classes() {
        let mut apply = [
            (apply_stage(0, Class::Instance), "gizmo"),
            (apply_stage(0, Class::Ordinary), "deployment"),
            (apply_stage(-1, Class::Ordinary), "early config"),
            (apply_stage(0, Class::Foundation), "crd"),
            (apply_stage(1, Class::Foundation), "late namespace"),
        ];
        apply.sort();
        let names: Vec<_> = apply.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            names,
            [
                "early config",
                "crd",
                "deployment",
                "gizmo",
                "late namespace"
            ]
        );
        let mut delete = [
            (delete_stage(0, Class::Foundation), "crd"),
            (delete_stage(0, Class::Ordinary), "deployment"),
            (delete_stage(0, Class::Instance), "gizmo"),
            (delete_stage(-5, Class::Foundation), "first namespace"),
        ];
        delete.sort();
        let names: Vec<_> = delete.iter().map(|(_, n)| *n).collect();
        assert_eq!(names, ["first namespace", "gizmo", "deployment", "crd"]);
    }

    #[test]
    fn order_and_policy_annotations_are_checked() {
        assert_eq!(wave(None, APPLY_ORDER), Ok(0));
        assert_eq!(wave(Some("-3"), APPLY_ORDER), Ok(-3));
        assert_eq!(
            wave(Some("first"), DELETE_ORDER),
            Err("annotation inrun.dev/delete-order must be an integer, not \"first\"".into())
        );
        assert_eq!(delete_policy(None), Ok(DeletePolicy::Delete));
        assert_eq!(delete_policy(Some("delete")), Ok(DeletePolicy::Delete));
        let orphan = delete_policy(Some("orphan")).expect("orphan");
        assert!(orphan.kept_on_prune() && orphan.kept_on_delete());
        let on_delete = delete_policy(Some("orphan-on-delete")).expect("orphan-on-delete");
        assert!(!on_delete.kept_on_prune() && on_delete.kept_on_delete());
        assert!(!DeletePolicy::Delete.kept_on_prune() && !DeletePolicy::Delete.kept_on_delete());
        let bad = delete_policy(Some("Orphan")).unwrap_err();
        assert!(bad.contains("delete, orphan or orphan-on-delete"), "{bad}");
    }
}
