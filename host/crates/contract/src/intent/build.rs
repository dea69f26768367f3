//! One builder per intent type: the known types, their fields, and the objects they become.

use serde_json::{Map, Value, json};

use super::fields::{Fields, PORT_MAX, put};
use super::{IntentDefaults, IntentError};

const NAME_LABEL: &str = "app.kubernetes.io/name";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Fields every type takes.
const COMMON: &[&str] = &["name", "namespace", "labels", "annotations"];
/// Fields of a pod's single container, shared by deployment and job.
const CONTAINER: &[&str] = &[
    "image",
    "command",
    "args",
    "env",
    "resources",
    "serviceAccountName",
];

type Builder = fn(&Fields<'_>) -> Result<Value, IntentError>;

/// The known types: name, own fields (beside [`COMMON`]), builder.
const TYPES: &[(&str, &[&str], Builder)] = &[
    ("deployment", &["replicas", "port", "ports"], deployment),
    (
        "service",
        &["port", "targetPort", "type", "selector"],
        service,
    ),
    ("configmap", &["data"], configmap),
    ("secret", &["stringData", "data", "type"], secret),
    ("serviceaccount", &[], serviceaccount),
    (
        "job",
        &["backoffLimit", "restartPolicy", "ttlSecondsAfterFinished"],
        job,
    ),
    (
        "ingress",
        &[
            "host",
            "path",
            "pathType",
            "serviceName",
            "servicePort",
            "ingressClassName",
            "tls",
        ],
        ingress,
    ),
];

/// Types whose pod has one container described by [`CONTAINER`] fields.
fn takes_container(kind: &str) -> bool {
    matches!(kind, "deployment" | "job")
}

/// Expands the intent `kind` with `fields`.
pub(super) fn expand_kind(
    kind: &str,
    fields: &Map<String, Value>,
    defaults: &IntentDefaults,
) -> Result<Value, IntentError> {
    let Some(&(kind, own, builder)) = TYPES.iter().find(|(name, _, _)| *name == kind) else {
        let known = TYPES
            .iter()
            .map(|(name, _, _)| *name)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(IntentError::UnknownType {
            kind: kind.to_owned(),
            known,
        });
    };
    let container: &[&str] = if takes_container(kind) {
        CONTAINER
    } else {
        &[]
    };
    let allowed = || COMMON.iter().chain(container).chain(own);
    if let Some(field) = fields.keys().find(|f| !allowed().any(|a| a == f)) {
        return Err(IntentError::UnknownField {
            kind,
            field: field.clone(),
            known: allowed().copied().collect::<Vec<_>>().join(", "),
        });
    }
    builder(&Fields {
        kind,
        map: fields,
        defaults,
    })
}

/// The object's metadata, and the value of its `app.kubernetes.io/name` label.
struct Meta {
    metadata: Value,
    labels: Map<String, Value>,
    name_label: String,
}

fn metadata(f: &Fields<'_>) -> Result<Meta, IntentError> {
    let name = f.string("name")?.unwrap_or_else(|| f.defaults.name.clone());
    let namespace = f
        .string("namespace")?
        .or_else(|| f.defaults.namespace.clone());
    let mut labels = Map::new();
    labels.insert(NAME_LABEL.to_owned(), Value::String(name.clone()));
    labels.insert(
        MANAGED_BY_LABEL.to_owned(),
        Value::String("inrun".to_owned()),
    );
    labels.extend(f.string_map("labels")?.unwrap_or_default());
    let name_label = labels
        .get(NAME_LABEL)
        .and_then(Value::as_str)
        .unwrap_or(&name)
        .to_owned();
    let mut metadata = Map::new();
    metadata.insert("name".to_owned(), Value::String(name));
    put(&mut metadata, "namespace", namespace);
    metadata.insert("labels".to_owned(), Value::Object(labels.clone()));
    put(&mut metadata, "annotations", f.string_map("annotations")?);
    Ok(Meta {
        metadata: Value::Object(metadata),
        labels,
        name_label,
    })
}

fn object(api_version: &str, kind: &str, meta: &Meta) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("apiVersion".to_owned(), api_version.into());
    map.insert("kind".to_owned(), kind.into());
    map.insert("metadata".to_owned(), meta.metadata.clone());
    map
}

