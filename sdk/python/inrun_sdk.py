"""Write Inrun reconcilers and hooks in Python, built into WebAssembly components with
componentize-py.

A plugin is one module that defines its logic as plain functions and exports them with
one call, bound to the name componentize-py looks for, ``WitWorld``::

    from inrun_sdk import Err, Outcome, Request, export_reconciler

    def reconcile(req: Request) -> Outcome:
        if req.finalizing:
            return Outcome()
        who = (req.spec or {}).get("who")
        if not who:
            raise Err("spec.who is required")
        return Outcome().status("greeted", who).label("demo.inrun.dev/greeted", "yes")

    WitWorld = export_reconciler(reconcile)

- ``export_reconciler(fn)``: a full reconciler (Inrun's *constructor* kind), the
  ``reconciler`` world of ``inrun:reconciler@0.1.0``; ``fn(req) -> Outcome``.
- ``export_hooks({"name": fn, ...})``: named functions that adjust the outcome a
  Blueprint's templates rendered, the ``hooks`` world; ``fn(req, current) -> Outcome``.

``raise Err("message")`` fails the call with that message (the host records a
``ReconcileError`` event and retries with backoff). Any other exception fails the call
too: its type, message and the line that raised it become the error, and the traceback
goes to the host's log.

The module also imports without the generated bindings (plain CPython), so a plugin's
logic can be unit-tested natively; there, ``log`` writes to standard error.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

try:  # Inside a component: the bindings componentize-py generates for the world.
    from componentize_py_types import Err
    from wit_world.imports import host as _host
    try:  # A world of inrun:reconciler@0.2.0: its outcome carries conditions and events.
        from wit_world.imports import inrun_reconciler_types_0_1_0 as _wit
        from wit_world.imports import inrun_reconciler_types_0_2_0 as _wit2
    except ImportError:  # A 0.1.0 world.
        from wit_world.imports import types as _wit
        _wit2 = None
except ImportError:  # Natively (unit tests): stand-ins with the same shape.
    import dataclasses as _dc
    import enum as _enum
    import types as _types

    _host = None

    class Err(Exception):  # type: ignore[no-redef]
        """The failure case of a WIT ``result``: ``raise Err("why")`` fails the call."""

        def __init__(self, value: Any) -> None:
            super().__init__(value)
            self.value = value

    @_dc.dataclass
    class _Request:
        key: str
        api_version: str
        kind: str
        object: str
        args: str
        finalizing: bool
        target: Optional[str]
        children: Optional[str]

    @_dc.dataclass
    class _Cleanup:
        after_seconds: int

    @_dc.dataclass
    class _Outcome:
        status: Optional[str]
        resources: List[str]
        labels: List[Tuple[str, str]]
        annotations: List[Tuple[str, str]]
        requeue: bool
        requeue_after_ms: Optional[int]
        cleanup: Optional[_Cleanup]

    _wit = _types.SimpleNamespace(
        Request=_Request, Outcome=_Outcome, Cleanup=_Cleanup,
        Level=_enum.Enum("Level", "TRACE DEBUG INFO WARN ERROR"),
    )

    @_dc.dataclass
    class _Condition:
        type: str
        status: Optional[bool]
        reason: str
        message: str

    _EventType = _enum.Enum("EventType", "NORMAL WARNING")

    @_dc.dataclass
    class _Event:
        type: Any
        reason: str
        message: str

    @_dc.dataclass
    class _Outcome2(_Outcome):
        conditions: List[_Condition]
        events: List[_Event]

    _wit2 = _types.SimpleNamespace(
        Outcome=_Outcome2, Condition=_Condition, Event=_Event, EventType=_EventType,
    )


__all__ = [
    "Err",
    "Outcome",
    "Request",
    "export_hooks",
    "export_reconciler",
    "describe",
    "log",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
]

# ---------------------------------------------------------------------------------------
# Logging


_LEVELS = ("trace", "debug", "info", "warn", "error")

#: True while ``export_reconciler`` or ``export_hooks`` run their warm-up requests: log
#: lines are dropped.
_warming = False


def log(level: str, message: str) -> None:
    """Writes ``message`` to the host's log at ``level`` (``trace``, ``debug``, ``info``,
    ``warn`` or ``error``). The host truncates long messages."""
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; one of {', '.join(_LEVELS)}")
    if _warming:
        return
    message = str(message)
    if _host is None:
        print(f"[{level}] {message}", file=sys.stderr)
    else:
        _host.log(_wit.Level[level.upper()], message)


def trace(message: str) -> None:
    """Writes ``message`` to the host's log at ``trace``."""
    log("trace", message)


