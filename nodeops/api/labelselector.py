"""`metav1.LabelSelector` as a model, validated as the API server validates it.

A selector that the API server would refuse in a built-in object (a Deployment's, a PDB's) is
refused here with the same field path and wording, and a valid one is compiled once into the
matcher of `nodeops.common.selectors`, so a drain that tests every rule against every pod on a
node does not parse selectors in its loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from nodeops.api.errors import FieldProblem
from nodeops.api.meta import ApiModel
from nodeops.common import selectors

__all__ = ["LabelSelector", "LabelSelectorOperator", "LabelSelectorRequirement"]

LabelSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


def _key_problem(key: str) -> str | None:
    """`Invalid value: "<key>": <why>` when `key` is not a valid label key."""
    try:
        selectors.label_selector_from_object(
            {"matchExpressions": [{"key": key, "operator": "Exists"}]}
        )
    except selectors.SelectorError as e:
        return str(e).removeprefix("key: ")
    return None


def _value_problem(value: str) -> str | None:
    """`Invalid value: "<value>": <why>` when `value` is not a valid label value."""
    try:
        selectors.label_selector_from_object({"matchLabels": {"k": value}})
    except selectors.SelectorError as e:
        return str(e).removeprefix("values[0][k]: ")
    return None


class LabelSelectorRequirement(ApiModel):
    """A requirement on one label: `key` `operator` `values`."""

    key: str
    """The label key that the selector applies to."""
    operator: LabelSelectorOperator
    """How the key's value relates to `values`: In, NotIn, Exists or DoesNotExist."""
    values: list[str] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Label values. Must be non-empty for In and NotIn, and empty for Exists and DoesNotExist."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        # The order and the texts of metav1validation.ValidateLabelSelectorRequirement.
        if self.operator in ("In", "NotIn"):
            if not self.values:
                raise FieldProblem(
                    "values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"
                )
        elif self.values:
            raise FieldProblem(
                "values",
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        problem = _key_problem(self.key)
        if problem is not None:
            raise FieldProblem("key", problem)
        for i, value in enumerate(self.values or ()):
            problem = _value_problem(value)
            if problem is not None:
                raise FieldProblem(f"values[{i}]", problem)
        return self


class _Compiled:
    """Holds a compiled selector in a model's private state.

    The compiled selector refuses attribute writes, which `copy.deepcopy` needs; being
    immutable it can be shared by copies instead, which this holder does.
    """

    __slots__ = ("selector",)

    def __init__(self, selector: selectors.LabelSelector) -> None:
        self.selector = selector

    def __deepcopy__(self, memo: dict[int, Any]) -> _Compiled:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Compiled) and self.selector == other.selector

    def __hash__(self) -> int:
        return hash(self.selector)


class LabelSelector(ApiModel):
    """A label query over a set of resources.

    The result of matchLabels and matchExpressions are ANDed. An empty label selector matches all
    objects.
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    match_labels: dict[str, str] | None = None
    """A map of {key,value} pairs; each is equivalent to an element of matchExpressions whose key
    field is "key", the operator is "In", and the values array contains only "value"."""
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """A list of label selector requirements. The requirements are ANDed."""

    _compiled: _Compiled = PrivateAttr(default_factory=lambda: _Compiled(selectors.NOTHING))

    @model_validator(mode="after")
    def _check_and_compile(self) -> Self:
        # metav1validation.ValidateLabels reports every bad key and value at `matchLabels`.
        for key, value in (self.match_labels or {}).items():
            problem = _key_problem(key) or _value_problem(value)
            if problem is not None:
                raise FieldProblem("matchLabels", problem)
        self._compiled = _Compiled(selectors.label_selector_from_object(self.to_dict()))
        return self

    def matcher(self) -> selectors.LabelSelector:
        """The compiled selector, for callers that filter lists or need its string form."""
        return self._compiled.selector

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return self._compiled.selector.matches(labels)