/// The single container of a deployment or job, named after the object.
fn container(f: &Fields<'_>, name: &Value) -> Result<Map<String, Value>, IntentError> {
    let mut c = Map::new();
    c.insert("name".to_owned(), name.clone());
    c.insert("image".to_owned(), f.required_string("image")?.into());
    put(&mut c, "command", f.string_list("command")?);
    put(&mut c, "args", f.string_list("args")?);
    put(&mut c, "env", env(f)?);
    put(&mut c, "resources", f.object("resources")?);
    Ok(c)
}

/// `env` as a map (`{NAME: value}`) or as Kubernetes' own list of `{name, ...}`.
fn env(f: &Fields<'_>) -> Result<Option<Vec<Value>>, IntentError> {
    match f.get("env") {
        None => Ok(None),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !item.get("name").is_some_and(Value::is_string) {
                    return Err(f.invalid(format!("env[{i}]"), "an object with a `name`"));
                }
            }
            Ok(Some(items.clone()))
        }
        Some(_) => Ok(f.string_map("env")?.map(|map| {
            map.into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect()
        })),
    }
}

/// `port` (one number, named `http`) or `ports` (a number, or a list of numbers or of
/// `{name, containerPort | port, protocol}`).
fn container_ports(f: &Fields<'_>) -> Result<Option<Vec<Value>>, IntentError> {
    if f.get("port").is_some() && f.get("ports").is_some() {
        return Err(IntentError::Conflict {
            kind: f.kind,
            first: "port",
            second: "ports",
        });
    }
    if let Some(port) = f.port("port")? {
        return Ok(Some(vec![json!({"name": "http", "containerPort": port})]));
    }
    let items = match f.get("ports") {
        None => return Ok(None),
        Some(Value::Array(items)) => items.clone(),
        Some(single) => vec![single.clone()],
    };
    let single = items.len() == 1;
    let mut ports = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("ports[{i}]");
        let expected = "a port number or an object with `containerPort`";
        let as_port = |v: Option<&Value>| {
            v.and_then(Value::as_i64)
                .filter(|p| (1..=PORT_MAX).contains(p))
        };
        let port = match item {
            Value::Number(_) => {
                let number = as_port(Some(item)).ok_or_else(|| f.invalid(&field, expected))?;
                if single {
                    json!({"name": "http", "containerPort": number})
                } else {
                    json!({"containerPort": number})
                }
            }
            Value::Object(map) => {
                let number = as_port(map.get("containerPort").or_else(|| map.get("port")))
                    .ok_or_else(|| f.invalid(&field, expected))?;
                let mut port = Map::new();
                put(&mut port, "name", map.get("name").cloned());
                port.insert("containerPort".to_owned(), number.into());
                put(&mut port, "protocol", map.get("protocol").cloned());
                Value::Object(port)
            }
            _ => return Err(f.invalid(field, expected)),
        };
        ports.push(port);
    }
    Ok(Some(ports))
}

fn deployment(f: &Fields<'_>) -> Result<Value, IntentError> {
    let meta = metadata(f)?;
    let mut c = container(f, &meta.metadata["name"])?;
    put(&mut c, "ports", container_ports(f)?);
    let mut pod = Map::new();
    put(
        &mut pod,
        "serviceAccountName",
        f.string("serviceAccountName")?,
    );
    pod.insert("containers".to_owned(), json!([c]));
    let mut obj = object("apps/v1", "Deployment", &meta);
    obj.insert(
        "spec".to_owned(),
        json!({
            "replicas": f.count("replicas")?.unwrap_or(1),
            "selector": {"matchLabels": {NAME_LABEL: meta.name_label}},
            "template": {"metadata": {"labels": meta.labels}, "spec": pod},
        }),
    );
    Ok(Value::Object(obj))
}

fn service(f: &Fields<'_>) -> Result<Value, IntentError> {
    let meta = metadata(f)?;
    let port = f.port("port")?.unwrap_or(80);
    let target = f.port_or_name("targetPort")?.unwrap_or_else(|| port.into());
    let selector = match f.string_map("selector")? {
        Some(selector) => Value::Object(selector),
        None => json!({NAME_LABEL: meta.name_label}),
    };
    let kind = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    let mut obj = object("v1", "Service", &meta);
    obj.insert(
        "spec".to_owned(),
        json!({
            "type": f.choice("type", &kind, "ClusterIP")?,
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": target, "protocol": "TCP"}],
        }),
    );
    Ok(Value::Object(obj))
}

