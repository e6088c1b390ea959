"""The message for a key a pydantic model does not know: which keys it does, and the closest.

Configuration files and simulator scenarios both forbid unknown keys; a misspelt key is the most
common mistake in either, so the message names the key that was probably meant.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel

__all__ = ["Loc", "unknown_key_message"]

Loc = tuple[str | int, ...]


def unknown_key_message(model: type[BaseModel], loc: Loc) -> str:
    """`loc` is where pydantic found the unknown key, from the top of `model`."""
    owner = _model_at(model, loc)
    if owner is None:
        return "unknown key"
    allowed = [f.alias or name for name, f in owner.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key; {hint}allowed: {', '.join(allowed)}"


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class whose field `loc` names, by walking field annotations from `model`."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        current = _model_in(field.annotation) if field else None
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, dict, typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
