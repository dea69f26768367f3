//! Tests of intent expansion: one group per type, then the errors.

use serde_json::{Value, json};

use super::*;

fn defaults() -> IntentDefaults {
    IntentDefaults {
        name: "web".to_owned(),
        namespace: Some("apps".to_owned()),
    }
}

fn expand_ok(kind: &str, fields: Value) -> Value {
    match expand(&json!({"type": kind, "fields": fields}), &defaults()) {
        Ok(v) => v,
        Err(e) => panic!("{kind} failed: {e}"),
    }
}

fn expand_err(resource: Value) -> IntentError {
    match expand(&resource, &defaults()) {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

fn standard_labels(name: &str) -> Value {
    json!({"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "inrun"})
}

#[test]
fn a_minimal_deployment_gets_name_labels_selector_and_one_replica() {
    let d = expand_ok("deployment", json!({"image": "nginx:1.27"}));
    assert_eq!(
        d,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "labels": standard_labels("web")},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
                "template": {
                    "metadata": {"labels": standard_labels("web")},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        })
    );
}

#[test]
fn a_full_deployment_maps_every_field() {
    let d = expand_ok(
        "deployment",
        json!({
            "name": "api", "namespace": "other", "image": "api:2", "replicas": "3", "port": 8080,
            "env": {"MODE": "prod", "WORKERS": 4}, "command": ["/api"], "args": "--verbose",
            "resources": {"limits": {"cpu": "1"}}, "serviceAccountName": "api-sa",
            "labels": {"team": "core"}, "annotations": {"note": "x"},
        }),
    );
    assert_eq!(d["metadata"]["name"], "api");
    assert_eq!(d["metadata"]["namespace"], "other");
    assert_eq!(d["metadata"]["labels"]["team"], "core");
    assert_eq!(d["metadata"]["annotations"], json!({"note": "x"}));
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        d["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "api"})
    );
    assert_eq!(d["spec"]["template"]["metadata"]["labels"]["team"], "core");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "api-sa");
    assert_eq!(
        pod["containers"][0],
        json!({
            "name": "api", "image": "api:2", "command": ["/api"], "args": ["--verbose"],
            "env": [{"name": "MODE", "value": "prod"}, {"name": "WORKERS", "value": "4"}],
            "resources": {"limits": {"cpu": "1"}},
            "ports": [{"name": "http", "containerPort": 8080}],
        })
    );
}

#[test]
fn deployment_ports_accept_numbers_lists_and_objects() {
    let ports = |fields: Value| {
        expand_ok("deployment", fields)["spec"]["template"]["spec"]["containers"][0]["ports"]
            .clone()
    };
    assert_eq!(
        ports(json!({"image": "i", "ports": [8080]})),
        json!([{"name": "http", "containerPort": 8080}])
    );
    assert_eq!(
        ports(json!({"image": "i", "ports": [80, {"name": "metrics", "port": 9090}]})),
        json!([{"containerPort": 80}, {"name": "metrics", "containerPort": 9090}])
    );
}

#[test]
fn a_label_override_of_the_name_label_moves_the_selector_with_it() {
    let d = expand_ok(
        "deployment",
        json!({"image": "i", "labels": {"app.kubernetes.io/name": "shop"}}),
    );
    assert_eq!(
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "shop"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "shop"
    );
}

#[test]
fn a_service_defaults_to_port_80_cluster_ip_and_the_name_selector() {
    let s = expand_ok("service", json!({}));
    assert_eq!(
        s,
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "apps", "labels": standard_labels("web")},
            "spec": {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}],
            },
        })
    );
}

#[test]
fn a_service_takes_ports_type_and_selector() {
    let s = expand_ok(
        "service",
        json!({"port": 443, "targetPort": "https", "type": "NodePort", "selector": {"app": "x"}}),
    );
    assert_eq!(s["spec"]["type"], "NodePort");
    assert_eq!(s["spec"]["selector"], json!({"app": "x"}));
    assert_eq!(s["spec"]["ports"][0]["port"], 443);
    assert_eq!(s["spec"]["ports"][0]["targetPort"], "https");
    let s = expand_ok("service", json!({"port": 8443}));
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 8443);
}

#[test]
fn a_configmap_stringifies_its_data() {
    let c = expand_ok("configmap", json!({"data": {"a": "x", "n": 1, "b": true}}));
    assert_eq!(c["kind"], "ConfigMap");
    assert_eq!(c["data"], json!({"a": "x", "n": "1", "b": "true"}));
}

#[test]
fn a_secret_is_opaque_by_default_and_keeps_both_data_forms() {
    let s = expand_ok(
        "secret",
        json!({"stringData": {"password": "p"}, "data": {"k": "dg=="}}),
    );
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["stringData"], json!({"password": "p"}));
    assert_eq!(s["data"], json!({"k": "dg=="}));
    let tls = expand_ok("secret", json!({"type": "kubernetes.io/tls"}));
    assert_eq!(tls["type"], "kubernetes.io/tls");
}

#[test]
fn a_serviceaccount_needs_no_fields() {
    let sa = expand(&json!({"type": "serviceaccount"}), &defaults());
    assert_eq!(
        sa,
        Ok(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "web", "namespace": "apps", "labels": standard_labels("web")},
        }))
    );
}

