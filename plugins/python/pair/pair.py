"""Bench guest: a ``Pair`` CR becomes a ConfigMap and a headless Service of the same name,
in the CR's namespace — the same children as the Rust ``plugins/pair``, so the end-to-end
benchmark can run a Python constructor beside the Rust one (``INRUN_BENCH_MODES=python``).
"""

from inrun_sdk import Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    """Declares the two children; a finalizing CR gets an empty outcome (the host deletes
    the children)."""
    out = Outcome()
    if req.finalizing:
        return out
    spec = req.spec if isinstance(req.spec, dict) else {}
    message = spec.get("message") or ""
    name, namespace = req.name, req.namespace or "default"
    out.resources.append({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"message": message},
    })
    out.resources.append({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterIP": "None",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
    return out


WitWorld = export_reconciler(reconcile)