def debug(message: str) -> None:
    """Writes ``message`` to the host's log at ``debug``."""
    log("debug", message)


def info(message: str) -> None:
    """Writes ``message`` to the host's log at ``info``."""
    log("info", message)


def warn(message: str) -> None:
    """Writes ``message`` to the host's log at ``warn``."""
    log("warn", message)


def error(message: str) -> None:
    """Writes ``message`` to the host's log at ``error``."""
    log("error", message)


# ---------------------------------------------------------------------------------------
# JSON values and checks


def describe(value: Any) -> str:
    """A JSON value as an error message names it: ``string "x"``, ``integer `7```,
    ``map``... (the wording the Rust SDK's messages use)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _expect(where: str, value: Any, kind: Any) -> Any:
    """Checks that ``value`` has the JSON type ``kind`` (``str``, ``int``, ``float``,
    ``bool``, ``dict``, ``list``); raises ``Err("<where>: invalid type: ...")``."""
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
             dict: "a map", list: "a sequence"}
    if kind is Any or kind is None:
        return value
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise Err(f"{where}: invalid type: {describe(value)}, expected {names.get(kind, kind)}")
    return value


def _parse(field: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise Err(f"{field} is not valid JSON: {e}") from None


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Err(f"the outcome is not JSON: {e}") from None


# ---------------------------------------------------------------------------------------
# Request


class Request:
    """What the host asks about one custom resource (CR).

    Attributes: ``key`` ("namespace/name", or "name" when cluster-scoped),
    ``api_version``, ``kind``, ``object`` (the CR as a dict), ``args`` (the rendered
    ``reconcile.args`` as a dict), ``finalizing`` (True while the CR is being deleted),
    ``target`` (the serve target, or None) and ``children`` (observed children grouped
    by kind then name when the Blueprint sets ``request.children``, else None).
    """

    __slots__ = ("key", "api_version", "kind", "object", "args", "finalizing", "target",
                 "children")

    def __init__(self, key: str, api_version: str, kind: str, object: Any, args: Any,
                 finalizing: bool = False, target: Optional[str] = None,
                 children: Any = None) -> None:
        self.key = key
        self.api_version = api_version
        self.kind = kind
        self.object = object
        self.args = args
        self.finalizing = finalizing
        self.target = target
        self.children = children

    @classmethod
    def for_object(cls, object: Dict[str, Any], args: Optional[Dict[str, Any]] = None) -> "Request":
        """A request for ``object`` as the host would send it (for unit tests)."""
        meta = object.get("metadata") or {}
        name, namespace = meta.get("name") or "", meta.get("namespace") or ""
        return cls(
            key=f"{namespace}/{name}" if namespace else name,
            api_version=object.get("apiVersion") or "",
            kind=object.get("kind") or "",
            object=object,
            args={} if args is None else args,
        )

    @classmethod
    def from_wit(cls, req: Any) -> "Request":
        """Parses the JSON text fields of the WIT ``request`` record."""
        return cls(
            key=req.key,
            api_version=req.api_version,
            kind=req.kind,
            object=_parse("request.object", req.object),
            args=_parse("request.args", req.args),
            finalizing=req.finalizing,
            target=req.target,
            children=None if req.children is None else _parse("request.children", req.children),
        )

    def to_wit(self) -> Any:
        """The WIT ``request`` record (inside a component only)."""
        return _wit.Request(
            key=self.key, api_version=self.api_version, kind=self.kind,
            object=_dump(self.object), args=_dump(self.args), finalizing=self.finalizing,
            target=self.target,
            children=None if self.children is None else _dump(self.children),
        )

    def _meta(self, field: str) -> Optional[str]:
        meta = self.object.get("metadata") if isinstance(self.object, dict) else None
        value = meta.get(field) if isinstance(meta, dict) else None
        return value if isinstance(value, str) and value else None

    @property
    def name(self) -> str:
        """``metadata.name``, or the name part of ``key``."""
        return self._meta("name") or self.key.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> Optional[str]:
        """``metadata.namespace``, or the namespace part of ``key``; None when
        cluster-scoped."""
        ns = self._meta("namespace")
        if ns:
            return ns
        return self.key.split("/", 1)[0] if "/" in self.key else None

    @property
    def spec(self) -> Any:
        """The CR's ``spec`` (None when it has none)."""
        return self.object.get("spec") if isinstance(self.object, dict) else None

    def optional_arg(self, name: str, kind: Any = None) -> Any:
        """The argument ``name`` of the rendered ``reconcile.args``, or None when missing
        or null. With ``kind`` (``str``, ``int``, ``float``, ``bool``, ``dict``, ``list``)
        a value of another JSON type raises ``Err("args.NAME: invalid type: ...")``."""
        value = self.args.get(name) if isinstance(self.args, dict) else None
        if value is None:
            return None
        return _expect(f"args.{name}", value, kind)

    def arg(self, name: str, kind: Any = None) -> Any:
        """Like ``optional_arg``, but a missing or null argument raises
        ``Err("args.NAME is required")``."""
        value = self.optional_arg(name, kind)
        if value is None:
            raise Err(f"args.{name} is required")
        return value

    def __repr__(self) -> str:
        return f"Request(key={self.key!r}, kind={self.kind!r}, finalizing={self.finalizing})"


