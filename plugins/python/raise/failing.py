"""Test guest: every reconcile raises an exception the plugin did not catch. The SDK
turns it into an error for this call only (type, message and line), and the instance
stays usable."""

from inrun_sdk import Outcome, Request, export_reconciler


def reconcile(req: Request) -> Outcome:
    if (req.spec or {}).get("fine"):
        return Outcome().status("fine", True)
    raise ValueError(f"the python guest gave up on {req.key}")


WitWorld = export_reconciler(reconcile)
