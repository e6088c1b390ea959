"""Disruption budgets: limits, windows and the tightest budget in force."""

from __future__ import annotations

from datetime import UTC, datetime

from nodeops.api.cycling import Budget
from nodeops.controllers.cycling.budgets import BudgetScope, next_change, room, window

MONDAY_10 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)  # a Monday
MONDAY_20 = datetime(2026, 1, 5, 20, 0, tzinfo=UTC)

BUSINESS_HOURS = Budget(nodes=0, schedule="0 9 * * 1-5", duration="8h")


def test_windows() -> None:
    assert window(BUSINESS_HOURS, MONDAY_10) == (True, datetime(2026, 1, 5, 17, 0, tzinfo=UTC))
    assert window(BUSINESS_HOURS, MONDAY_20) == (False, datetime(2026, 1, 6, 9, 0, tzinfo=UTC))
    assert window(Budget(nodes=1), MONDAY_20) == (True, None)


def test_no_budget_means_no_limit() -> None:
    assert room([], {}, {}, MONDAY_10).nodes is None


def test_the_tightest_budget_in_force_wins() -> None:
    scopes = [
        BudgetScope("NodeGroup system", frozenset({"a", "b"}), (Budget(nodes="50%"),)),
        BudgetScope("CycleNodeRequest r", frozenset({"a"}), (Budget(nodes=3), BUSINESS_HOURS)),
    ]
    busy = {"a": {"n1"}, "b": {"n2", "n3"}}
    sizes = {"a": 4, "b": 4}
    # Outside business hours: min(50% of 8 - 3 busy = 1, 3 - 1 busy = 2) = 1
    evening = room(scopes, busy, sizes, MONDAY_20)
    assert evening.nodes == 1
    assert "NodeGroup system budgets[0]" in evening.reason
    # During business hours the request's window allows nothing.
    assert room(scopes, busy, sizes, MONDAY_10).nodes == 0
    assert next_change(scopes, MONDAY_10) == datetime(2026, 1, 5, 17, 0, tzinfo=UTC)


def test_nodes_counted_once_across_groups_of_a_scope() -> None:
    scope = BudgetScope("ng", frozenset({"a", "b"}), (Budget(nodes=2),))
    assert room([scope], {"a": {"x"}, "b": {"x"}}, {}, MONDAY_10).nodes == 1
