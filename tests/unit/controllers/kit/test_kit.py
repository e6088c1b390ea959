"""The controller kit's pieces that need no cluster: the node predicate, the clock a manager
owns, the null event sink, the drain preset and the outcome's words, the channel source."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeops.controllers.kit import (
    GOING_AWAY,
    NULL_EVENTS,
    Channel,
    Clock,
    Drainers,
    DrainOutcome,
    clock_at,
    clock_of,
    events_or_null,
    every_object,
    going_away,
    merge_patch,
    more_than_notes_changed,
    node_changed,
    to_request,
    use_clock,
)
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import InvalidRule, SourcesNotReady
from nodeops.kube import Client, Controller, Manager, Request, Result
from nodeops.kube.controller import ReconcileContext
from nodeops.kube.events import EventRecorder
from nodeops.kube.resources import NODES

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "n", "labels": {"a": "1"}, "annotations": {}, "resourceVersion": "1"},
        "spec": {"providerID": "sim://i-1"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
            "images": [],
        },
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        at = obj
        for key in parents:
            at = at.setdefault(key, {})
        at[leaf] = value
    return obj


# ---------------------------------------------------------------------- node_changed


def test_a_heartbeat_is_not_news() -> None:
    old = node()
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    new["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:10Z"
    new["status"]["images"] = [{"names": ["nginx"]}]
    assert not node_changed(old, new)


@pytest.mark.parametrize(
    "change",
    [
        {"spec__unschedulable": True},
        {"metadata__labels": {"a": "2"}},
        {"metadata__annotations": {"x": "y"}},
        {"metadata__finalizers": ["f"]},
        {"metadata__deletionTimestamp": "2026-01-01T00:00:00Z"},
        {"status__nodeInfo": {"kubeletVersion": "v1.32.0"}},
    ],
)
def test_spec_metadata_and_the_kubelet_version_are_news(change: dict[str, Any]) -> None:
    assert node_changed(node(), node(**change))


# ---------------------------------------------------------------------- more_than_notes_changed


def child(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "labels": {"a": "1"}, "resourceVersion": "1"},
        "spec": {"nodeName": "n"},
        "status": {"phase": "DrainingPods", "message": "3 pods left", "podsToMove": 3, **status},
    }


def test_a_new_note_wakes_nobody() -> None:
    """A drain rewrites its message and Drained condition as pods leave: no reconcile for it."""
    new = child(message="2 pods left", conditions=[{"type": "Drained", "status": "False"}])
    new["metadata"]["resourceVersion"] = "2"
    new["metadata"]["managedFields"] = [{"manager": "nodeops"}]
    assert not more_than_notes_changed(child(), new)


@pytest.mark.parametrize(
    "change",
    [
        {"phase": "DeletingNode"},
        {"podsToMove": 4},
        {"forced": True},
        {"currentNode": {"name": "n"}},
    ],
)
def test_a_phase_or_a_field_a_reconciler_acts_on_is_news(change: dict[str, Any]) -> None:
    assert more_than_notes_changed(child(), child(**change))


def test_the_spec_and_the_metadata_are_news() -> None:
    for path, value in (("spec", {"nodeName": "m"}), ("metadata", {"name": "c", "labels": {}})):
        new = child()
        new[path] = {**value, "resourceVersion": "1"} if path == "metadata" else value
        assert more_than_notes_changed(child(), new)
    deleting = child()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert more_than_notes_changed(child(), deleting)


def test_a_condition_changing_status_or_reason_is_news() -> None:
    old = node()
    not_ready = copy.deepcopy(old)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert node_changed(old, not_ready)
    other_reason = copy.deepcopy(old)
    other_reason["status"]["conditions"][0]["reason"] = "KubeletNotReady"
    assert node_changed(old, other_reason)
    added = copy.deepcopy(old)
    added["status"]["conditions"].append({"type": "NodeDetached", "status": "True"})
    assert node_changed(old, added)


# ---------------------------------------------------------------------- clock


def test_a_clock_turns_cluster_seconds_into_wall_seconds() -> None:
    clock = Clock(now=lambda: T0, scale=20.0)
    assert clock.wall(60) == 3.0
    assert clock.wall(-5) == 0.0
    assert clock.since(T0 - timedelta(seconds=90)) == 90.0
    assert clock.since(None) == 0.0
    assert clock.after(30) == T0 + timedelta(seconds=30)


def test_a_scaled_clock_runs_faster_from_its_origin() -> None:
    origin = datetime.now(UTC) - timedelta(seconds=10)
    clock = Clock.scaled(20.0, origin)
    # Ten wall seconds since the origin are (at least) two hundred cluster seconds.
    assert (clock.now() - origin).total_seconds() >= 200.0
    assert Clock.scaled(1.0).scale == 1.0


def manager() -> Manager:
    return Manager(Client("http://127.0.0.1:9", qps=0), metrics_addr="0", health_addr="0")


async def test_a_manager_has_one_clock() -> None:
    m = manager()
    try:
        assert clock_of(m) is clock_of(m)
        assert clock_of(m).scale == 1.0
        fast = Clock.scaled(20.0)
        assert use_clock(m, fast) is fast
        assert clock_of(m) is fast
        # Another controller at the same speed shares it; at another speed it is refused.
        assert clock_at(m, 20.0) is fast
        assert clock_at(m, 1.0) is fast  # the default speed is no opinion
        with pytest.raises(ValueError, match="runs at 20 cluster seconds per second, not 5"):
            use_clock(m, Clock.scaled(5.0))
        # Each manager has its own.
        assert clock_of(manager()) is not fast
    finally:
        await m.client.close()


# ---------------------------------------------------------------------- events


async def test_events_or_null_keeps_a_recorder_and_replaces_none() -> None:
    client = Client("http://127.0.0.1:9", qps=0)
    try:
        recorder = EventRecorder(client, "test", "me")
        assert events_or_null(recorder) is recorder
        assert events_or_null(None) is NULL_EVENTS
        NULL_EVENTS.event(node(), "Normal", "Reason", "Action", "recorded nowhere")
    finally:
        await client.close()


# ---------------------------------------------------------------------- drain


def test_the_going_away_preset_drains_every_pod_but_daemonset_and_mirror_pods() -> None:
    assert GOING_AWAY.ignore_daemonsets and GOING_AWAY.delete_emptydir_data and GOING_AWAY.force
    assert not GOING_AWAY.disable_eviction  # budgets hold
    assert going_away() is GOING_AWAY
    forced = going_away(disable_eviction=True)
    assert forced.disable_eviction and forced.force and forced.ignore_daemonsets
    with pytest.raises(TypeError):
        going_away(no_such_option=True)


async def test_drainers_are_made_once_per_options_and_labelled_with_the_controller() -> None:
    client = Client("http://127.0.0.1:9", qps=0)
    asked: list[int] = []

    def sources() -> Any:
        asked.append(1)
        return None

    try:
        drainers = Drainers(client, controller="mine", sources=sources)
        assert asked == []  # nothing is watched before the first drain
        first = drainers.get(GOING_AWAY)
        assert drainers.get(going_away()) is first
        assert drainers.get(DrainOptions()) is not first
        assert first.label() == "mine"
        assert asked == [1, 1]
    finally:
        await client.close()


def test_an_outcome_says_what_to_do_in_one_word() -> None:
    assert DrainOutcome("done", "node drained").reason == "Drained"
    assert DrainOutcome("done", "gone", gone=True).reason == "NodeGone"
    assert DrainOutcome("wait", "2 pods").reason == "Draining"
    caches = DrainOutcome("wait", "informers", error=SourcesNotReady("informers"))
    assert caches.waiting and not caches.blocked and caches.reason == "SourcesNotReady"
    rule = DrainOutcome("wait", "bad rule", error=InvalidRule("bad rule"))
    assert rule.waiting and rule.blocked and rule.reason == "InvalidRule"


# ---------------------------------------------------------------------- status


def test_merge_patch_sends_only_what_changed_and_removes_with_null() -> None:
    old = {"phase": "A", "keep": 1, "gone": 2, "nested": {"x": 1, "y": 2}, "list": [1]}
    new = {"phase": "B", "keep": 1, "nested": {"x": 1, "y": 3}, "list": [1, 2]}
    assert merge_patch(old, new) == {
        "gone": None,
        "phase": "B",
        "nested": {"y": 3},
        "list": [1, 2],
    }
    assert merge_patch(new, new) == {}


# ---------------------------------------------------------------------- channel


class _Nothing:
    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        return None


async def test_a_channel_enqueues_requests_without_reaching_into_the_queue() -> None:
    m = manager()
    try:
        nodes = m.informers.informer(NODES)
        controller = Controller("kit-test", _Nothing()).for_(nodes)
        Channel(controller, to_request).send(Request("a"))
        assert len(controller.queue) == 1
        # "Everything again" before the first sync maps to nothing: that sync enqueues all.
        Channel(controller, every_object(nodes)).send("reloaded")
        assert len(controller.queue) == 1

        def unsynced(_: object) -> list[Request]:
            return [Request.for_object(n) for n in nodes.objects()]  # raises NotSynced

        Channel(controller, unsynced).send("anything")
        assert len(controller.queue) == 1
    finally:
        await m.client.close()
