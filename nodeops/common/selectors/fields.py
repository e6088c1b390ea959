"""Field selectors (k8s.io/apimachinery/pkg/fields): parsing, escaping and matching.

Field selectors have their own grammar and escaping, apart from label selectors; a field absent
from an object compares as the empty string, as in kube-apiserver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from nodeops.common.selectors.errors import SelectorError

__all__ = [
    "FIELDS_EVERYTHING",
    "FieldRequirement",
    "FieldSelector",
    "escape_field_value",
    "parse_field_selector",
]


class FieldRequirement(NamedTuple):
    field: str
    operator: str  # "=" or "!="
    value: str

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_field_value(self.value)}"


def escape_field_value(value: str) -> str:
    """fields.EscapeValue: backslash-escape `\\`, `,` and `=` so a value parses back unchanged."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_field_value(raw: str) -> str:
    if "\\" not in raw and "," not in raw and "=" not in raw:
        return raw
    out: list[str] = []
    in_slash = False
    for ch in raw:
        if in_slash:
            if ch in "\\,=":
                out.append(ch)
            else:
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            in_slash = False
            continue
        if ch == "\\":
            in_slash = True
        elif ch in ",=":
            # Go prints the rune with %v, which is its code point.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    if not text:
        return []
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _field_matcher(reqs: tuple[FieldRequirement, ...]) -> Callable[[Mapping[str, str]], bool]:
    if not reqs:
        return lambda fields: True
    if len(reqs) == 1:
        f, op, v = reqs[0]
        if op == "=":
            return lambda fields: fields.get(f, "") == v
        return lambda fields: fields.get(f, "") != v
    eq = tuple((r.field, r.value) for r in reqs if r.operator == "=")
    ne = tuple((r.field, r.value) for r in reqs if r.operator != "=")

    def match(fields: Mapping[str, str]) -> bool:
        get = fields.get
        for f, v in eq:
            if get(f, "") != v:
                return False
        for f, v in ne:
            if get(f, "") == v:
                return False
        return True

    return match


class FieldSelector:
    """A parsed field selector; a field absent from the mapping compares as the empty string."""

    __slots__ = ("_reqs", "matches")

    matches: Callable[[Mapping[str, str]], bool]
    _reqs: tuple[FieldRequirement, ...]

    def __init__(self, requirements: Iterable[FieldRequirement] = ()) -> None:
        reqs = tuple(requirements)
        object.__setattr__(self, "_reqs", reqs)
        object.__setattr__(self, "matches", _field_matcher(reqs))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FieldSelector is immutable")

    @property
    def requirements(self) -> list[FieldRequirement]:
        """`(field, op, value)` tuples, op being `=` or `!=`."""
        return list(self._reqs)

    @property
    def empty(self) -> bool:
        return not self._reqs

    @property
    def fields(self) -> frozenset[str]:
        """Field names referenced, so a server can refuse ones its resource does not support."""
        return frozenset(r.field for r in self._reqs)

    def requires_exact_match(self, field: str) -> str | None:
        for r in self._reqs:
            if r.field == field and r.operator == "=":
                return r.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash(self._reqs)


FIELDS_EVERYTHING: Final = FieldSelector()


def parse_field_selector(text: str) -> FieldSelector:
    """fields.ParseSelector: comma-joined `field=value`, `field==value` or `field!=value` terms.

    Terms are sorted as raw strings before parsing (as Go does), which fixes the order of
    `requirements` and of the canonical string. Terms whose field and value are both empty are
    dropped, like Go's identity transform does.
    """
    reqs: list[FieldRequirement] = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        value = _unescape_field_value(rhs)
        if not lhs and not value:
            continue
        reqs.append(FieldRequirement(lhs, "!=" if op == "!=" else "=", value))
    if not reqs:
        return FIELDS_EVERYTHING
    return FieldSelector(reqs)
