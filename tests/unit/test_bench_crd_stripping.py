"""The benchmark's CRDs for API servers older than 1.28: the rules stay, only the keys those
servers refuse go."""

from __future__ import annotations

import copy
from typing import Any

from bench.attached_world import CRD_FIELDS_SINCE_1_28, strip_new_crd_fields
from nodeops.api import all_crds


def _rules(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.extend(node.get("x-kubernetes-validations") or ())
        for value in node.values():
            found.extend(_rules(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_rules(value))
    return found


def test_every_rule_keeps_its_expression_and_loses_only_the_new_keys() -> None:
    crds = all_crds()
    before = [rule for crd in crds for rule in _rules(crd)]
    assert any(key in rule for rule in before for key in CRD_FIELDS_SINCE_1_28)
    after = [rule for crd in crds for rule in _rules(strip_new_crd_fields(crd))]
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        assert not set(CRD_FIELDS_SINCE_1_28) & set(new)
        assert new == {k: v for k, v in old.items() if k not in CRD_FIELDS_SINCE_1_28}


def test_the_definition_given_is_left_as_it_was() -> None:
    crd = next(c for c in all_crds() if any("fieldPath" in r for r in _rules(c)))
    before = copy.deepcopy(crd)
    strip_new_crd_fields(crd)
    assert crd == before
