"""The JSON fields each built-in kind declares, for kube's strict decoding of typed objects.

kube-apiserver finds unknown fields of built-in kinds by decoding into the Go API types. The
generated kubernetes-asyncio models carry the same description (`openapi_types` and
`attribute_map` per type), so walking them answers "does this field exist here?" without a copy
of the OpenAPI document. Types are resolved lazily by name, so recursive types (JSONSchemaProps)
cost nothing until a body uses them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kubernetes_asyncio.client import models

ANY = "object"
"""The model type of a field that takes any JSON (RawExtension, IntOrString, JSON)."""

_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")
_SCALARS = frozenset({"str", "int", "float", "bool", "datetime", "date", "bytearray"})

# Kinds whose model class is not simply "<Version><Kind>".
_MODEL_NAMES: dict[tuple[str, str, str], str] = {
    ("", "v1", "Event"): "CoreV1Event",
    ("events.k8s.io", "v1", "Event"): "EventsV1Event",
    # policy/v1beta1 is gone from the client; its PDB has the same fields as policy/v1's.
    ("policy", "v1beta1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}


def model_for(group: str, version: str, kind: str) -> str | None:
    """The model type name of a built-in kind, or None when the client has none."""
    name = _MODEL_NAMES.get((group, version, kind)) or version.capitalize() + kind
    return name if getattr(models, name, None) is not None else None


@functools.cache
def fields_of(type_name: str) -> dict[str, str] | None:
    """JSON key -> model type of one model, or None when the name is not a model."""
    cls = getattr(models, type_name, None)
    if cls is None or not hasattr(cls, "attribute_map"):
        return None
    types: dict[str, str] = cls.openapi_types
    return {json_key: types[attr] for attr, json_key in cls.attribute_map.items()}


@functools.cache
def element(type_name: str) -> tuple[str, str] | None:
    """("list", item type) or ("dict", value type) for a container type, else None."""
    m = _LIST.match(type_name)
    if m:
        return "list", m.group(1)
    m = _DICT.match(type_name)
    if m:
        return "dict", m.group(1)
    return None


def is_scalar(type_name: str) -> bool:
    return type_name in _SCALARS


def walk_typed(
    value: Any, type_name: str, path: str, out: list[str], prune: bool, sort_keys: bool = False
) -> None:
    """Append the paths of unknown fields in `value` (decoded JSON) to `out`.

    Keys are visited in body order, or sorted with `sort_keys` (the order Go's encoder writes a
    patched object in before kube decodes it). With `prune`, unknown fields are removed as Go's
    decoder drops them.
    """
    if type_name == ANY or is_scalar(type_name):
        return
    container = element(type_name)
    if container is not None:
        shape, inner = container
        if inner == ANY or is_scalar(inner):
            return  # every write walks its body: paths are built only where a field can hide
        if shape == "list" and isinstance(value, list):
            for i, item in enumerate(value):
                walk_typed(item, inner, f"{path}[{i}]", out, prune, sort_keys)
        elif shape == "dict" and isinstance(value, dict):
            for key in sorted(value) if sort_keys else list(value):
                walk_typed(value[key], inner, join(path, key), out, prune, sort_keys)
        return
    fields = fields_of(type_name)
    if fields is None or not isinstance(value, dict):
        return
    for key in sorted(value) if sort_keys else list(value):
        sub = fields.get(key)
        if sub is None:
            out.append(join(path, key))
            if prune:
                del value[key]
        elif sub != ANY and not is_scalar(sub):
            walk_typed(value[key], sub, join(path, key), out, prune, sort_keys)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
