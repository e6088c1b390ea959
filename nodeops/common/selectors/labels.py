"""Parsed label selectors and the compiled predicate that tests them.

A list call may test one selector against 150,000 objects, so a selector compiles its requirements
once into a single Python function: `selector.matches(labels)` is a direct call of that function,
with no per-requirement dispatch. The object form (`{matchLabels, matchExpressions}`) of PDBs,
Deployments and our CRDs becomes the same selector.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from nodeops.common.gomessages import go_quote
from nodeops.common.selectors.errors import SelectorError
from nodeops.common.selectors.requirements import (
    OP_DOES_NOT_EXIST,
    OP_DOUBLE_EQUALS,
    OP_EQUALS,
    OP_EXISTS,
    OP_GT,
    OP_IN,
    OP_LT,
    OP_NOT_IN,
    LabelRequirement,
    new_requirement,
    parse_int64,
)

__all__ = [
    "EVERYTHING",
    "NOTHING",
    "LabelSelector",
    "format_labels",
    "label_selector_from_object",
]

_MatchFn = Callable[[Mapping[str, str] | None], bool]
_EMPTY: Final[Mapping[str, str]] = {}


def _int_compare(value: str | None, bound: int, greater: bool) -> bool:
    if value is None:
        return False
    n = parse_int64(value)
    if n is None:
        return False
    return n > bound if greater else n < bound


def _match_all(labels: Mapping[str, str] | None) -> bool:
    return True


def _match_none(labels: Mapping[str, str] | None) -> bool:
    return False


@functools.lru_cache(maxsize=4096)
def _compile_label_matcher(reqs: tuple[LabelRequirement, ...]) -> _MatchFn:
    """Build one function testing every requirement inline.

    Only indices reach the generated source; keys and values are bound as constants in its
    namespace, so no selector text is ever evaluated. Kept per set of requirements: a cluster
    has few distinct selectors, and the same budget's or workload's selector is parsed again at
    every eviction and every pod event, where compiling it cost more than the matching.
    """
    if not reqs:
        return _match_all
    namespace: dict[str, Any] = {"_EMPTY": _EMPTY, "_int_compare": _int_compare}
    terms: list[str] = []
    needs_get = False
    for i, r in enumerate(reqs):
        k = f"_k{i}"
        v = f"_v{i}"
        namespace[k] = r.key
        op = r.operator
        if op == OP_EXISTS:
            terms.append(f"{k} in labels")
        elif op == OP_DOES_NOT_EXIST:
            terms.append(f"{k} not in labels")
        elif op in (OP_GT, OP_LT):
            # NewRequirement guarantees exactly one integer value.
            namespace[v] = parse_int64(r.values[0])
            terms.append(f"_int_compare(get({k}), {v}, {op == OP_GT})")
            needs_get = True
        else:
            positive = op in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN)
            if len(set(r.values)) == 1:
                namespace[v] = r.values[0]
                terms.append(f"get({k}) {'==' if positive else '!='} {v}")
            else:
                namespace[v] = frozenset(r.values)
                terms.append(f"get({k}) {'in' if positive else 'not in'} {v}")
            needs_get = True
    lines = ["def _match(labels):", "    if labels is None:", "        labels = _EMPTY"]
    if needs_get:
        lines.append("    get = labels.get")
    lines.append("    return " + " and ".join(terms))
    exec("\n".join(lines), namespace)
    fn: _MatchFn = namespace["_match"]
    return fn


class LabelSelector:
    """A parsed, immutable label selector (apimachinery's internalSelector or Nothing).

    `matches` is an attribute holding the compiled predicate, so the hot loop calls it directly.
    """

    __slots__ = ("_nothing", "_reqs", "matches")

    matches: _MatchFn
    _reqs: tuple[LabelRequirement, ...]
    _nothing: bool

    def __init__(
        self, requirements: Iterable[LabelRequirement] = (), *, nothing: bool = False
    ) -> None:
        # Go sorts by key with a sort that is stable for the short lists selectors are.
        reqs = tuple(sorted(requirements, key=lambda r: r.key))
        object.__setattr__(self, "_reqs", () if nothing else reqs)
        object.__setattr__(self, "_nothing", nothing)
        object.__setattr__(
            self, "matches", _match_none if nothing else _compile_label_matcher(reqs)
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("LabelSelector is immutable")

    @property
    def requirements(self) -> tuple[LabelRequirement, ...]:
        return self._reqs

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (Nothing is not empty, as in Go)."""
        return not self._nothing and not self._reqs

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    def requires_exact_match(self, key: str) -> str | None:
        """The single value `key` must have, if the selector pins one; lets callers use an index."""
        for r in self._reqs:
            if r.key == key:
                if r.operator in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector.nothing()"
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return self._nothing == other._nothing and self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash((self._nothing, self._reqs))

    @staticmethod
    def everything() -> LabelSelector:
        return EVERYTHING

    @staticmethod
    def nothing() -> LabelSelector:
        return NOTHING


EVERYTHING: Final = LabelSelector()
NOTHING: Final = LabelSelector(nothing=True)


_OBJECT_OPERATORS: Final = {
    "In": OP_IN,
    "NotIn": OP_NOT_IN,
    "Exists": OP_EXISTS,
    "DoesNotExist": OP_DOES_NOT_EXIST,
}


def label_selector_from_object(sel: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector for a `{matchLabels, matchExpressions}` mapping.

    A missing selector (None) matches nothing, while a present but empty one (`{}`) matches
    everything; this is why a PDB or Deployment without `selector` selects no pods.
    """
    if sel is None:
        return NOTHING
    match_labels: Mapping[str, Any] = sel.get("matchLabels") or {}
    match_expressions: list[Mapping[str, Any]] = sel.get("matchExpressions") or []
    if not match_labels and not match_expressions:
        return EVERYTHING
    reqs: list[LabelRequirement] = []
    for k, v in match_labels.items():
        reqs.append(new_requirement(str(k), OP_EQUALS, [str(v)]))
    for expr in match_expressions:
        raw_op = expr.get("operator", "")
        op = _OBJECT_OPERATORS.get(raw_op)
        if op is None:
            raise SelectorError(f"{go_quote(str(raw_op))} is not a valid label selector operator")
        values = expr.get("values")
        reqs.append(new_requirement(str(expr.get("key", "")), op, list(values) if values else []))
    return LabelSelector(reqs)


def format_labels(labels: Mapping[str, str] | None) -> str:
    """labels.FormatLabels: `k=v` pairs sorted as whole strings, or `<none>`."""
    if not labels:
        return "<none>"
    return ",".join(sorted(f"{k}={v}" for k, v in labels.items()))
