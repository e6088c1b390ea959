"""A minimal OpenAPI v3 document per group/version.

kubectl downloads `/openapi/v3` before `apply` and `create` to learn whether the server
validates fields itself (the `fieldValidation` query parameter on PATCH); with that answered
yes, it leaves validation to the server instead of failing with "failed to download openapi".
Schemas are not served: nothing that talks to the simulator needs `kubectl explain`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from nodeops.sim.server.discovery import KUBE_VERSION
from nodeops.sim.server.resources import ResourceType

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _gv_path(rt: ResourceType) -> str:
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def root(types: Iterable[ResourceType]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rt in types:
        gv = _gv_path(rt)
        if gv not in paths:
            digest = hashlib.sha256(gv.encode()).hexdigest()[:32].upper()
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def group_version(types: Iterable[ResourceType], gv: str) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    found = False
    for rt in types:
        if _gv_path(rt) != gv:
            continue
        found = True
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        params = [
            {"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for p in _QUERY_PARAMS
        ]
        prefix = f"/{gv}/namespaces/{{namespace}}" if rt.namespaced else f"/{gv}"
        item = f"{prefix}/{rt.plural}/{{name}}"
        collection = f"{prefix}/{rt.plural}"
        op = {"x-kubernetes-group-version-kind": gvk, "responses": {"200": {"description": "OK"}}}
        paths[item] = {
            "get": {**op, "x-kubernetes-action": "get"},
            "put": {**op, "x-kubernetes-action": "put", "parameters": params},
            "patch": {**op, "x-kubernetes-action": "patch", "parameters": params},
            "delete": {**op, "x-kubernetes-action": "delete"},
        }
        paths[collection] = {
            "get": {**op, "x-kubernetes-action": "list"},
            "post": {**op, "x-kubernetes-action": "post", "parameters": params},
        }
    if not found:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
