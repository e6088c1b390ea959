"""The budget gate under every order in which an eviction's effects can reach the drain.

An approved eviction shows up three ways, on three connections that race: the eviction's
answer, the budget's watch (first a status listing the pod in `disruptedPods`, then the
disruption controller's status without it once the pod is terminating) and the pod's watch
(the pod terminating or deleted). Whatever the order, the gate must never offer more tokens than
the budget really allows, and once everything has arrived it must hold none for the eviction.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from nodeops.drain.budgets import BudgetGate, PdbSnapshot

KEY = ("default", "web")


class Budgets:
    """The budgets as an informer's cache holds them: the last event delivered wins."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        return [p for (ns, _), p in self.items.items() if ns == value]

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.items.get((namespace or "", name))

    def put(self, pdb: dict[str, Any]) -> None:
        meta = pdb["metadata"]
        self.items[(meta["namespace"], meta["name"])] = pdb


def budget(rv: str, allowed: int, *disrupted: str, name: str = "web") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv},
        "spec": {"selector": {"matchLabels": {"app": name}}},
        "status": {
            "disruptionsAllowed": allowed,
            "disruptedPods": {p: "2026-01-01T00:00:00Z" for p in disrupted},
        },
    }


def pod(name: str, rv: str = "3", *, terminating: bool = False, app: str = "web") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": {"app": app},
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {"metadata": meta, "status": {"phase": "Running"}}


def setup(allowed: int = 1, rv: str = "5") -> tuple[Budgets, BudgetGate]:
    budgets = Budgets()
    budgets.put(budget(rv, allowed))
    gate = BudgetGate(budgets)
    gate.observe_budget(budgets.items[KEY])
    return budgets, gate


def see(budgets: Budgets, gate: BudgetGate, pdb: dict[str, Any]) -> None:
    budgets.put(pdb)
    gate.observe_budget(pdb)


EFFECTS = ("answer", "status with the pod", "status without it", "pod deletion")


@pytest.mark.parametrize("deleted", [False, True], ids=["terminating", "deleted"])
@pytest.mark.parametrize("order", list(itertools.permutations(EFFECTS)), ids=" > ".join)
def test_every_order_of_an_approved_evictions_effects(
    order: tuple[str, ...], deleted: bool
) -> None:
    budgets, gate = setup(allowed=1)
    p = pod("p1")
    assert gate.budget_for(p) == KEY
    assert gate.try_take(KEY, p)
    assert gate.tokens(KEY) == 0
    # The server's order: budget written (rv 10), pod terminating or deleted (rv 11), the
    # disruption controller's next status (rv 12). The replacement is not ready yet, so the
    # budget allows nothing throughout.
    effects = {
        "answer": lambda: gate.release(KEY, p, approved=True),
        "status with the pod": lambda: see(budgets, gate, budget("10", 0, "p1")),
        "status without it": lambda: see(budgets, gate, budget("12", 0)),
        "pod deletion": lambda: gate.observe_pod(
            pod("p1", "11", terminating=not deleted), deleted=deleted
        ),
    }
    for effect in order:
        effects[effect]()
        assert gate.tokens(KEY) <= 0, f"more tokens than the budget allows after {effect}"
    assert gate.held(KEY) == []
    # The replacement becomes ready: the budget's token is there at once, not after a timer.
    see(budgets, gate, budget("13", 1))
    assert gate.tokens(KEY) == 1
    assert gate.try_take(KEY, pod("p2"))


def test_a_refused_eviction_frees_its_token_at_once() -> None:
    _, gate = setup(allowed=1)
    p = pod("p1")
    assert gate.try_take(KEY, p)
    assert gate.tokens(KEY) == 0
    gate.release(KEY, p, approved=False)
    assert gate.tokens(KEY) == 1
    assert gate.held(KEY) == []


def test_a_deletion_frees_nothing_until_a_later_status_is_seen() -> None:
    budgets, gate = setup(allowed=2)
    p = pod("p1")
    assert gate.try_take(KEY, p)
    gate.release(KEY, p, approved=True)
    gate.observe_pod(pod("p1", "11", terminating=True))
    # The latest status (rv 5) was written before the pod went: it still counts it healthy.
    assert gate.tokens(KEY) == 1
    see(budgets, gate, budget("12", 1))
    assert gate.tokens(KEY) == 1 and gate.held(KEY) == []


def test_without_comparable_versions_a_status_seen_after_the_deletion_counts() -> None:
    budgets, gate = setup(allowed=2, rv="a")
    p = pod("p1", "b")
    assert gate.try_take(KEY, p)
    gate.release(KEY, p, approved=True)
    gate.observe_pod(pod("p1", "c", terminating=True))
    assert gate.tokens(KEY) == 1
    see(budgets, gate, budget("d", 1))
    assert gate.held(KEY) == []


def test_one_eviction_per_budget_until_its_status_write_is_seen() -> None:
    budgets, gate = setup(allowed=3)
    first, second = pod("p1"), pod("p2")
    assert gate.try_take(KEY, first)
    # The server would make a second concurrent eviction conflict and wait half a second.
    assert not gate.try_take(KEY, second)
    see(budgets, gate, budget("10", 2, "p1"))
    assert gate.try_take(KEY, second)
    assert gate.tokens(KEY) == 1


def test_a_new_pod_of_the_same_name_does_not_free_the_token() -> None:
    budgets, gate = setup(allowed=1)
    p = pod("p1")
    assert gate.try_take(KEY, p)
    gate.release(KEY, p, approved=True)
    successor = pod("p1", "11", terminating=True)
    successor["metadata"]["uid"] = "uid-other"
    gate.observe_pod(successor)
    see(budgets, gate, budget("12", 1))
    assert gate.held(KEY) == ["p1"] and gate.tokens(KEY) == 0


