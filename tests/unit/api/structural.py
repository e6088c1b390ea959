"""A checker for Kubernetes structural schemas, the rules apiextensions-apiserver enforces on v1 CRDs.

The simulated API server accepts any schema, so without this a CRD that a real cluster refuses
(or silently treats differently) would pass every test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The fields of apiextensions/v1 JSONSchemaProps; anything else is refused or dropped by kube.
ALLOWED_KEYS = frozenset(
    {
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "nullable",
        "example",
        "externalDocs",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def structural_problems(schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Every violation in `schema`, each prefixed with where it is."""
    problems: list[str] = []
    _check(schema, path or "<root>", problems, root=not path)
    return problems


def _check(node: Mapping[str, Any], path: str, out: list[str], *, root: bool = False) -> None:
    if not isinstance(node, Mapping):
        out.append(f"{path}: a schema must be an object, not {type(node).__name__}")
        return
    for key in node:
        if key not in ALLOWED_KEYS:
            out.append(f"{path}: {key} is not a JSONSchemaProps field")
    typ = node.get("type")
    free = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if typ is None and not free:
        out.append(f"{path}: type is required")
    if typ is not None and typ not in TYPES:
        out.append(f"{path}: unknown type {typ!r}")
    if node.get("x-kubernetes-int-or-string") and typ is not None:
        out.append(f"{path}: x-kubernetes-int-or-string excludes type")
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(key) or ():
            # Value validations only: no types, no nulls, no references.
            if "type" in branch or "$ref" in branch or branch.get("nullable"):
                out.append(f"{path}: {key} may only add value validations")
    if node.get("uniqueItems"):
        out.append(f"{path}: uniqueItems is forbidden (use x-kubernetes-list-type: set)")
    if node.get("additionalProperties") is False:
        out.append(f"{path}: additionalProperties: false is forbidden")
    if "properties" in node and "additionalProperties" in node:
        out.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if "properties" in node and typ != "object":
        out.append(f"{path}: properties need type object")
    if typ == "array" and not isinstance(node.get("items"), Mapping):
        out.append(f"{path}: an array needs a single items schema")
    if "default" in node and node["default"] is None and not node.get("nullable"):
        out.append(f"{path}: default null on a non-nullable field")
    scalar = _PY_TYPES.get(str(typ))
    for value in node.get("enum") or ():
        wrong_bool = isinstance(value, bool) != (typ == "boolean")
        if scalar is not None and (not isinstance(value, scalar) or wrong_bool):
            out.append(f"{path}: enum value {value!r} is not of type {typ}")
    for name in node.get("required") or ():
        if name not in (node.get("properties") or {}):
            out.append(f"{path}: required {name!r} is not a property")
    for rule in node.get("x-kubernetes-validations") or ():
        if not isinstance(rule, Mapping) or not rule.get("rule"):
            out.append(f"{path}: x-kubernetes-validations entries need a rule")
    for name, sub in (node.get("properties") or {}).items():
        sub_path = f"{path}.{name}" if not root else name
        if root and name == "metadata":
            if dict(sub) != {"type": "object"}:
                out.append("metadata: a CRD may only declare metadata as type object")
            continue
        _check(sub, sub_path, out)
    if isinstance(node.get("items"), Mapping):
        _check(node["items"], f"{path}[*]", out)
    if isinstance(node.get("additionalProperties"), Mapping):
        _check(node["additionalProperties"], f"{path}[*]", out)
    if root:
        if typ != "object":
            out.append("<root>: the root must be of type object")
        for key in ("nullable", "default"):
            if key in node:
                out.append(f"<root>: {key} is forbidden at the root")
