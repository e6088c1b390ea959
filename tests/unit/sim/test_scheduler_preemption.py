"""The simulated scheduler's preemption: which pods go, on which node, and the room it holds."""

from __future__ import annotations

import asyncio
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


def _on(
    sched: Any, name: str, node_name: str, prio: int, cpu: str = "100m", **spec: Any
) -> dict[str, Any]:
    """A pod bound to `node_name`, as the scheduler's pod informer hands it over."""
    p = pod(name, cpu=cpu)
    p["metadata"]["labels"] = {"app": name.rstrip("0123456789")}
    p["spec"].update(spec, nodeName=node_name, priority=prio)
    p["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    sched.pods._upsert(p)
    return p


HOSTNAME = "kubernetes.io/hostname"


def _away_from(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_pods_in_the_way_of_anti_affinity_are_preempted() -> None:
    """Room on every node, but each runs a pod the preemptor's anti-affinity keeps it from
    (or whose own anti-affinity keeps it out): the one of a lower priority goes, as
    kube-scheduler preempts for the inter-pod rules it can resolve."""
    nodes = [node(f"n{i}", labels={HOSTNAME: f"n{i}"}) for i in range(3)]
    sched = _scheduler(nodes)
    _on(sched, "guard0", "n0", 1000)
    _on(sched, "guard1", "n1", 1000)
    _on(sched, "guard2", "n2", 5)
    _on(sched, "filler2", "n2", 5)
    preemptor = pod("preemptor", affinity=_away_from("guard"))
    preemptor["metadata"]["labels"] = {"app": "web"}
    preemptor["spec"]["priority"] = 100
    chosen, reasons = sched.select_node(preemptor)
    assert chosen is None
    assert reasons == {"node(s) didn't match pod anti-affinity rules": 3}
    why, candidate = sched._preemption(
        ("default", "preemptor"), preemptor, pod_requests(preemptor), reasons
    )
    assert why == "" and candidate is not None
    # Only the pod in the way goes; the filler beside it stays.
    assert (candidate.node, [v.key[1] for v in candidate.victims]) == ("n2", ["guard2"])

    # The other way round: a low-priority pod's own anti-affinity keeps "web" off n0.
    sched = _scheduler(nodes[:1])
    _on(sched, "loner0", "n0", 5, affinity=_away_from("web"))
    chosen, reasons = sched.select_node(preemptor)
    assert reasons == {"node(s) didn't satisfy existing pods anti-affinity rules": 1}
    _, candidate = sched._preemption(
        ("default", "preemptor"), preemptor, pod_requests(preemptor), reasons
    )
    assert candidate is not None and [v.key[1] for v in candidate.victims] == ["loner0"]


def test_no_pod_of_a_lower_priority_in_the_way_means_no_victims() -> None:
    sched = _scheduler([node("n0", labels={HOSTNAME: "n0"})])
    _on(sched, "guard0", "n0", 1000)
    _on(sched, "filler0", "n0", 5)
    preemptor = pod("preemptor", affinity=_away_from("guard"))
    preemptor["spec"]["priority"] = 100
    _, reasons = sched.select_node(preemptor)
    why, candidate = sched._preemption(
        ("default", "preemptor"), preemptor, pod_requests(preemptor), reasons
    )
    assert candidate is None
    assert why == "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    # Taking the pods away to judge the node left them placed.
    assert sched.select_node(preemptor)[1] == reasons


def test_pods_that_skew_a_spread_are_preempted() -> None:
    """n1 has no room (a pod of a higher priority fills it); n0 has room but two replicas
    already, past a skew of 1: both go, as only then does the pod keep the spread."""
    nodes = [node(f"n{i}", labels={HOSTNAME: f"n{i}"}) for i in range(2)]
    sched = _scheduler(nodes)
    _on(sched, "web0", "n0", 5)
    _on(sched, "web1", "n0", 5)
    _on(sched, "hog1", "n1", 1000, cpu="4")
    preemptor = pod("preemptor")
    preemptor["metadata"]["labels"] = {"app": "web"}
    preemptor["spec"]["priority"] = 100
    preemptor["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    _, reasons = sched.select_node(preemptor)
    assert reasons == {
        "node(s) didn't match pod topology spread constraints": 1,
        "Insufficient cpu": 1,
    }
    _, candidate = sched._preemption(
        ("default", "preemptor"), preemptor, pod_requests(preemptor), reasons
    )
    assert candidate is not None and candidate.node == "n0"
    assert sorted(v.key[1] for v in candidate.victims) == ["web0", "web1"]


async def test_a_pod_of_higher_priority_is_not_refused_on_a_lower_ones_answer() -> None:
    """Room held for a preemptor (priority 100) keeps out a pod of priority 50, not one alike
    in all else at 1000: the refusal of the first is no answer for the second."""
    sched = _scheduler([node("n1", cpu="2")])
    preemptor = pod("preemptor", cpu="1500m")
    preemptor["spec"]["priority"] = 100
    sched._nominate(("default", "preemptor"), preemptor, pod_requests(preemptor), "n1")
    low, high = pod("low", cpu="1"), pod("high", cpu="1")
    low["spec"]["priority"], high["spec"]["priority"] = 50, 1000
    for p in (low, high):
        sched.pods._upsert(p)
        sched._schedule_one(("default", p["metadata"]["name"]), p)
    assert ("default", "low") in sched._unschedulable
    assert ("default", "high") in sched._binding
    await sched.stop()
    await asyncio.sleep(0)


def test_nodes_whose_lower_pods_are_not_in_the_way_are_not_judged_again() -> None:
    """Every node is refused for the spread's skew and holds a placeholder the spread does
    not count: taking it away cannot help, so no node has its rules counted afresh (for a
    spread, a walk over every node, for each node)."""
    nodes = [node(f"n{i}", labels={HOSTNAME: f"n{i}"}) for i in range(20)]
    sched = _scheduler([*nodes, node("full", cpu="1", labels={HOSTNAME: "full"})])
    for i in range(20):
        _on(sched, f"web{2 * i}", f"n{i}", 0)
        _on(sched, f"web{2 * i + 1}", f"n{i}", 0)
        _on(sched, f"hold{i}", f"n{i}", -1)
    _on(sched, "hog", "full", 1000, cpu="1")
    preemptor = pod("preemptor")
    preemptor["metadata"]["labels"] = {"app": "web"}
    spread = {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule"}
    spread["labelSelector"] = {"matchLabels": {"app": "web"}}
    preemptor["spec"]["topologySpreadConstraints"] = [spread]
    judged: list[str] = []
    rules_pass = sched._rules_pass
    sched._rules_pass = lambda p, info, gone: judged.append(info.name) or rules_pass(p, info, gone)
    _, reasons = sched.select_node(preemptor)
    why, candidate = sched._preemption(
        ("default", "preemptor"), preemptor, pod_requests(preemptor), reasons
    )
    assert candidate is None and judged == []
    assert why.endswith("21 No preemption victims found for incoming pod.")
