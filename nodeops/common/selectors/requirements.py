"""Label requirements: the `key <op> values` terms, validated as labels.NewRequirement does.

Both the string grammar and the `{matchLabels, matchExpressions}` object form build their terms
here, so a requirement is refused with the same message whichever way it was written.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from nodeops.common.gomessages import aggregate, field_invalid
from nodeops.common.selectors.errors import SelectorError
from nodeops.common.selectors.labelsyntax import label_key_errors, label_value_errors

__all__ = [
    "BINARY_OPERATORS",
    "OP_DOES_NOT_EXIST",
    "OP_DOUBLE_EQUALS",
    "OP_EQUALS",
    "OP_EXISTS",
    "OP_GT",
    "OP_IN",
    "OP_LT",
    "OP_NOT_EQUALS",
    "OP_NOT_IN",
    "LabelRequirement",
    "new_requirement",
    "parse_int64",
]

# selection.Operator spellings, which are also what Requirement.String() dispatches on.
OP_EQUALS: Final = "="
OP_DOUBLE_EQUALS: Final = "=="
OP_NOT_EQUALS: Final = "!="
OP_IN: Final = "in"
OP_NOT_IN: Final = "notin"
OP_EXISTS: Final = "exists"
OP_DOES_NOT_EXIST: Final = "!"
OP_GT: Final = "gt"
OP_LT: Final = "lt"

BINARY_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"
_INT64_RE: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), which unlike int() refuses spaces and underscores."""
    if not _INT64_RE.fullmatch(text):
        return None
    n = int(text)
    if n < _INT64_MIN or n > _INT64_MAX:
        return None
    return n


class LabelRequirement(NamedTuple):
    """One `key <op> values` term; `values` keeps the order the requirement was built with."""

    key: str
    operator: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        op = self.operator
        if op == OP_EXISTS:
            return self.key
        if op == OP_DOES_NOT_EXIST:
            return "!" + self.key
        symbol = {
            OP_EQUALS: "=",
            OP_DOUBLE_EQUALS: "==",
            OP_NOT_EQUALS: "!=",
            OP_IN: " in ",
            OP_NOT_IN: " notin ",
            OP_GT: ">",
            OP_LT: "<",
        }[op]
        vals = self.values[0] if len(self.values) == 1 else ",".join(sorted(self.values))
        if op in (OP_IN, OP_NOT_IN):
            vals = "(" + vals + ")"
        return self.key + symbol + vals


def new_requirement(key: str, op: str, values: list[str], path: str = "") -> LabelRequirement:
    """labels.NewRequirement: validates everything and reports all problems at once."""
    prefix = path + "." if path else ""
    errs: list[str] = []
    # Go reports an empty value list as a nil slice, which encodes as `null`.
    shown_values: list[str] | None = values if values else None
    key_errs = label_key_errors(key)
    if key_errs:
        errs.append(field_invalid(prefix + "key", key, "; ".join(key_errs)))
    values_path = prefix + "values"
    if op in (OP_IN, OP_NOT_IN):
        if not values:
            errs.append(
                field_invalid(
                    values_path,
                    shown_values,
                    "for 'in', 'notin' operators, values set can't be empty",
                )
            )
    elif op in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_NOT_EQUALS):
        if len(values) != 1:
            errs.append(
                field_invalid(
                    values_path, shown_values, "exact-match compatibility requires one single value"
                )
            )
    elif op in (OP_EXISTS, OP_DOES_NOT_EXIST):
        if values:
            errs.append(
                field_invalid(
                    values_path,
                    shown_values,
                    "values set must be empty for exists and does not exist",
                )
            )
    elif op in (OP_GT, OP_LT):
        if len(values) != 1:
            errs.append(
                field_invalid(
                    values_path,
                    shown_values,
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                )
            )
        for i, v in enumerate(values):
            if parse_int64(v) is None:
                errs.append(
                    field_invalid(
                        f"{values_path}[{i}]",
                        v,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    else:
        raise ValueError(f"unknown label selector operator {op!r}")
    for i, v in enumerate(values):
        v_errs = label_value_errors(v)
        if v_errs:
            errs.append(field_invalid(f"{values_path}[{i}][{key}]", v, "; ".join(v_errs)))
    if errs:
        raise SelectorError(aggregate(errs))
    return LabelRequirement(key, op, tuple(values))
