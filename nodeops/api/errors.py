"""Validation errors of our custom resources, reported the way the API server reports them.

Every problem names the field it is about with a Kubernetes field path (`spec.pods[0].selector`),
so a message read in a log, an Event or a status condition points at the line of the manifest to
fix, and its reader needs to know nothing about pydantic.
"""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = ["FieldError", "FieldProblem", "InvalidResource", "invalid_resource", "join_path"]


def join_path(base: str, child: str) -> str:
    """`spec` + `drain` is `spec.drain`; `spec.nodes` + `[0]` is `spec.nodes[0]`."""
    if not child:
        return base
    if not base or child.startswith("["):
        return base + child
    return f"{base}.{child}"


class FieldProblem(ValueError):
    """A problem found by a model validator, at `field` relative to the model being validated.

    A validator does not know where its model sits in the resource, so it names fields relative
    to itself; `{}` placeholders in `reason` stand for the sibling fields in `refs`. When the
    resource is parsed, both are prefixed with the model's own path, so the final message names
    every field absolutely: `spec.drain.order: may only be set when spec.drain.behavior is Drain`.
    """

    def __init__(self, field: str, reason: str, *refs: str) -> None:
        self.field = field
        self.reason = reason
        self.refs = refs
        super().__init__(self.render(""))

    def render(self, base: str) -> str:
        """The message with the field and its references anchored at `base`."""
        return str(self.anchored(base))

    def anchored(self, base: str) -> FieldError:
        # Only a reason with references is a template, so user values in others stay verbatim.
        reason = (
            self.reason.format(*(join_path(base, r) for r in self.refs))
            if self.refs
            else self.reason
        )
        return FieldError(join_path(base, self.field), reason)


@dataclass(frozen=True)
class FieldError:
    """One problem: the field path and the reason, like an entry of a Status' `causes`."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


class InvalidResource(ValueError):
    """A resource our API refuses; `str()` is `<field>: <reason>` of the first problem.

    Every problem is in `causes` (the first one included), because fixing a manifest one error
    at a time is tedious; the message keeps to one so that it fits in a condition or an Event.
    """

    def __init__(self, field: str, reason: str, causes: Sequence[FieldError] = ()) -> None:
        self.field = field
        self.reason = reason
        self.causes: tuple[FieldError, ...] = tuple(causes) or (FieldError(field, reason),)
        super().__init__(str(FieldError(field, reason)))


def invalid_resource(exc: ValidationError, model: type[BaseModel]) -> InvalidResource:
    """Translate pydantic's errors for `model` into field paths and API-server-like reasons."""
    causes: list[FieldError] = []
    for err in exc.errors(include_url=False):
        path, annotation = _render_loc(model, err["loc"])
        problem = (err.get("ctx") or {}).get("error")
        if isinstance(problem, FieldProblem):
            causes.append(problem.anchored(path))
        else:
            causes.append(FieldError(path, _reason(err, annotation)))
    first = causes[0]
    return InvalidResource(first.field, first.reason, causes)


def _unwrap(annotation: Any) -> Any:
    """Strip `Annotated[...]` and `X | None` down to the type that holds the value."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _render_loc(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, Any]:
    """pydantic's `loc` as a Kubernetes field path, and the annotation of the field it ends at.

    The models are walked alongside the location because pydantic spells a map key the same way
    as a field name, while Kubernetes writes `matchLabels[app]` but `selector.matchLabels`.
    """
    path = ""
    annotation: Any = model
    for part in loc:
        current = _unwrap(annotation)
        origin = get_origin(current)
        if isinstance(part, int):
            path += f"[{part}]"
            annotation = get_args(current)[0] if origin in (list, tuple) else None
        elif part == "[key]":
            # An error about a map's key: the path already names that key.
            annotation = str
        elif origin is dict:
            path += f"[{part}]"
            annotation = get_args(current)[1]
        elif isinstance(current, type) and issubclass(current, BaseModel):
            path = join_path(path, part)
            annotation = _field_annotation(current, part)
        else:
            path = join_path(path, part)
            annotation = None
    return path, _unwrap(annotation)


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


_TYPE_ERRORS = {
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "string_type": "string",
    "bool_type": "boolean",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _show(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _items(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _reason(err: Any, annotation: Any) -> str:
    """The API server's wording where it has one, so both sides of the wire read alike."""
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "Required value"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "literal_error" and get_origin(annotation) is Literal:
        allowed = ", ".join(_show(v) for v in get_args(annotation))
        return f"Unsupported value: {_show(value)}: supported values: {allowed}"
    if kind in _TYPE_ERRORS:
        return f'Invalid value: "{_json_type(value)}": must be of type {_TYPE_ERRORS[kind]}'
    if kind == "too_short":
        return f"must have at least {_items(ctx['min_length'], 'item')}"
    if kind == "too_long":
        return f"must have at most {_items(ctx['max_length'], 'item')}"
    if kind == "string_too_short":
        return (
            f"Invalid value: {_show(value)}: must be at least {ctx['min_length']} characters long"
        )
    if kind == "string_too_long":
        return f"Too long: may not be more than {ctx['max_length']} characters"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: {_show(value)}: must match '{ctx['pattern']}'"
    if kind == "greater_than_equal":
        return f"Invalid value: {_show(value)}: must be greater than or equal to {ctx['ge']}"
    if kind == "less_than_equal":
        return f"Invalid value: {_show(value)}: must be less than or equal to {ctx['le']}"
    if kind.startswith("datetime") or kind.startswith("timezone"):
        return f"Invalid value: {_show(value)}: must be an RFC 3339 date-time with a time zone"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return str(err["msg"])
