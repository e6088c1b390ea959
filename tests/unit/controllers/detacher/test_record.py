"""What a detachment records, and what a re-attachment registers again."""

from __future__ import annotations

from nodeops.controllers.detacher.record import (
    TargetRow,
    newly_registered,
    plan_targets,
    rows_from_status,
    rows_to_status,
    static_targets,
)
from nodeops.providers.base import CLASSIC, TARGET_GROUP, LoadBalancerTarget

KINDS = {CLASSIC, TARGET_GROUP}
CLB = LoadBalancerTarget(CLASSIC, "web")
TG_80 = LoadBalancerTarget(TARGET_GROUP, "arn:tg", 30080)
TG_443 = LoadBalancerTarget(TARGET_GROUP, "arn:tg", 30443)
OTHER = LoadBalancerTarget(TARGET_GROUP, "arn:other", 31000)


def test_discovered_targets_are_recorded_registered() -> None:
    plan = plan_targets([], [CLB, TG_80, TG_443], kinds=KINDS)
    assert [(r.key, r.state) for r in plan.rows] == [
        ((CLASSIC, "web", None), "Registered"),
        ((TARGET_GROUP, "arn:tg", 30080), "Registered"),
        ((TARGET_GROUP, "arn:tg", 30443), "Registered"),
    ]
    assert plan.spec == [
        {"type": "classic", "name": "web", "source": "Discovered"},
        {"type": "target-group", "name": "arn:tg", "port": 30080, "source": "Discovered"},
        {"type": "target-group", "name": "arn:tg", "port": 30443, "source": "Discovered"},
    ]


def test_static_targets_are_kept_and_expanded_to_their_ports() -> None:
    static = [LoadBalancerTarget(TARGET_GROUP, "arn:tg"), LoadBalancerTarget(CLASSIC, "gone")]
    plan = plan_targets(static, [TG_80, OTHER], kinds=KINDS)
    # The port-less static target group is left on every port the instance is registered on;
    # the classic one it is not in is recorded so that nothing registers it there later.
    assert {r.key: r.state for r in plan.rows} == {
        (TARGET_GROUP, "arn:tg", 30080): "Registered",
        (TARGET_GROUP, "arn:other", 31000): "Registered",
        (CLASSIC, "gone", None): "NotRegistered",
    }
    assert plan.spec[:2] == [
        {"type": "target-group", "name": "arn:tg", "source": "Static"},
        {"type": "classic", "name": "gone", "source": "Static"},
    ]
    only_static = plan_targets(static, [TG_80, OTHER], kinds=KINDS, static_only=True)
    assert {r.key for r in only_static.rows} == {
        (TARGET_GROUP, "arn:tg", 30080),
        (CLASSIC, "gone", None),
    }


def test_unmanaged_kinds_are_left_alone() -> None:
    plan = plan_targets([], [CLB, TG_80], kinds={TARGET_GROUP})
    assert [r.key for r in plan.rows] == [(TARGET_GROUP, "arn:tg", 30080)]


def test_status_rows_round_trip() -> None:
    rows = [
        TargetRow(CLASSIC, "web", None, "Deregistered", deregistered_at="2024-01-01T00:00:00Z"),
        TargetRow(TARGET_GROUP, "arn:tg", 30080, "Draining", message="m"),
    ]
    status = {"targets": rows_to_status(rows)}
    assert status["targets"][0] == {
        "type": "classic",
        "name": "web",
        "state": "Deregistered",
        "deregisteredAt": "2024-01-01T00:00:00Z",
    }
    assert rows_from_status(status) == rows


def test_static_targets_of_a_record() -> None:
    spec = {
        "targets": [
            {"type": "classic", "name": "a"},
            {"type": "target-group", "name": "arn", "port": 80, "source": "Static"},
            {"type": "classic", "name": "found", "source": "Discovered"},
        ]
    }
    assert static_targets(spec) == [
        LoadBalancerTarget(CLASSIC, "a"),
        LoadBalancerTarget(TARGET_GROUP, "arn", 80),
    ]


def test_newly_registered() -> None:
    rows = [
        TargetRow(CLASSIC, "web", None, "Deregistered"),
        TargetRow(TARGET_GROUP, "arn:tg", 30080, "Draining"),
        TargetRow(TARGET_GROUP, "arn:other", 31000, "NotRegistered"),
    ]
    found = newly_registered(rows, [CLB, TG_80, OTHER, TG_443], kinds=KINDS)
    # Draining is still on its way out; the rest are registrations to take back.
    assert found == [CLB, OTHER, TG_443]