# ---------------------------------------------------------------------------------------
# Outcome


def _seconds(delay: Any) -> float:
    if isinstance(delay, datetime.timedelta):
        return delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise TypeError(f"a delay is seconds (a non-negative number) or a timedelta, not {delay!r}")
    return float(delay)


class Outcome:
    """What a reconciler declares the CR should become. The builder methods return the
    outcome, so calls chain; the attributes are public, so a hook may also edit
    ``current.resources`` in place.

    Attributes (the builder methods own the short names): ``status_fields`` (dict or
    None), ``resources`` (list of dicts), ``labels`` and ``annotations`` (dicts of str),
    ``requeue_now`` (bool), ``requeue_after_ms`` and ``cleanup_after_s`` (int or None).
    """

    __slots__ = ("status_fields", "resources", "labels", "annotations", "requeue_now",
                 "requeue_after_ms", "cleanup_after_s", "conditions", "events")

    def __init__(self) -> None:
        self.status_fields: Optional[Dict[str, Any]] = None
        self.resources: List[Any] = []
        self.labels: Dict[str, str] = {}
        self.annotations: Dict[str, str] = {}
        self.requeue_now = False
        self.requeue_after_ms: Optional[int] = None
        self.cleanup_after_s: Optional[int] = None
        self.conditions: List[Dict[str, Any]] = []
        self.events: List[Dict[str, str]] = []

    def condition(self, type: str, status: Optional[bool], reason: str = "",
                  message: str = "") -> "Outcome":
        """Sets a condition on the CR: ``status`` True, False or None (Unknown). Merged by
        type with those already there; ``Ready`` and ``Reconciled`` are the host's. Needs
        a component of ``inrun:reconciler@0.2.0``."""
        self.conditions = [c for c in self.conditions if c["type"] != type]
        self.conditions.append({"type": type, "status": status, "reason": reason,
                                "message": message})
        return self

    def event(self, reason: str, message: str = "", warning: bool = False) -> "Outcome":
        """Asks for an event on the CR (``Warning`` when ``warning``). The host rate-limits
        a CR's events. Needs a component of ``inrun:reconciler@0.2.0``."""
        self.events.append({"type": "Warning" if warning else "Normal", "reason": reason,
                            "message": message})
        return self

    def resource(self, obj: Dict[str, Any]) -> "Outcome":
        """Adds a full Kubernetes object to apply."""
        self.resources.append(obj)
        return self

    def intent(self, type: str, fields: Dict[str, Any]) -> "Outcome":
        """Adds an object in the intent form ``{"type": ..., "fields": {...}}``."""
        self.resources.append({"type": type, "fields": fields})
        return self

    def status(self, key: str, value: Any) -> "Outcome":
        """Sets ``status.<key>`` (merged into the CR's status after ``emit.status``)."""
        if self.status_fields is None:
            self.status_fields = {}
        self.status_fields[key] = value
        return self

    def status_object(self, fields: Mapping[str, Any]) -> "Outcome":
        """Merges every key of ``fields`` into the status; later keys win."""
        if self.status_fields is None:
            self.status_fields = {}
        self.status_fields.update(fields)
        return self

    def label(self, key: str, value: str) -> "Outcome":
        """Sets a label on the CR; a key dropped from a later outcome is removed."""
        self.labels[key] = value
        return self

    def annotation(self, key: str, value: str) -> "Outcome":
        """Sets an annotation on the CR, with the same rules as labels."""
        self.annotations[key] = value
        return self

    def requeue(self) -> "Outcome":
        """Reconcile again soon. While the CR is deleting, this holds the deletion."""
        self.requeue_now = True
        return self

    def requeue_after(self, delay: Any) -> "Outcome":
        """Reconcile again after ``delay`` (seconds, or a ``timedelta``); crosses as whole
        milliseconds. Alone it is a refresh and never holds a deleting CR."""
        self.requeue_after_ms = int(_seconds(delay) * 1000)
        return self

    def cleanup_after(self, grace: Any) -> "Outcome":
        """Ask the host to delete the CR after ``grace`` (seconds, or a ``timedelta``,
        rounded up to whole seconds)."""
        self.cleanup_after_s = min(math.ceil(_seconds(grace)), 2**32 - 1)
        return self

    def is_empty(self) -> bool:
        """True when the outcome writes nothing (it may still requeue)."""
        return not (self.resources or self.status_fields or self.labels or self.annotations)

    def to_json(self) -> Dict[str, Any]:
        """The outcome as one JSON-able dict, for tests and debugging."""
        return {
            "status": self.status_fields, "resources": self.resources,
            "labels": dict(sorted(self.labels.items())),
            "annotations": dict(sorted(self.annotations.items())),
            "requeue": self.requeue_now, "requeueAfterMs": self.requeue_after_ms,
            "cleanupAfterSeconds": self.cleanup_after_s,
            "conditions": self.conditions, "events": self.events,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Outcome({self.to_json()!r})"

    @classmethod
    def from_wit(cls, outcome: Any) -> "Outcome":
        """Parses the WIT ``outcome`` record the host passes to a hook."""
        out = cls()
        if outcome.status is not None:
            status = _parse("outcome.status", outcome.status)
            if status is not None and not isinstance(status, dict):
                raise Err("outcome.status is not a JSON object")
            out.status_fields = status
        out.resources = [_parse(f"outcome.resources[{i}]", text)
                         for i, text in enumerate(outcome.resources)]
        out.labels = dict(outcome.labels)
        out.annotations = dict(outcome.annotations)
        out.requeue_now = outcome.requeue
        out.requeue_after_ms = outcome.requeue_after_ms
        out.cleanup_after_s = None if outcome.cleanup is None else outcome.cleanup.after_seconds
        for c in getattr(outcome, "conditions", []):
            out.condition(c.type, c.status, c.reason, c.message)
        for e in getattr(outcome, "events", []):
            out.event(e.reason, e.message, warning=e.type == _wit2.EventType.WARNING)
        return out

    def to_wit(self) -> Any:
        """The WIT ``outcome`` record, its objects as JSON text."""
        def pairs(fields: Dict[str, str], what: str) -> List[Tuple[str, str]]:
            for k, v in fields.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise Err(f"{what} {k!r}: keys and values must be strings, got {v!r}")
            return sorted(fields.items())

        fields = dict(
            status=None if self.status_fields is None else _dump(self.status_fields),
            resources=[_dump(r) for r in self.resources],
            labels=pairs(self.labels, "label"),
            annotations=pairs(self.annotations, "annotation"),
            requeue=self.requeue_now,
            requeue_after_ms=self.requeue_after_ms,
            cleanup=None if self.cleanup_after_s is None else _wit.Cleanup(self.cleanup_after_s),
        )
        if _wit2 is None:
            if self.conditions or self.events:
                raise Err("conditions and events need a component built for "
                          "inrun:reconciler@0.2.0 (wit/0.2.0)")
            return _wit.Outcome(**fields)
        return _wit2.Outcome(
            **fields,
            conditions=[_wit2.Condition(type=c["type"], status=c["status"],
                                        reason=c["reason"], message=c["message"])
                        for c in self.conditions],
            events=[_wit2.Event(type=_wit2.EventType.WARNING if e["type"] == "Warning"
                                else _wit2.EventType.NORMAL,
                                reason=e["reason"], message=e["message"])
                    for e in self.events],
        )


# ---------------------------------------------------------------------------------------
# Exports


def _guarded(what: str, run: Callable[[], Any]) -> Any:
    """Runs one plugin call: an ``Err`` passes through; any other exception becomes an
    ``Err`` naming its type, message and the line that raised it, and its traceback
    goes to the host's log. The instance stays usable."""
    try:
        result = run()
    except Err as e:
        if isinstance(e.value, str):
            raise
        raise Err(str(e.value)) from None  # the WIT error is a string
    except Exception as e:  # noqa: BLE001 - every exception must fail only this call
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None and \
                os.path.basename(tb.tb_frame.f_code.co_filename) == "inrun_sdk.py":
            tb = tb.tb_next  # the plugin's frames only
        frames = traceback.extract_tb(tb)
        where = ""
        if frames:
            last = frames[-1]
            where = f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
        error("".join(traceback.format_exception(type(e), e, tb)).rstrip())
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise Err(f"{what} raised {text}{where}") from None
    if not isinstance(result, Outcome):
        raise Err(f"{what} returned {type(result).__name__}, not an Outcome")
    return result.to_wit()


#: How many times each warm-up request is run.
_WARM_UP_CALLS = 2


def _warm_up(requests: Optional[List[Any]], call: Callable[[Any], Any]) -> None:
    """Runs ``call`` on each of ``requests`` (CR objects as the host sends them, or
    ``Request``\ s) a few times, ignoring what it returns or raises, with log lines dropped.

    componentize-py imports the plugin's module when it builds the component and keeps the
    interpreter's memory as the component's starting point: what a warm-up ran (caches,
    specialised bytecode, lazily made objects) is already there in every instance."""
    global _warming
    if requests is None:
        return
    if not isinstance(requests, (list, tuple)):
        raise TypeError(f"warm_up: expected a list of CR objects, got {type(requests).__name__}")
    for r in requests:
        if not isinstance(r, (Request, dict)):
            raise TypeError(f"warm_up: expected CR objects (dicts) or Requests, got {type(r).__name__}")
    wit = [(r if isinstance(r, Request) else Request.for_object(r)).to_wit() for r in requests]
    _warming = True
    try:
        for req in wit:
            for _ in range(_WARM_UP_CALLS):
                try:
                    call(req)
                except Exception:  # noqa: BLE001 - a refused CR warms its error path
                    pass
    finally:
        _warming = False


def export_reconciler(reconcile: Callable[[Request], Outcome],
                      warm_up: Optional[List[Any]] = None) -> type:
    """The class componentize-py exports for the ``reconciler`` world: bind it to
    ``WitWorld`` at the top level of the plugin's module.

    ``reconcile(req)`` returns an ``Outcome`` or raises ``Err("why")``.

    ``warm_up``: CRs (objects as the host sends them, or ``Request``\ s) ``reconcile`` runs
    on when the module is imported, which is when componentize-py builds the component, so
    every instance starts warmed (see the README, "Warm-up"). Log lines are dropped and
    failures ignored; whatever ``reconcile`` leaves in module state is in every instance."""

    class WitWorld:
        def reconcile(self, req: Any) -> Any:
            request = Request.from_wit(req)
            return _guarded("reconcile", lambda: reconcile(request))

    WitWorld.__qualname__ = WitWorld.__name__ = "WitWorld"
    _warm_up(warm_up, WitWorld().reconcile)
    return WitWorld


def export_hooks(functions: Mapping[str, Callable[[Request, Outcome], Outcome]],
                 warm_up: Optional[List[Any]] = None) -> type:
    """The class componentize-py exports for the ``hooks`` world: bind it to
    ``WitWorld`` at the top level of the plugin's module.

    ``functions`` maps each hook name the Blueprint may list to ``fn(req, current)``,
    which returns the new ``Outcome`` (it may edit and return ``current``) or raises
    ``Err("why")``. A call to a name not in ``functions`` fails with the list of names.
    ``warm_up``: CRs every function runs on (with an empty current outcome) when the module
    is imported, as for ``export_reconciler``."""
    table = dict(functions)

    class WitWorld:
        def functions(self) -> List[str]:
            return list(table)

        def call(self, function: str, req: Any, current: Any) -> Any:
            fn = table.get(function)
            if fn is None:
                raise Err(f"unknown hook function `{function}`; this plugin has: "
                          + ", ".join(table))
            request = Request.from_wit(req)
            outcome = Outcome.from_wit(current)
            return _guarded(function, lambda: fn(request, outcome))

    world = WitWorld()
    empty = Outcome().to_wit()
    for name in table:
        _warm_up(warm_up, lambda req, name=name: world.call(name, req, empty))
    return WitWorld
