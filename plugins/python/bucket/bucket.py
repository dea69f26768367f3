"""Example infrastructure package in Python: a "bucket" held by an HTTP service.

The same protocol as the Rust test package ``plugins/infra``: the thing is
``<endpoint>/things/<profile>``; ``GET`` observes it (404: absent; else ``size`` and
``ready``), ``PUT {"size": n}`` converges it (202: still working), ``DELETE`` deletes it.
"""

import json

from inrun_package import Err, Identity, Observation, Workflow, export_package, fetch


def _url(opts):
    endpoint = opts.config.get("endpoint")
    if not isinstance(endpoint, str):
        raise Err("config.endpoint is required")
    return f"{endpoint.rstrip('/')}/things/{opts.profile}"


def _headers(opts):
    return [("x-inrun-event", opts.event), ("content-type", "application/json")]


class Bucket:
    def validate(self, opts):
        size = opts.config.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            return [f"config.size must be a whole number from 1, got {size!r}"]
        return []

    def identity(self, opts):
        return Identity(boundary=opts.config["endpoint"], profile=opts.profile,
                        state=[opts.namespace, opts.name, opts.config.get("zone")])

    def observe(self, opts):
        answer = fetch("GET", _url(opts), _headers(opts))
        if answer.status == 404:
            return Observation()
        if answer.status != 200:
            raise Err(f"observe: the service answered {answer.status}")
        thing = answer.json()
        return Observation(exists=True, matches=thing.get("size") == opts.config["size"],
                           ready=bool(thing.get("ready")))

    def converge(self, opts):
        body = json.dumps({"size": opts.config["size"]}).encode()
        answer = fetch("PUT", _url(opts), _headers(opts), body)
        if answer.status in (200, 201, 204):
            return Workflow.completed()
        if answer.status == 202:
            return Workflow.pending()
        raise Err(f"converge: the service answered {answer.status}")

    def delete(self, opts):
        answer = fetch("DELETE", _url(opts), _headers(opts))
        if answer.status in (200, 204, 404):
            return Workflow.completed()
        if answer.status == 202:
            return Workflow.pending()
        raise Err(f"delete: the service answered {answer.status}")


WitWorld = export_package(Bucket())
