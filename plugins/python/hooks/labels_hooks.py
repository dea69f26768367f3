"""Example hooks that adjust what a Blueprint's templates rendered; the same as the Rust
``plugins/labels-hooks``.

- ``add-labels``: label every resource, and the CR, ``demo.inrun.dev/team: <args.team>``
  (``platform`` when the Blueprint passes no ``team`` argument).
- ``annotate``: annotate every resource ``demo.inrun.dev/rendered-by: hooks``.
- ``add-sidecar``: add a ``log-shipper`` container (``busybox:1.36``) to every
  Deployment's pod template.

Hooks edit full objects only: a resource in the intent form (``{"type": ..., "fields":
...}``) has no metadata yet and is passed through untouched.
"""

from typing import Any, Dict, Iterator

from inrun_sdk import Outcome, Request, export_hooks

TEAM_LABEL = "demo.inrun.dev/team"
DEFAULT_TEAM = "platform"
RENDERED_BY = "demo.inrun.dev/rendered-by"
SIDECAR_NAME = "log-shipper"
SIDECAR_IMAGE = "busybox:1.36"


def full_objects(current: Outcome) -> Iterator[Dict[str, Any]]:
    """The resources that are full Kubernetes objects (they have a ``kind``)."""
    return (r for r in current.resources if isinstance(r, dict) and "kind" in r)


def object_field(parent: Dict[str, Any], field: str) -> Dict[str, Any]:
    """``parent[field]`` as a dict, created when missing or not a dict."""
    if not isinstance(parent.get(field), dict):
        parent[field] = {}
    return parent[field]


def metadata_map(obj: Dict[str, Any], field: str) -> Dict[str, Any]:
    return object_field(object_field(obj, "metadata"), field)


def add_labels(req: Request, current: Outcome) -> Outcome:
    """Labels every resource and the CR with the team from ``args.team``."""
    team = req.optional_arg("team", str)
    if team is None:
        team = DEFAULT_TEAM
    for resource in full_objects(current):
        metadata_map(resource, "labels")[TEAM_LABEL] = team
    return current.label(TEAM_LABEL, team)


def annotate(req: Request, current: Outcome) -> Outcome:
    """Annotates every resource as rendered by these hooks."""
    for resource in full_objects(current):
        metadata_map(resource, "annotations")[RENDERED_BY] = "hooks"
    return current


def add_sidecar(req: Request, current: Outcome) -> Outcome:
    """Adds the log-shipper sidecar to every Deployment that does not have it yet."""
    for deployment in full_objects(current):
        if deployment.get("kind") != "Deployment":
            continue
        spec = deployment.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        pod = template.get("spec") if isinstance(template, dict) else None
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if not isinstance(containers, list):
            continue
        if not any(isinstance(c, dict) and c.get("name") == SIDECAR_NAME for c in containers):
            containers.append({"name": SIDECAR_NAME, "image": SIDECAR_IMAGE})
    return current


WitWorld = export_hooks({
    "add-labels": add_labels,
    "annotate": annotate,
    "add-sidecar": add_sidecar,
})
