"""Test guest: loops forever unless the CR's spec says ``fine: true``. The host's
deadline must interrupt it and fail only this call."""

from inrun_sdk import Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    if (req.spec or {}).get("fine"):
        return Outcome().status("fine", True)
    n = 0
    while True:
        n += 1


WitWorld = export_reconciler(reconcile)
