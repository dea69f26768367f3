"""Example constructor: a ``WebApp`` CR becomes a Deployment and a Service.

The same reconciler as the Rust ``plugins/webapp``: for the same CR both return the same
children, status, labels and errors (a conformance test in ``host/tests/lang_python.rs``
compares their ``inrun render`` output).
"""

from typing import Any, Dict

from inrun_sdk import Err, Outcome, Request, describe, export_reconciler

#: The label every object of one WebApp carries, and the selector that finds its pods.
NAME_LABEL = "app.kubernetes.io/name"

#: The label the reconciler sets on the WebApp itself.
TIER_LABEL = "demo.inrun.dev/tier"


def _unsigned(field: str, value: Any, bits: int) -> int:
    """An unsigned integer field, checked like the Rust plugin's ``u16``/``u32``."""
    expected = f"u{bits}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise Err(f"spec: invalid type: {describe(value)}, expected {expected}")
    if not 0 <= value < 2**bits:
        raise Err(f"spec: invalid value: {describe(value)}, expected {expected}")
    return value


def _spec(spec: Any) -> Dict[str, Any]:
    """The fields of a WebApp's spec with their defaults, checked in the order the CR
    lists them (so the first bad field is the one reported, as in the Rust plugin)."""
    if not isinstance(spec, dict):
        raise Err(f"spec: invalid type: {describe(spec)}, expected struct WebAppSpec")
    fields = {"image": None, "replicas": 1, "port": 8080, "env": {}}
    for key, value in spec.items():
        if key == "image":
            if value is not None and not isinstance(value, str):
                raise Err(f"spec: invalid type: {describe(value)}, expected a string")
            fields["image"] = value
        elif key == "replicas":
            fields["replicas"] = _unsigned(key, value, 32)
        elif key == "port":
            fields["port"] = _unsigned(key, value, 16)
        elif key == "env":
            if not isinstance(value, dict):
                raise Err(f"spec: invalid type: {describe(value)}, expected a map")
            for v in value.values():
                if not isinstance(v, str):
                    raise Err(f"spec: invalid type: {describe(v)}, expected a string")
            fields["env"] = value
    return fields


def reconcile(req: Request) -> Outcome:
    """Declares the Deployment and Service a WebApp CR should have, its status and its
    tier label. A finalizing CR gets an empty outcome: the host deletes the children."""
    if req.finalizing:
        return Outcome()
    if req.spec is None:
        raise Err("spec.image is required")
    spec = _spec(req.spec)
    image = spec["image"]
    if not image:
        raise Err("spec.image is required")
    name = req.name
    namespace = req.namespace or "default"
    return (
        Outcome()
        .resource(deployment(name, namespace, image, spec))
        .resource(service(name, namespace, spec["port"]))
        .status("image", image)
        .status("replicas", spec["replicas"])
        .status("url", f"http://{name}.{namespace}.svc:80")
        .label(TIER_LABEL, "web")
    )


def deployment(name: str, namespace: str, image: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    labels = {NAME_LABEL: name}
    container: Dict[str, Any] = {
        "name": "web",
        "image": image,
        "ports": [{"name": "http", "containerPort": spec["port"], "protocol": "TCP"}],
    }
    if spec["env"]:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(spec["env"].items())]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container]},
            },
        },
    }


def service(name: str, namespace: str, port: int) -> Dict[str, Any]:
    labels = {NAME_LABEL: name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": port, "protocol": "TCP"}],
        },
    }


#: A WebApp ``reconcile`` runs on when componentize-py builds the component, so every
#: instance starts warmed (the SDK's ``warm_up``).
WARM_UP = {"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
           "metadata": {"name": "warm-up", "namespace": "default"},
           "spec": {"image": "nginx:1.27", "replicas": 1, "port": 8080, "env": {"MODE": "warm-up"}}}

WitWorld = export_reconciler(reconcile, warm_up=[WARM_UP])