fn configmap(f: &Fields<'_>) -> Result<Value, IntentError> {
    let mut obj = object("v1", "ConfigMap", &metadata(f)?);
    put(&mut obj, "data", f.string_map("data")?);
    Ok(Value::Object(obj))
}

fn secret(f: &Fields<'_>) -> Result<Value, IntentError> {
    let mut obj = object("v1", "Secret", &metadata(f)?);
    obj.insert(
        "type".to_owned(),
        f.string("type")?
            .unwrap_or_else(|| "Opaque".to_owned())
            .into(),
    );
    put(&mut obj, "stringData", f.string_map("stringData")?);
    put(&mut obj, "data", f.string_map("data")?);
    Ok(Value::Object(obj))
}

fn serviceaccount(f: &Fields<'_>) -> Result<Value, IntentError> {
    Ok(Value::Object(object("v1", "ServiceAccount", &metadata(f)?)))
}

fn job(f: &Fields<'_>) -> Result<Value, IntentError> {
    let meta = metadata(f)?;
    let mut obj = object("batch/v1", "Job", &meta);
    let c = container(f, &meta.metadata["name"])?;
    let mut pod = Map::new();
    pod.insert(
        "restartPolicy".to_owned(),
        f.choice("restartPolicy", &["Never", "OnFailure"], "Never")?
            .into(),
    );
    put(
        &mut pod,
        "serviceAccountName",
        f.string("serviceAccountName")?,
    );
    pod.insert("containers".to_owned(), json!([c]));
    let mut spec = Map::new();
    spec.insert(
        "backoffLimit".to_owned(),
        f.count("backoffLimit")?.unwrap_or(3).into(),
    );
    put(
        &mut spec,
        "ttlSecondsAfterFinished",
        f.count("ttlSecondsAfterFinished")?,
    );
    spec.insert(
        "template".to_owned(),
        json!({"metadata": {"labels": meta.labels}, "spec": pod}),
    );
    obj.insert("spec".to_owned(), Value::Object(spec));
    Ok(Value::Object(obj))
}

fn ingress(f: &Fields<'_>) -> Result<Value, IntentError> {
    let meta = metadata(f)?;
    let host = f.string("host")?;
    let service_name = f.string("serviceName")?.unwrap_or_else(|| {
        meta.metadata["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let port = match f.port_or_name("servicePort")?.unwrap_or_else(|| 80.into()) {
        Value::String(name) => json!({"name": name}),
        number => json!({"number": number}),
    };
    let path_types = ["Prefix", "Exact", "ImplementationSpecific"];
    let path = json!({
        "path": f.string("path")?.unwrap_or_else(|| "/".to_owned()),
        "pathType": f.choice("pathType", &path_types, "Prefix")?,
        "backend": {"service": {"name": service_name, "port": port}},
    });
    let mut rule = Map::new();
    put(&mut rule, "host", host.clone());
    rule.insert("http".to_owned(), json!({"paths": [path]}));
    let mut spec = Map::new();
    put(&mut spec, "ingressClassName", f.string("ingressClassName")?);
    put(
        &mut spec,
        "tls",
        ingress_tls(f, host.as_deref())?.map(|tls| vec![tls]),
    );
    spec.insert("rules".to_owned(), json!([rule]));
    let mut obj = object("networking.k8s.io/v1", "Ingress", &meta);
    obj.insert("spec".to_owned(), Value::Object(spec));
    Ok(Value::Object(obj))
}

/// `tls: my-cert` or `tls: {secretName, hosts}`; hosts default to `[host]`.
fn ingress_tls(f: &Fields<'_>, host: Option<&str>) -> Result<Option<Value>, IntentError> {
    let expected = "a secret name or an object with `secretName`";
    let (secret, hosts) = match f.get("tls") {
        None => return Ok(None),
        Some(Value::String(secret)) => (secret.clone(), None),
        Some(Value::Object(map)) => {
            let secret = map
                .get("secretName")
                .and_then(Value::as_str)
                .ok_or_else(|| f.invalid("tls", expected))?;
            (secret.to_owned(), map.get("hosts").cloned())
        }
        Some(_) => return Err(f.invalid("tls", expected)),
    };
    let mut tls = Map::new();
    put(
        &mut tls,
        "hosts",
        hosts.or_else(|| host.map(|h| json!([h]))),
    );
    tls.insert("secretName".to_owned(), secret.into());
    Ok(Some(Value::Object(tls)))
}
