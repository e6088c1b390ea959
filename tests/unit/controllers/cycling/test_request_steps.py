"""The request controller's decisions that need no cluster: which step each phase runs, the
concurrency in force, what a request that selected less than it named says."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.api import CycleNodeRequest
from nodeops.api.cycling import CNR_PHASES, TERMINAL_PHASES, CycleNodeRequestNode
from nodeops.controllers.cycling.request import TRANSITIONS
from nodeops.controllers.cycling.request.batching import concurrency
from nodeops.controllers.cycling.request.env import RequestView
from nodeops.controllers.cycling.request.selection import selection_note


def _request(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    settings = spec.pop("cycleSettings", {"method": "Drain"})
    obj: dict[str, Any] = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": "roll", "namespace": "ns"},
        "spec": {
            "nodeGroupName": "web",
            "selector": {"matchLabels": {"role": "web"}},
            "cycleSettings": settings,
            **spec,
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def _node(name: str) -> dict[str, Any]:
    return {"name": name, "providerId": f"sim:///{name}", "nodeGroupName": "web"}


def test_every_phase_that_is_not_terminal_has_one_step() -> None:
    assert set(TRANSITIONS) == {"", *CNR_PHASES} - TERMINAL_PHASES


@pytest.mark.parametrize(
    ("setting", "selected", "expected"),
    [(0, 5, 5), (0, 0, 1), (2, 5, 2), (9, 5, 9)],
)
def test_zero_concurrency_means_every_selected_node(
    setting: int, selected: int, expected: int
) -> None:
    spec = CycleNodeRequest.parse_spec(
        _request(cycleSettings={"method": "Drain", "concurrency": setting})
    ).spec
    assert spec.cycle_settings.concurrency_for(selected) == expected


def test_the_concurrency_in_force_is_the_recorded_one_else_the_spec_resolved() -> None:
    obj = _request(cycleSettings={"method": "Drain", "concurrency": 0})
    spec = CycleNodeRequest.parse_spec(obj).spec
    three = [_node(n) for n in ("a", "b", "c")]
    # Recorded in Pending: that is what the request runs with, whatever the spec says now.
    assert concurrency(RequestView({**obj, "status": {"concurrency": 2}}), spec) == 2
    # Not recorded (a status from before it was): the spec, resolved for the selected nodes.
    assert concurrency(RequestView({**obj, "status": {"nodesToTerminate": three}}), spec) == 3


def test_the_typed_view_follows_each_written_status() -> None:
    view = RequestView(_request({"phase": "Initialised", "currentNodes": [_node("a")]}))
    assert [n.name for n in view.current_nodes] == ["a"]
    view.status = {"phase": "ScalingUp", "currentNodes": [_node("a"), _node("b")]}
    assert view.typed.phase == "ScalingUp"
    assert [n.name for n in view.current_nodes] == ["a", "b"]


def test_what_a_request_that_replaces_less_than_it_names_says() -> None:
    nodes = [CycleNodeRequestNode.model_validate(_node("a"))]
    plain = CycleNodeRequest.parse_spec(_request()).spec
    assert selection_note(plain, nodes) == ""
    assert selection_note(plain, []) == (
        "spec.selector: role=web selects no node of node groups web: nothing to replace"
    )
    named = CycleNodeRequest.parse_spec(_request(nodeNames=["a", "ghost"])).spec
    assert selection_note(named, nodes) == (
        "spec.nodeNames: ghost skipped: not among the selected nodes of the node groups"
    )
