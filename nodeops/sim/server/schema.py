"""Structural-schema handling for custom resources: defaulting, pruning and validation.

This is what apiextensions-apiserver does with a CRD's `openAPIV3Schema` on every write, so a
custom resource read back from the simulator has the same shape as on a real cluster, and an
invalid one is refused with a 422 that names the field.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def apply_defaults(obj: Any, schema: dict[str, Any] | None) -> Any:
    """Fill `default`s of absent properties, recursively, in place."""
    if not schema:
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(obj[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, value in obj.items():
                if key not in props:
                    apply_defaults(value, extra)
    elif isinstance(obj, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in obj:
                apply_defaults(item, items)
    return obj


def prune(obj: Any, schema: dict[str, Any] | None, top: bool = False) -> Any:
    """Drop fields the schema does not declare, unless it preserves unknown fields."""
    if not schema or schema.get("x-kubernetes-preserve-unknown-fields"):
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and extra is None and not top:
            return obj if schema.get("type") != "object" else {}
        for key in list(obj):
            if top and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                prune(obj[key], props[key])
            elif isinstance(extra, dict):
                prune(obj[key], extra)
            elif extra is True:
                continue
            else:
                del obj[key]
    elif isinstance(obj, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in obj:
                prune(item, items)
    return obj


def validate(obj: Any, schema: dict[str, Any] | None, path: str = "") -> list[tuple[str, str, str]]:
    """Errors as (reason, field, message), kube's FieldValueRequired/Invalid/NotSupported."""
    if not schema:
        return []
    errors: list[tuple[str, str, str]] = []
    if obj is None:
        if schema.get("nullable"):
            return []
        return [
            (
                "FieldValueTypeInvalid",
                path,
                f'Invalid value: "null": {path} in body must be of type {schema.get("type", "object")}: "null"',
            )
        ]
    typ = schema.get("type")
    if typ and not (
        isinstance(obj, _TYPES.get(typ, (object,)))
        and not (typ in ("integer", "number") and isinstance(obj, bool))
    ):
        if not (schema.get("x-kubernetes-int-or-string") and isinstance(obj, (int, str))):
            got = _json_type(obj)
            return [
                (
                    "FieldValueTypeInvalid",
                    path,
                    f'Invalid value: "{got}": {path} in body must be of type {typ}: "{got}"',
                )
            ]
    if "enum" in schema and obj not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(
            (
                "FieldValueNotSupported",
                path,
                f'Unsupported value: "{obj}": supported values: {allowed}',
            )
        )
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        errors.extend(_number_errors(obj, schema, path))
    if isinstance(obj, str):
        if "minLength" in schema and len(obj) < schema["minLength"]:
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f'Invalid value: "{obj}": {path} in body should be at least {schema["minLength"]} chars long',
                )
            )
        if "pattern" in schema:
            if not re.search(schema["pattern"], obj):
                errors.append(
                    (
                        "FieldValueInvalid",
                        path,
                        f"Invalid value: \"{obj}\": {path} in body should match '{schema['pattern']}'",
                    )
                )
    if isinstance(obj, dict):
        for req in schema.get("required") or []:
            if req not in obj:
                field = f"{path}.{req}" if path else req
                errors.append(("FieldValueRequired", field, "Required value"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                errors.extend(validate(value, sub, f"{path}.{key}" if path else key))
    elif isinstance(obj, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(obj):
                errors.extend(validate(item, items, f"{path}[{i}]"))
    return errors


# The integer range kube-openapi converts a number to, per format (no format: int64).
_INTEGER_FORMATS: dict[str, tuple[int, int]] = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_FLOAT32_MAX = 3.4028234663852886e38


def _go_text(value: int | float) -> str:
    """How kube-openapi writes a number before converting it to the format's Go type: an int
    as it is, a float64 (every schema boundary is one) as strconv.FormatFloat(v, 'f', -1, 64),
    the shortest digits that read back, padded with zeros (2**63 - 1 is 9223372036854776000)."""
    if isinstance(value, int):
        return str(value)
    return format(Decimal(repr(value)).normalize(), "f")


def _holds(value: int | float, schema: dict[str, Any]) -> bool:
    """Whether the value converts to the Go type of the schema's type and format
    (IsValueValidAgainstRange)."""
    text = _go_text(value)
    fmt = str(schema.get("format") or "")
    if schema.get("type") == "integer":
        low, high = _INTEGER_FORMATS.get(fmt, _INTEGER_FORMATS["int64"])
        return bool(re.fullmatch(r"[-+]?[0-9]+", text)) and low <= int(text) <= high
    if fmt in ("float", "float32"):
        return abs(float(text)) <= _FLOAT32_MAX
    return True


def _range_error(prefix: str, schema: dict[str, Any], path: str) -> tuple[str, str, str]:
    """kube-openapi's error for a value or boundary its format cannot hold. It is a plain error,
    not a field error, so apiextensions reports it at the root of what it validated (field "")
    with an empty value, naming the path only in the text."""
    typ = schema.get("type", "number")
    fmt = schema.get("format")
    kind = f"with format {fmt}" if fmt else "(default format)"
    return (
        "FieldValueInvalid",
        "",
        f'Invalid value: "": {prefix} value must be of type {typ} {kind} in {path}',
    )


def _number_errors(
    value: int | float, schema: dict[str, Any], path: str
) -> list[tuple[str, str, str]]:
    """kube-openapi's numberValidator, in its order: the value's own range, then the minimum,
    then the maximum; a boundary its format cannot hold is reported and then still compared
    as a plain number."""
    errors: list[tuple[str, str, str]] = []
    if not _holds(value, schema):
        errors.append(_range_error("Checked", schema, path))
    if "minimum" in schema:
        low = schema["minimum"]
        if not _holds(float(low), schema):
            errors.append(_range_error("Minimum boundary", schema, path))
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < low or (exclusive and value == low):
            relation = "greater than" if exclusive else "greater than or equal to"
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {value}: {path} in body should be {relation} {low}",
                )
            )
    if "maximum" in schema:
        high = schema["maximum"]
        if not _holds(float(high), schema):
            errors.append(_range_error("Maximum boundary", schema, path))
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > high or (exclusive and value == high):
            relation = "less than" if exclusive else "less than or equal to"
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {value}: {path} in body should be {relation} {high}",
                )
            )
    return errors


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