def test_budgets_are_counted_apart_and_a_deleted_budget_holds_nothing() -> None:
    budgets, gate = setup(allowed=1)
    see(budgets, gate, budget("6", 1, name="db"))
    web, db = pod("w1"), pod("d1", app="db")
    assert gate.budget_for(db) == ("default", "db")
    assert gate.try_take(KEY, web) and gate.try_take(("default", "db"), db)
    assert gate.tokens(KEY) == 0 and gate.tokens(("default", "db")) == 0
    gate.forget_budget(budgets.items[("default", "db")])
    del budgets.items[("default", "db")]
    assert gate.tokens(("default", "db")) == 1  # no budget: the server decides alone
    assert gate.tokens(KEY) == 0


def test_pods_under_several_budgets_or_not_running_are_left_to_the_server() -> None:
    budgets, gate = setup()
    other = budget("6", 1, name="web2")
    other["spec"]["selector"] = {"matchLabels": {"app": "web"}}
    see(budgets, gate, other)
    assert gate.budget_for(pod("p1")) is None
    pending = pod("p2", app="solo")
    pending["status"]["phase"] = "Pending"
    assert gate.budget_for(pending) is None


def test_a_snapshot_reads_the_one_status_it_has() -> None:
    gate = BudgetGate(PdbSnapshot([budget("5", 2)]))
    p = pod("p1")
    assert gate.try_take(KEY, p)
    gate.release(KEY, p, approved=True)
    assert gate.tokens(KEY) == 1
    assert gate.try_take(KEY, pod("p2"))
    assert gate.tokens(KEY) == 0


async def test_a_budgets_change_wakes_only_the_evictions_waiting_under_it() -> None:
    """Fifty nodes drained at once wait under many budgets: a change of one must not wake
    every waiting eviction of every other budget (each would only look and wait again)."""
    budgets = Budgets()
    budgets.put(budget("1", 0))
    budgets.put(budget("1", 0, name="db"))
    gate = BudgetGate(budgets)
    web = asyncio.create_task(gate.acquire(KEY, pod("w1"), timeout=30))
    db = asyncio.create_task(gate.acquire(("default", "db"), pod("d1", app="db"), timeout=30))
    await asyncio.sleep(0)
    woken: list[str] = []
    original = gate.try_take

    def counting(key: tuple[str, str], p: Mapping[str, Any]) -> bool:
        woken.append(key[1])
        return original(key, p)

    gate.try_take = counting  # type: ignore[method-assign]
    changed = budget("2", 1, name="db")
    budgets.put(changed)
    gate.observe_budget(changed)
    assert await db
    assert woken == ["db"]
    assert not web.done()
    changed = budget("2", 1)
    budgets.put(changed)
    gate.observe_budget(changed)
    assert await web
    assert woken == ["db", "web"]


async def test_evictions_waiting_under_one_budget_take_its_tokens_in_turn() -> None:
    """Twenty nodes drained at once may leave hundreds of pods waiting under one budget that
    frees one disruption at a time: each change must cost one look, not one per waiting pod,
    and the pods go in the order they came."""
    budgets = Budgets()
    budgets.put(budget("1", 0))
    gate = BudgetGate(budgets)
    looks: list[str] = []
    original = gate.try_take

    def counting(key: tuple[str, str], p: Mapping[str, Any]) -> bool:
        looks.append(p["metadata"]["name"])
        return original(key, p)

    gate.try_take = counting  # type: ignore[method-assign]
    names = [f"w{i}" for i in range(50)]
    waiting = {n: asyncio.create_task(gate.acquire(KEY, pod(n), timeout=30)) for n in names}
    await asyncio.sleep(0)
    looks.clear()
    taken: list[str] = []
    for rv in range(2, 6):
        see(budgets, gate, budget(str(rv), 1, *taken))
        for _ in range(5):
            await asyncio.sleep(0)
        done = [n for n, t in waiting.items() if t.done() and n not in taken]
        assert len(done) == 1, f"one token, {done} took it"
        taken += done
        gate.release(KEY, pod(done[0]), approved=True)
        see(budgets, gate, budget(f"{rv}9", 0, *taken))
        for _ in range(5):
            await asyncio.sleep(0)
    assert taken == names[:4], "first come, first served"
    assert len(looks) <= 4 * 3, f"{len(looks)} looks for 4 disruptions: the line was woken whole"
    for t in waiting.values():
        t.cancel()
    await asyncio.gather(*waiting.values(), return_exceptions=True)


async def test_a_waiter_that_gives_up_or_is_cancelled_does_not_lose_the_turn() -> None:
    budgets = Budgets()
    budgets.put(budget("1", 0))
    gate = BudgetGate(budgets)
    impatient = asyncio.create_task(gate.acquire(KEY, pod("w1"), timeout=0.01))
    cancelled = asyncio.create_task(gate.acquire(KEY, pod("w2"), timeout=30))
    patient = asyncio.create_task(gate.acquire(KEY, pod("w3"), timeout=30))
    assert not await impatient
    await asyncio.sleep(0)
    see(budgets, gate, budget("2", 1))  # wakes w2, which is cancelled before it looks
    cancelled.cancel()
    assert await asyncio.wait_for(patient, 5)
    assert cancelled.cancelled()
    assert gate.held(KEY) == ["w3"]
