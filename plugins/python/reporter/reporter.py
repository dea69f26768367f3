"""Test guest: the Python twin of the Rust ``reporter``. It returns one ConfigMap
``<name>-report`` holding ``spec.size``, a condition ``Sized`` (True when ``spec.size`` is
at least 1) and a ``Resized`` event naming the size (inrun:reconciler@0.2.0)."""

from inrun_sdk import Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    size = int((req.spec or {}).get("size") or 0)
    out = Outcome().resource({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{req.name}-report"},
        "data": {"size": str(size)},
    })
    if size >= 1:
        out.condition("Sized", True, "SizeSet", f"size is {size}")
    else:
        out.condition("Sized", False, "NoSize", "spec.size is not set")
    return out.event("Resized", f"size {size}")


WitWorld = export_reconciler(reconcile)
