"""Infrastructure packages in Python: the ``package`` world of ``inrun:reconciler@0.2.0``.

A package observes and converges something outside Kubernetes that a custom resource
stands for. Implement ``identity``, ``observe``, ``converge`` and ``delete`` (and
optionally ``validate``) on a class, and export it::

    from inrun_package import Identity, Observation, Workflow, export_package, fetch

    class Bucket:
        def identity(self, opts): return Identity(boundary=..., profile=opts.profile, state=[opts.name])
        def observe(self, opts): ...
        def converge(self, opts): return Workflow.completed()
        def delete(self, opts): return Workflow.completed()

    WitWorld = export_package(Bucket())

Every method receives the same ``Options``: ``config`` (``spec.config`` as a dict),
``profile``, ``state``, ``event`` (``"changed"``, ``"interval"``, ``"requested"``,
``"retry"``, ``"deleting"``), ``resource`` (group, version, plural, kind), ``namespace`` and
``name``. ``raise Err("why")`` (or any exception) fails that step; its text reaches only
the host's log, never the CR's status. ``fetch`` reaches the hosts the Blueprint grants;
``credential(name, key)`` reads the keys of Secrets it grants (in the CR's namespace).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

from inrun_sdk import Err, error

try:  # Inside a component.
    from wit_world.imports import credentials as _credentials
    from wit_world.imports import http as _http
    from wit_world.imports import infrastructure as _infra
except ImportError:  # Natively (unit tests): no host to call.
    _credentials = None
    _http = None
    _infra = None

__all__ = [
    "Err",
    "Identity",
    "Observation",
    "Options",
    "Response",
    "Workflow",
    "credential",
    "export_package",
    "fetch",
]


@dataclasses.dataclass
class Options:
    """What every call receives."""

    config: Dict[str, Any]
    profile: str
    state: str
    event: str
    resource: Dict[str, str]
    namespace: Optional[str]
    name: str

    @staticmethod
    def from_wit(o: Any) -> "Options":
        config = json.loads(o.config)
        if not isinstance(config, dict):
            raise Err("options.config is not a JSON object")
        r = o.resource
        return Options(
            config=config,
            profile=o.profile,
            state=o.state,
            event=o.event.name.lower(),
            resource={"group": r.group, "version": r.version, "plural": r.plural,
                      "kind": r.kind},
            namespace=o.namespace,
            name=o.name,
        )


@dataclasses.dataclass
class Identity:
    """Who owns the thing (``boundary``, ``profile``) and which it is (``state``: a list
    of strings or ``None``, hashed by the host)."""

    boundary: str
    profile: str
    state: List[Optional[str]]


@dataclasses.dataclass
class Observation:
    """What ``observe`` saw."""

    exists: bool = False
    matches: bool = False
    ready: bool = False


@dataclasses.dataclass
class Workflow:
    """How a ``converge`` or ``delete`` went: ``completed``, ``pending`` or ``failed``."""

    progress: str
    detail: Optional[str] = None

    @staticmethod
    def completed(detail: Optional[str] = None) -> "Workflow":
        return Workflow("completed", detail)

    @staticmethod
    def pending(detail: Optional[str] = None) -> "Workflow":
        return Workflow("pending", detail)

    @staticmethod
    def failed(detail: Optional[str] = None) -> "Workflow":
        return Workflow("failed", detail)


@dataclasses.dataclass
class Response:
    """What a server answered."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def fetch(method: str, url: str, headers: Optional[List[Tuple[str, str]]] = None,
          body: Optional[bytes] = None) -> Response:
    """An HTTP request through the host (only to hosts the Blueprint grants)."""
    if _http is None:
        raise Err("http is only available inside the host")
    answer = _http.fetch(_http.Request(method=method, url=url, headers=list(headers or []),
                                       body=body))
    return Response(status=answer.status, headers=list(answer.headers), body=bytes(answer.body))


def credential(name: str, key: str) -> str:
    """The value of ``key`` in the Secret ``name`` of the CR's namespace, when the Blueprint
    grants it (``package.capabilities.credentials``); ``Err`` says why not (never the value).
    Keep it out of what the package returns: errors and details reach the host's log."""
    if _credentials is None:
        raise Err("credentials are only available inside the host")
    return _credentials.get(name, key)


def _guarded(what: str, run: Any) -> Any:
    try:
        return run()
    except Err as e:
        raise Err(str(e.value)) from None
    except Exception as e:  # noqa: BLE001 - an exception fails only this call
        error(f"{what} raised {type(e).__name__}: {e}")
        raise Err(f"{what} raised {type(e).__name__}: {e}") from None


def export_package(package: Any) -> type:
    """The class componentize-py exports for the ``package`` world: bind it to
    ``WitWorld`` at the top level of the plugin's module."""

    def workflow(w: Any, what: str) -> Any:
        if not isinstance(w, Workflow):
            raise Err(f"{what} returned {type(w).__name__}, not a Workflow")
        progress = {"completed": _infra.Progress.COMPLETED, "pending": _infra.Progress.PENDING,
                    "failed": _infra.Progress.FAILED}.get(w.progress)
        if progress is None:
            raise Err(f"{what} returned progress {w.progress!r}")
        return _infra.Workflow(progress=progress, detail=w.detail)

    class WitWorld:
        def validate(self, opts: Any) -> List[str]:
            check = getattr(package, "validate", None)
            if check is None:
                return []
            try:
                problems = check(Options.from_wit(opts))
            except Exception as e:  # noqa: BLE001 - logged, then the step fails
                # Not a verdict on the spec (a backend down, a bug): the step fails, and
                # the host tries it again with backoff, as any failed call. Only the
                # problems it returns make the CR ValidationFailed.
                error(f"validate raised {type(e).__name__}: {e}")
                raise
            return [str(p) for p in problems or []]

        def identity(self, opts: Any) -> Any:
            i = _guarded("identity", lambda: package.identity(Options.from_wit(opts)))
            return _infra.Identity(boundary=i.boundary, profile=i.profile, state=list(i.state))

        def observe(self, opts: Any) -> Any:
            o = _guarded("observe", lambda: package.observe(Options.from_wit(opts)))
            return _infra.Observation(exists=bool(o.exists), matches=bool(o.matches),
                                      ready=bool(o.ready))

        def converge(self, opts: Any) -> Any:
            w = _guarded("converge", lambda: package.converge(Options.from_wit(opts)))
            return workflow(w, "converge")

        def delete(self, opts: Any) -> Any:
            w = _guarded("delete", lambda: package.delete(Options.from_wit(opts)))
            return workflow(w, "delete")

    return WitWorld
