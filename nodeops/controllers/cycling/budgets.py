"""Disruption budgets: how many more nodes may go into replacement right now.

A budget belongs to a request or to a NodeGroup and covers that owner's cloud node groups. It
allows at most `nodes` nodes of those groups in replacement at once, counting the nodes of every
request (detached, cordoned or draining), so two requests on the same groups share it. A budget
with a schedule is in force only inside its windows; outside them it does not apply, as in
Karpenter. The tightest budget in force wins; with none in force, only concurrency limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter

from nodeops.api.cycling import Budget
from nodeops.api.duration import parse_duration

__all__ = ["BudgetScope", "Room", "next_change", "room", "window"]


@dataclass(frozen=True)
class BudgetScope:
    """Budgets and the node groups they cover; `owner` names them in messages."""

    owner: str
    groups: frozenset[str]
    budgets: tuple[Budget, ...]


@dataclass(frozen=True)
class Room:
    """How many more nodes may start replacement (None: no budget in force), and why not."""

    nodes: int | None
    reason: str = ""


def window(budget: Budget, now: datetime) -> tuple[bool, datetime | None]:
    """Whether the budget is in force at `now`, and when that next changes (None: never)."""
    if budget.schedule is None or budget.duration is None:
        return True, None
    length = timedelta(seconds=parse_duration(budget.duration))
    # The last opening at or before now: croniter's get_prev is strictly before its start.
    opened: datetime = croniter(budget.schedule, now + timedelta(seconds=1)).get_prev(datetime)
    if now < opened + length:
        return True, opened + length
    following: datetime = croniter(budget.schedule, now).get_next(datetime)
    return False, following


def room(
    scopes: Iterable[BudgetScope],
    in_replacement: Mapping[str, Iterable[str]],
    sizes: Mapping[str, int],
    now: datetime,
) -> Room:
    """The room left under the tightest budget in force.

    `in_replacement` maps each cloud node group to the nodes of it being replaced by any
    request; `sizes` to its desired size, the base of percentages.
    """
    best: Room = Room(None)
    for scope in scopes:
        busy: set[str] = set()
        for group in scope.groups:
            busy.update(in_replacement.get(group, ()))
        size = sum(sizes.get(g, 0) for g in scope.groups)
        for i, budget in enumerate(scope.budgets):
            active, _ = window(budget, now)
            if not active:
                continue
            left = max(0, budget.limit(size) - len(busy))
            if best.nodes is None or left < best.nodes:
                best = Room(
                    left,
                    f"{scope.owner} budgets[{i}] allows {budget.limit(size)} nodes in "
                    f"replacement at once and {len(busy)} are",
                )
    return best


def next_change(scopes: Sequence[BudgetScope], now: datetime) -> datetime | None:
    """When the next budget window opens or closes: a blocked request looks again then."""
    times = [
        t
        for scope in scopes
        for budget in scope.budgets
        if (t := window(budget, now)[1]) is not None
    ]
    return min(times, default=None)
