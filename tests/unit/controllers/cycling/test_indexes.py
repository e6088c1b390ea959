"""The values the cycling index functions give each object: what the reads made of them rely on."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.controllers.cycling.keys import ANNOTATION_MANAGED
from nodeops.controllers.cycling.request.indexes import (
    ACTIVE,
    REQUIRED,
    UNBOUND,
    annotated_for,
    anti_affinity,
    in_namespace,
    label_pairs,
    owner_moves,
    owner_state,
    owner_uid,
    requests_of,
    states,
    unbound,
)
from nodeops.kube import Request


def _child(phase: str | None = None, moves: Any = None, owner: str | None = "u1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": "ns"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "X", "name": "r", "uid": owner, "controller": True}
        ]
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if moves is not None:
        status["podsToMove"] = moves
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    ("phase", "state"),
    [
        (None, ACTIVE),
        ("Pending", ACTIVE),
        ("DrainingPods", ACTIVE),
        ("SomethingNew", ACTIVE),
        ("Successful", "Successful"),
        ("Failed", "Failed"),
    ],
)
def test_every_phase_that_is_not_terminal_is_active(phase: str | None, state: str) -> None:
    assert states(_child(phase)) == [state]
    assert owner_state(_child(phase)) == [f"u1/{state}"]


def test_an_object_without_a_controller_has_no_owner_entries() -> None:
    assert owner_uid(_child("Successful", 3, owner=None)) == []
    assert owner_state(_child("Successful", 3, owner=None)) == []
    assert owner_moves(_child("Successful", 3, owner=None)) == []


@pytest.mark.parametrize(
    ("phase", "moves", "bits"),
    [
        ("Successful", 1, ["0"]),
        ("Failed", 6, ["1", "2"]),
        ("Successful", 1000, ["3", "5", "6", "7", "8", "9"]),
        ("Successful", 0, []),
        ("Successful", None, []),
        ("DrainingPods", 5, []),  # a working child is read, not counted
        ("Successful", "12", []),  # refused by the schema: counted as none, never raising
        ("Successful", True, []),
        ("Successful", -3, []),
    ],
)
def test_a_finished_childs_moves_are_its_bits(phase: str, moves: Any, bits: list[str]) -> None:
    assert owner_moves(_child(phase, moves)) == [f"u1/{b}" for b in bits]
    if bits:
        assert sum(1 << int(b) for b in bits) == moves


def test_a_node_is_indexed_by_the_request_its_marker_names() -> None:
    def node(annotations: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "n", "annotations": annotations}}

    assert annotated_for(node({ANNOTATION_MANAGED: "roll"})) == ["roll"]
    assert annotated_for(node({ANNOTATION_MANAGED: ""})) == []
    assert annotated_for(node({"other": "roll"})) == []
    assert annotated_for({"metadata": {"name": "n"}}) == []


def test_keys_become_requests_without_reading_the_objects() -> None:
    keys = ["a/one", "ab/two", "a/three"]
    assert in_namespace(keys, "a") == ["a/one", "a/three"]
    assert in_namespace(keys, "") == []
    assert requests_of(in_namespace(keys, "a")) == [Request("one", "a"), Request("three", "a")]


def test_pods_with_required_anti_affinity_are_indexed_and_no_others() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}
    required = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    preferred = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        }
    }
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    assert anti_affinity({"spec": {"affinity": required}}) == [REQUIRED]
    assert anti_affinity({"spec": {"affinity": preferred}}) == []
    assert anti_affinity({"spec": {"affinity": affinity}}) == []
    assert anti_affinity({"spec": {}}) == []


def test_only_pods_the_scheduler_will_place_are_unbound() -> None:
    assert unbound({"spec": {}, "status": {"phase": "Pending"}}) == [UNBOUND]
    assert unbound({}) == [UNBOUND]
    assert unbound({"spec": {"nodeName": "n1"}}) == []
    assert unbound({"spec": {"schedulingGates": [{"name": "wait"}]}}) == []
    assert unbound({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}) == []
    assert unbound({"status": {"phase": "Failed"}}) == []
    assert unbound({"status": {"phase": "Succeeded"}}) == []
    turned_down = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    assert unbound({"status": {"phase": "Pending", "conditions": [turned_down]}}) == []
    preempting = {"phase": "Pending", "conditions": [turned_down], "nominatedNodeName": "n1"}
    assert unbound({"status": preempting}) == [UNBOUND]
    assert unbound({"status": {"conditions": ["not a condition"]}}) == [UNBOUND]


def test_pods_are_indexed_by_each_label() -> None:
    pod = {"metadata": {"labels": {"app": "web", "tier": "front"}}}
    assert sorted(label_pairs(pod)) == ["app=web", "tier=front"]
    assert label_pairs({"metadata": {}}) == []
