"""The simulated scheduler ranks nodes as kube-scheduler's TaintToleration score plugin does:
a node with PreferNoSchedule taints the pod does not tolerate is chosen only when nothing
better fits, even when it is emptier."""

from __future__ import annotations

from nodeops.sim.cluster.scheduling import (
    intolerable_prefer_no_schedule,
    taint_toleration_scores,
)

PREFER = {"key": "nodeops.dev/cycling", "value": "r", "effect": "PreferNoSchedule"}


def test_counting_intolerable_prefer_no_schedule_taints() -> None:
    other = {"key": "x", "effect": "NoSchedule"}
    assert intolerable_prefer_no_schedule([PREFER, other], []) == 1
    tolerating = [{"key": "nodeops.dev/cycling", "operator": "Exists"}]
    assert intolerable_prefer_no_schedule([PREFER], tolerating) == 0
    assert intolerable_prefer_no_schedule([PREFER], [{"operator": "Exists"}]) == 0


def test_scores_are_normalised_over_the_feasible_nodes() -> None:
    assert taint_toleration_scores([0, 0]) == [100.0, 100.0]
    assert taint_toleration_scores([0, 1]) == [100.0, 0.0]
    assert taint_toleration_scores([0, 1, 2]) == [100.0, 50.0, 0.0]
    assert taint_toleration_scores([]) == []


def test_the_scheduler_avoids_prefer_no_schedule_nodes_while_others_fit() -> None:
    from tests.unit.sim.test_cluster_scheduling import _scheduler, node, pod

    # The tainted node is empty, the other already carries pods: kube still prefers the other.
    sched = _scheduler([node("old", taints=[PREFER]), node("new")])
    for i in range(3):
        p = pod(f"busy{i}")
        sched._account(("default", f"busy{i}"), "new", p)
    chosen, _ = sched.select_node(pod("moved"))
    assert chosen == "new"
    # A pod that tolerates the taint goes by room alone.
    tolerant = pod("tolerant")
    tolerant["spec"]["tolerations"] = [{"key": "nodeops.dev/cycling", "operator": "Exists"}]
    chosen, _ = sched.select_node(tolerant)
    assert chosen == "old"
