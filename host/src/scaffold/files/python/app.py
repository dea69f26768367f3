"""The @KIND@ reconciler: a ConfigMap with ``spec.message``, and the message in status."""

from inrun_sdk import Err, Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    if req.finalizing:
        return Outcome()
    spec = req.spec or {}
    message = spec.get("message", "hello")
    if not isinstance(message, str):
        raise Err("spec.message must be a string")
    return (
        Outcome()
        .resource({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": req.name, "namespace": req.namespace},
            "data": {"message": message},
        })
        .status("message", message)
    )


# A CR ``reconcile`` runs on while the component is built, so each fresh instance starts
# warmed (see the SDK README, "Warm-up").
WARM_UP = {"apiVersion": "example.inrun.dev/v1alpha1", "kind": "@KIND@",
           "metadata": {"name": "warm-up", "namespace": "default"}, "spec": {"message": "hello"}}

WitWorld = export_reconciler(reconcile, warm_up=[WARM_UP])
