"""What the CEL library modules share: the optional value, argument checks, and overload
declarations.

kube declares each library function as cel-go overloads (receiver, argument types, result type).
The libraries for quantities, addresses, versions and formats declare theirs the same way, so the
checker can resolve a call to its result type, or report kube's "found no matching overload" at
compile time, from one table per library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celpy import celtypes

CelFunction = Callable[..., Any]


class Optional:
    """cel-go's optional value: `oldSelf` of an `optionalOldSelf` rule is one, and so is what
    `format.named()` and `<format>.validate()` return."""

    __slots__ = ("val",)

    def __init__(self, val: Any = None) -> None:
        self.val = val

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Optional) and other.val == self.val

    def __hash__(self) -> int:
        return hash(self.val)


@dataclass(frozen=True, slots=True)
class Overload:
    """One cel-go overload: `receiver` is the CEL type of a member call's target (None for a
    global call); types are CEL type names, `optional(list(string))` for the nested ones."""

    receiver: str | None
    args: tuple[str, ...]
    result: str


def member(receiver: str, args: tuple[str, ...], result: str) -> Overload:
    return Overload(receiver, args, result)


def glob(args: tuple[str, ...], result: str) -> Overload:
    return Overload(None, args, result)


def string_arg(value: Any) -> str:
    """The argument as a string, or cel-go's "no such overload" for any other type."""
    if not isinstance(value, str):
        raise TypeError("no such overload")
    return value


def int_arg(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, (bool, celtypes.BoolType)):
        raise TypeError("no such overload")
    return int(value)


def bool_arg(value: Any) -> bool:
    if not isinstance(value, (bool, celtypes.BoolType)):
        raise TypeError("no such overload")
    return bool(value)
