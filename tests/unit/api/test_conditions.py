"""Condition helpers follow meta.SetStatusCondition: the transition time moves only on a flip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from nodeops.api import (
    Condition,
    find_condition,
    is_condition_true,
    remove_condition,
    set_condition,
)
from nodeops.api.conditions import format_time

T0 = datetime(2024, 10, 9, 16, 13, 59, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_a_new_condition_is_appended_with_now() -> None:
    status: dict[str, Any] = {}
    assert set_condition(status, "Ready", "False", "Draining", "3 pods left", now=T0)
    assert status == {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "lastTransitionTime": "2024-10-09T16:13:59Z",
                "reason": "Draining",
                "message": "3 pods left",
            }
        ]
    }


def test_reason_and_message_change_without_moving_the_transition_time() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", "False", "Draining", "3 pods left", now=T0)
    assert set_condition(status, "Ready", "False", "Draining", "1 pod left", now=T1)
    cond = find_condition(status, "Ready")
    assert cond is not None
    assert cond["message"] == "1 pod left"
    assert cond["lastTransitionTime"] == format_time(T0)
    assert set_condition(status, "Ready", "False", "PodDisruptionBudget", "1 pod left", now=T1)
    assert cond["reason"] == "PodDisruptionBudget"
    assert cond["lastTransitionTime"] == format_time(T0)


def test_a_status_flip_moves_the_transition_time() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", "False", "Draining", now=T0)
    assert set_condition(status, "Ready", "True", "Drained", now=T1)
    cond = find_condition(status, "Ready")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "Drained")
    assert cond["lastTransitionTime"] == format_time(T1)


def test_setting_the_same_condition_reports_no_change() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", "True", "Drained", "done", observed_generation=2, now=T0)
    before = [dict(c) for c in status["conditions"]]
    assert not set_condition(
        status, "Ready", "True", "Drained", "done", observed_generation=2, now=T1
    )
    assert status["conditions"] == before


def test_observed_generation_is_set_and_cleared() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", "True", "Drained", now=T0)
    assert "observedGeneration" not in status["conditions"][0]
    assert set_condition(status, "Ready", "True", "Drained", observed_generation=4, now=T1)
    assert status["conditions"][0]["observedGeneration"] == 4
    assert set_condition(status, "Ready", "True", "Drained", now=T1)
    assert "observedGeneration" not in status["conditions"][0]


def test_other_conditions_and_their_order_are_kept() -> None:
    status: dict[str, Any] = {"phase": "Draining"}
    set_condition(status, "Ready", "False", "Draining", now=T0)
    set_condition(status, "example.com/Detached", "True", "Deregistered", now=T0)
    set_condition(status, "Ready", "True", "Drained", now=T1)
    assert [c["type"] for c in status["conditions"]] == ["Ready", "example.com/Detached"]
    assert status["phase"] == "Draining"
    assert is_condition_true(status, "Ready")
    assert is_condition_true(status, "example.com/Detached")
    assert not is_condition_true(status, "Missing")


def test_remove_and_find() -> None:
    status: dict[str, Any] = {}
    assert find_condition(status, "Ready") is None
    assert find_condition(None, "Ready") is None
    assert not remove_condition(status, "Ready")
    set_condition(status, "Ready", "Unknown", "Starting", now=T0)
    set_condition(status, "Other", "True", "Fine", now=T0)
    assert remove_condition(status, "Ready")
    assert [c["type"] for c in status["conditions"]] == ["Other"]
    assert not remove_condition(status, "Ready")


def test_times_are_written_in_utc_at_whole_seconds() -> None:
    status: dict[str, Any] = {}
    local = datetime(2024, 10, 9, 18, 13, 59, 987654, tzinfo=timezone(timedelta(hours=2)))
    set_condition(status, "Ready", "True", "Drained", now=local)
    assert status["conditions"][0]["lastTransitionTime"] == "2024-10-09T16:13:59Z"


@pytest.mark.parametrize(
    ("type_", "reason", "field"),
    [
        ("Ready", "not a reason", "reason"),
        ("Ready", "", "reason"),
        ("not a type", "Fine", "type"),
    ],
)
def test_kube_would_refuse_it_so_we_refuse_it_first(type_: str, reason: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        set_condition({}, type_, "True", reason, now=T0)
    assert info.value.errors()[0]["loc"] == (field,)


def test_a_condition_from_the_api_round_trips() -> None:
    wire = {
        "type": "Ready",
        "status": "True",
        "observedGeneration": 3,
        "lastTransitionTime": "2024-10-09T16:13:59Z",
        "reason": "Drained",
        "message": "",
    }
    cond = Condition.model_validate(wire)
    assert cond.last_transition_time == T0
    assert cond.to_dict() == wire


def test_a_condition_needs_a_zoned_time() -> None:
    with pytest.raises(ValidationError):
        Condition.model_validate(
            {
                "type": "Ready",
                "status": "True",
                "lastTransitionTime": "2024-10-09T16:13:59",
                "reason": "Drained",
                "message": "",
            }
        )
