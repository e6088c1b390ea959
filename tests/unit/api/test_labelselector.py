"""The LabelSelector model: metav1 validation at the right paths, and the compiled matcher."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nodeops.api import LabelSelector
from nodeops.api.errors import invalid_resource
from nodeops.common import selectors


def test_an_empty_selector_matches_everything() -> None:
    sel = LabelSelector.model_validate({})
    assert sel.matcher() == selectors.EVERYTHING
    assert sel.matches(None)
    assert sel.matches({"a": "b"})


def test_the_matcher_is_the_metav1_selector() -> None:
    sel = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "db"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }
    )
    assert str(sel.matcher()) == "app=db,!canary,tier in (a,b)"
    assert sel.matches({"app": "db", "tier": "a"})
    assert not sel.matches({"app": "db", "tier": "c"})
    assert not sel.matches({"app": "db", "tier": "a", "canary": "1"})


def test_equal_selectors_compare_equal() -> None:
    one = LabelSelector.model_validate({"matchLabels": {"a": "1", "b": "2"}})
    two = LabelSelector.model_validate({"matchLabels": {"b": "2", "a": "1"}})
    assert one == two
    assert one != LabelSelector.model_validate({"matchLabels": {"a": "1"}})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "matchExpressions[0].values: Required value: must be specified when `operator` is "
            "'In' or 'NotIn'",
        ),
        (
            {"matchLabels": {"ok": "fine", "k" * 64: "v"}},
            f'matchLabels: Invalid value: "{"k" * 64}": name part must be no more than 63 bytes',
        ),
        (
            {"matchLabels": {"a": "b"}, "matchExpression": []},
            "matchExpression: unknown field",
        ),
    ],
)
def test_paths_are_relative_to_the_model_validated(obj: object, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        LabelSelector.model_validate(obj)
    assert str(invalid_resource(info.value, LabelSelector)) == message
