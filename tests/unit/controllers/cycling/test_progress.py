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
