"""The simulated scheduler's preemption: which pods go, on which node, and the room it holds."""

from __future__ import annotations

from typing import Any

from nodeops.sim.cluster.preemption import (
    Budgets,
    Candidate,
    Victim,
    nothing_to_preempt,
    pick,
    select_victims,
    victim,
)
from nodeops.sim.cluster.scheduling import NodeUsage, node_allocatable, pod_requests
from tests.unit.sim.test_cluster_scheduling import _scheduler, node, pod


def placed(name: str, prio: int, cpu: str, *, started: str = "2026-01-01T00:00:00Z") -> Victim:
    p = pod(name, cpu=cpu)
    p["metadata"]["labels"] = {"app": name.rstrip("0123456789")}
    p["spec"]["priority"] = prio
    p["status"] = {"startTime": started}
    return victim(p, pod_requests(p))


def usage_of(victims: list[Victim]) -> NodeUsage:
    usage = NodeUsage()
    for v in victims:
        usage.add(v.requests)
    return usage


ALLOC = node_allocatable(node(cpu="4"))
NO_BUDGETS = Budgets([])


def test_the_fewest_and_least_important_pods_go() -> None:
    pods = [placed("batch1", 10, "1"), placed("batch2", 5, "1"), placed("filler", 1, "1")]
    want = pod_requests(pod(cpu="2"))
    chosen = select_victims("n1", want, ALLOC, usage_of(pods), pods, NO_BUDGETS)
    assert chosen is not None
    # Room for 2 CPUs needs one of the three 1-CPU pods gone (one CPU is free): the least
    # important, as kube-scheduler gives back the most important first.
    assert [v.key[1] for v in chosen.victims] == ["filler"]


def test_nothing_is_chosen_when_even_all_going_is_not_enough() -> None:
    pods = [placed("batch1", 10, "1")]
    want = pod_requests(pod(cpu="8"))
    assert select_victims("n1", want, ALLOC, usage_of(pods), pods, NO_BUDGETS) is None


def _budget(app: str, allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }


def test_pods_whose_budget_would_break_are_kept_first() -> None:
    guarded = placed("guarded", 1, "1")
    free = placed("free", 5, "1")
    pods = [guarded, free, placed("other", 9, "1")]
    want = pod_requests(pod(cpu="2"))
    budgets = Budgets([_budget("guarded", 0)])
    chosen = select_victims("n1", want, ALLOC, usage_of(pods), pods, budgets)
    assert chosen is not None
    # Without the budget "guarded" (priority 1) would go; with it, "free" goes instead.
    assert [v.key[1] for v in chosen.victims] == ["free"]
    assert chosen.broken_budgets == 0


def test_the_node_that_breaks_fewest_budgets_then_matters_least_is_picked() -> None:
    low, high = placed("low", 1, "1"), placed("high", 100, "1")
    assert pick([Candidate("a", [high], 0), Candidate("b", [low], 1)]).node == "a"
    assert pick([Candidate("a", [high]), Candidate("b", [low])]).node == "b"
    two_low = [placed("x", 1, "1"), placed("y", 1, "1")]
    assert pick([Candidate("a", two_low), Candidate("b", [low])]).node == "b"
    early = placed("early", 1, "1", started="2026-01-01T00:00:00Z")
    late = placed("late", 1, "1", started="2026-01-02T00:00:00Z")
    assert pick([Candidate("a", [early]), Candidate("b", [late])]).node == "b"


def test_preemption_says_which_nodes_it_could_not_help() -> None:
    reasons = {"Insufficient cpu": 2, "node(s) didn't match Pod's node affinity/selector": 1}
    assert nothing_to_preempt(3, reasons) == (
        "0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_a_nominated_pod_keeps_its_room_from_pods_of_no_higher_priority() -> None:
    sched = _scheduler([node("n1", cpu="2")])
    preemptor = pod("preemptor", cpu="1500m")
    preemptor["spec"]["priority"] = 100
    sched._nominate(("default", "preemptor"), preemptor, pod_requests(preemptor), "n1")
    same = pod("same", cpu="1")
    same["spec"]["priority"] = 100
    assert sched.select_node(same)[0] is None
    higher = pod("higher", cpu="1")
    higher["spec"]["priority"] = 1000
    assert sched.select_node(higher)[0] == "n1"
    # The preemptor itself is not kept out of its own room.
    assert sched._fits_on("n1", preemptor, pod_requests(preemptor))
