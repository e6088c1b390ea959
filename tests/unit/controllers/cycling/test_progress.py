"""What a person watching a roll is told: why it is not further along, in one line."""

from __future__ import annotations

from typing import Any

from nodeops.controllers.cycling.progress import roll_state


def _state(status: dict[str, Any], children: list[dict[str, Any]]) -> str:
    request = {"status": status}
    return roll_state(
        request,
        children,
        pods_moved=0,
        requests_sent=10,
        requests_failed=0,
        simulated_seconds=5,
    ).line()


def child(node: str, phase: str, message: str) -> dict[str, Any]:
    return {"spec": {"nodeName": node}, "status": {"phase": phase, "message": message}}


def test_a_blocked_request_says_what_blocks_it() -> None:
    status = {
        "phase": "Initialised",
        "conditions": [
            {"type": "Blocked", "status": "True", "message": "disruption budget: 0 nodes"}
        ],
    }
    assert _state(status, []).splitlines()[1].strip() == "disruption budget: 0 nodes"


def test_otherwise_what_the_first_node_in_progress_waits_for() -> None:
    drain = (
        "Drain not completed yet (started at 2026-01-01T00:00:00Z):\n"
        "* Pod shop/web-1: waiting for PodDisruptionBudget shop/web to allow a disruption\n"
        "* Pod shop/db-0: eviction in progress"
    )
    children = [
        child("node-b", "DrainingPods", drain),
        child("node-a", "Successful", ""),
        child("node-c", "WaitingPods", "waiting for 1 pods that must not be disrupted: x"),
    ]
    line = _state({"phase": "WaitingTermination", "message": ""}, children)
    assert line.splitlines()[1].strip() == (
        "node-b (DrainingPods): Pod shop/web-1: waiting for PodDisruptionBudget shop/web to "
        "allow a disruption"
    )
    assert "requests failed 0 of 10" in line.splitlines()[0]


def test_a_finished_roll_says_nothing_more_unless_it_failed() -> None:
    assert len(_state({"phase": "Successful", "message": ""}, []).splitlines()) == 1
    failed = _state({"phase": "Failed", "message": "1 nodes failed: node-a: timeout"}, [])
    assert failed.splitlines()[1].strip() == "1 nodes failed: node-a: timeout"


def test_a_real_cluster_shows_no_simulation_counters() -> None:
    """`nodeops cycle --watch` against a cluster has no simulated clock or request counts:
    it does not show them as zeros."""
    status = {"phase": "ScalingUp", "selectedByGroup": {"a": 1}}
    line = roll_state({"status": status}, [], pods_moved=3).line()
    assert "requests failed" not in line and "simulated" not in line and "[" not in line
    assert line.startswith("ScalingUp") and "pods moved 3" in line
    demo = roll_state(
        {"status": status}, [], pods_moved=3, requests_sent=10, simulated_seconds=5
    ).line()
    assert demo.startswith("[      5s] ScalingUp") and "requests failed 0 of 10" in demo


def test_each_groups_progress_is_its_selected_count_and_its_replaced_children() -> None:
    status = {"phase": "WaitingTermination", "selectedByGroup": {"a": 2, "b": 1}}
    children = [
        {"spec": {"nodeName": "n1", "nodeGroupName": "a"}, "status": {"phase": "Successful"}},
        {"spec": {"nodeName": "n2", "nodeGroupName": "a"}, "status": {"phase": "DrainingPods"}},
    ]
    assert roll_state({"status": status}, children, pods_moved=0).groups == {
        "a": (1, 2),
        "b": (0, 1),
    }