#[test]
fn a_job_never_restarts_and_backs_off_three_times_by_default() {
    let j = expand_ok(
        "job",
        json!({"image": "migrate:1", "command": ["migrate", "up"]}),
    );
    assert_eq!(j["apiVersion"], "batch/v1");
    assert_eq!(j["spec"]["backoffLimit"], 3);
    assert!(j["spec"].get("ttlSecondsAfterFinished").is_none());
    let pod = &j["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["containers"][0]["command"], json!(["migrate", "up"]));
    let j = expand_ok(
        "job",
        json!({"image": "i", "backoffLimit": 0, "ttlSecondsAfterFinished": 60}),
    );
    assert_eq!(j["spec"]["backoffLimit"], 0);
    assert_eq!(j["spec"]["ttlSecondsAfterFinished"], 60);
}

#[test]
fn an_ingress_routes_slash_to_the_named_service_on_port_80() {
    let i = expand_ok("ingress", json!({"host": "web.example.com"}));
    assert_eq!(i["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(
        i["spec"],
        json!({"rules": [{"host": "web.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}},
        }]}}]})
    );
}

#[test]
fn an_ingress_takes_class_tls_path_and_backend() {
    let i = expand_ok(
        "ingress",
        json!({
            "host": "a.example.com", "path": "/api", "pathType": "Exact", "serviceName": "api",
            "servicePort": "http", "ingressClassName": "nginx", "tls": "a-cert",
        }),
    );
    assert_eq!(i["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        i["spec"]["tls"],
        json!([{"hosts": ["a.example.com"], "secretName": "a-cert"}])
    );
    let path = &i["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(path["path"], "/api");
    assert_eq!(path["pathType"], "Exact");
    assert_eq!(
        path["backend"]["service"],
        json!({"name": "api", "port": {"name": "http"}})
    );
    let i = expand_ok(
        "ingress",
        json!({"tls": {"secretName": "c", "hosts": ["x"]}}),
    );
    assert_eq!(
        i["spec"]["tls"],
        json!([{"hosts": ["x"], "secretName": "c"}])
    );
}

#[test]
fn without_a_namespace_default_the_object_has_none() {
    let d = expand(
        &json!({"type": "configmap"}),
        &IntentDefaults {
            name: "c".into(),
            namespace: None,
        },
    );
    assert!(d.is_ok_and(|d| d["metadata"].get("namespace").is_none()));
}

#[test]
fn full_objects_are_returned_unchanged() {
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "s"}});
    assert_eq!(expand(&secret, &defaults()), Ok(secret.clone()));
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
    assert_eq!(expand(&cm, &defaults()), Ok(cm.clone()));
}

#[test]
fn full_objects_without_identity_are_rejected() {
    assert_eq!(
        expand_err(json!({"kind": "ConfigMap", "metadata": {"name": "c"}})),
        IntentError::Incomplete {
            missing: "apiVersion"
        }
    );
    assert_eq!(
        expand_err(json!({"apiVersion": "v1", "metadata": {"name": "c"}})),
        IntentError::Incomplete { missing: "kind" }
    );
    assert_eq!(
        expand_err(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})),
        IntentError::Incomplete {
            missing: "metadata.name"
        }
    );
    assert_eq!(expand_err(json!("deployment")), IntentError::NotAnObject);
}

#[test]
fn an_unknown_type_lists_the_known_ones() {
    let err = expand_err(json!({"type": "statefulset", "fields": {}}));
    let message = err.to_string();
    assert!(message.contains("statefulset"), "{message}");
    for known in [
        "deployment",
        "service",
        "configmap",
        "secret",
        "serviceaccount",
        "job",
        "ingress",
    ] {
        assert!(message.contains(known), "{message}");
    }
}

#[test]
fn an_unknown_field_is_named_with_the_known_ones() {
    let err = expand_err(json!({"type": "service", "fields": {"image": "x"}}));
    let IntentError::UnknownField { kind, field, known } = err else {
        panic!("{err:?}")
    };
    assert_eq!((kind, field.as_str()), ("service", "image"));
    assert!(
        known.contains("targetPort") && known.contains("labels"),
        "{known}"
    );
}

#[test]
fn malformed_fields_are_rejected_with_what_they_need() {
    let cases = [
        (json!({"type": "deployment", "fields": {}}), "image"),
        (
            json!({"type": "deployment", "fields": {"image": "i", "port": 70000}}),
            "port",
        ),
        (
            json!({"type": "deployment", "fields": {"image": "i", "replicas": -1}}),
            "replicas",
        ),
        (
            json!({"type": "deployment", "fields": {"image": "i", "env": {"A": {"x": 1}}}}),
            "env.A",
        ),
        (
            json!({"type": "deployment", "fields": {"image": "i", "env": [{"value": "v"}]}}),
            "env[0]",
        ),
        (
            json!({"type": "deployment", "fields": {"image": "i", "ports": ["x"]}}),
            "ports[0]",
        ),
        (
            json!({"type": "service", "fields": {"type": "Public"}}),
            "type",
        ),
        (
            json!({"type": "job", "fields": {"image": "i", "restartPolicy": "Always"}}),
            "restartPolicy",
        ),
        (
            json!({"type": "ingress", "fields": {"pathType": "Glob"}}),
            "pathType",
        ),
        (json!({"type": "ingress", "fields": {"tls": 3}}), "tls"),
        (
            json!({"type": "configmap", "fields": {"labels": ["a"]}}),
            "labels",
        ),
        (json!({"type": "configmap", "fields": []}), "fields"),
    ];
    for (resource, field) in cases {
        let err = expand_err(resource.clone());
        assert!(err.to_string().contains(field), "{resource} gave {err}");
    }
}

#[test]
fn port_and_ports_together_conflict() {
    let err = expand_err(
        json!({"type": "deployment", "fields": {"image": "i", "port": 1, "ports": [2]}}),
    );
    assert!(matches!(
        err,
        IntentError::Conflict {
            first: "port",
            second: "ports",
            ..
        }
    ));
}

#[test]
fn intent_keys_beside_type_and_fields_are_rejected() {
    let err = expand_err(json!({"type": "configmap", "name": "x"}));
    assert_eq!(err, IntentError::UnknownKey { key: "name".into() });
}
