"""A minimal OpenAPI v3 document per group/version, and an empty OpenAPI v2 document.

kubectl downloads `/openapi/v3` before `apply` and `create` to learn whether the server
validates fields itself (the `fieldValidation` query parameter on PATCH); with that answered
yes, it leaves validation to the server instead of failing with "failed to download openapi".
Custom resources' schemas are served, tagged with their group/version/kind, so `kubectl explain`
works for them; built-in kinds' schemas are not (the simulator has none to give, and schemas
without kube's patch-merge keys would change how a client-side apply merges lists).

kubectl reads `/openapi/v2` where v3 cannot answer, as for the items of a `List` it applies
(`kubectl apply -f` of a file whose kind is List): it validates them against the document's
definitions, skipping kinds it has none for, and a server without the document fails the whole
apply ("the server could not find the requested resource"). kube-apiserver serves it, in
protobuf (client-go asks for nothing else); here it has no definitions, so each item goes to
the server as written and is validated there.
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


V2_MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings and embedded messages."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def v2_document(accept: str) -> tuple[bytes, str]:
    """The document and its media type: in protobuf where `accept` asks for it (gnostic's
    `openapi_v2.Document`: swagger, field 1; info, 2, with title 1 and version 2), else JSON."""
    version = KUBE_VERSION["gitVersion"]
    if "protobuf" in accept:
        info = _field(1, b"Kubernetes") + _field(2, version.encode())
        return _field(1, b"2.0") + _field(2, info), V2_MEDIA_TYPE
    doc = {"swagger": "2.0", "info": {"title": "Kubernetes", "version": version}, "paths": {}}
    return orjson.dumps(doc), "application/json"
