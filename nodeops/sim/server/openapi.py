"""A minimal OpenAPI v3 document per group/version.

kubectl downloads `/openapi/v3` before `apply` and `create` to learn whether the server
validates fields itself (the `fieldValidation` query parameter on PATCH); with that answered
yes, it leaves validation to the server instead of failing with "failed to download openapi".
Custom resources' schemas are served, tagged with their group/version/kind, so `kubectl explain`
works for them; built-in kinds' schemas are not (the simulator has none to give, and schemas
without kube's patch-merge keys would change how a client-side apply merges lists).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import orjson

from nodeops.sim.server.discovery import KUBE_VERSION
from nodeops.sim.server.resources import ResourceType

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _gv_path(rt: ResourceType) -> str:
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def root(types: Iterable[ResourceType]) -> dict[str, Any]:
    """Each group/version's document, addressed by a hash of its content as kube does, so a
    client's cached copy is replaced when a definition changes."""
    types = list(types)
    paths: dict[str, Any] = {}
    for rt in types:
        gv = _gv_path(rt)
        if gv not in paths:
            doc = orjson.dumps(group_version(types, gv), option=orjson.OPT_SORT_KEYS)
            digest = hashlib.sha256(doc).hexdigest()[:32].upper()
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def _schema_name(rt: ResourceType) -> str:
    """kube's name for a custom resource's schema: the group reversed, version, kind."""
    return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])


def _custom_schema(rt: ResourceType) -> dict[str, Any] | None:
    schema = ((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, dict):
        return None
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    return {**schema, "x-kubernetes-group-version-kind": [gvk]}


def group_version(types: Iterable[ResourceType], gv: str) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    found = False
    for rt in types:
        if _gv_path(rt) != gv:
            continue
        found = True
        if rt.custom:
            schema = _custom_schema(rt)
            if schema is not None:
                schemas[_schema_name(rt)] = schema
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
        "components": {"schemas": schemas},
    }
