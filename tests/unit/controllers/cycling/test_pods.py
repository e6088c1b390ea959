"""Which pods the Wait method waits for, and which unbound ones are about to take room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodeops.controllers.cycling.pods import awaiting_scheduler, movable, protected_pods

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def pod(name: str, annotations: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    started = kw.pop("started", NOW - timedelta(minutes=10))
    return {
        "metadata": {
            "name": name,
            "namespace": kw.pop("namespace", "default"),
            "labels": kw.pop("labels", {}),
            "annotations": annotations or {},
        },
        "spec": {},
        "status": {
            "phase": kw.pop("phase", "Running"),
            "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def names(pods: list[dict[str, Any]], **kw: Any) -> list[str]:
    return [p.pod for p in protected_pods(pods, now=NOW, **kw)]


def test_each_annotation_protects() -> None:
    pods = [
        pod("a", {"nodeops.dev/do-not-disrupt": "true"}),
        pod("b", {"cyclops.atlassian.com/do-not-disrupt": "true"}),
        pod("c", {"karpenter.sh/do-not-disrupt": "true"}),
        pod("d", {"karpenter.sh/do-not-disrupt": "false"}),
        pod("e"),
        pod("f", {"nodeops.dev/do-not-disrupt": "true"}, phase="Succeeded"),
    ]
    assert names(pods) == ["default/a", "default/b", "default/c"]


def test_karpenter_duration_counts_from_the_start() -> None:
    pods = [
        pod("young", {"karpenter.sh/do-not-disrupt": "1h"}),
        pod("old", {"karpenter.sh/do-not-disrupt": "5m"}),
    ]
    (young,) = protected_pods(pods, now=NOW)
    assert young.pod == "default/young"
    assert young.until == NOW - timedelta(minutes=10) + timedelta(hours=1)


def test_ignored_namespaces_and_labels() -> None:
    pods = [
        pod("a", {"nodeops.dev/do-not-disrupt": "true"}, namespace="kube-system"),
        pod("b", {"nodeops.dev/do-not-disrupt": "true"}, labels={"tier": "batch"}),
        pod("c", {"nodeops.dev/do-not-disrupt": "true"}, labels={"tier": "web"}),
    ]
    assert names(
        pods, ignore_namespaces=["kube-system"], ignore_labels={"tier": ["batch", "x"]}
    ) == ["default/c"]


def test_movable() -> None:
    assert movable(pod("a"))
    mirror = pod("m", {"kubernetes.io/config.mirror": "x"})
    assert not movable(mirror)
    assert not movable(pod("done", phase="Failed"))


def _unbound(age: timedelta, scheduled: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"creationTimestamp": (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {},
        "status": {"phase": "Pending"},
    }
    if scheduled is not None:
        body["status"]["conditions"] = [
            {"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable"}
        ]
    return body


def test_only_new_pods_no_scheduler_turned_down_are_about_to_take_room() -> None:
    assert awaiting_scheduler(_unbound(timedelta(seconds=2)), NOW)
    assert awaiting_scheduler({"spec": {}}, NOW)
    # Turned down: waiting for something, maybe for something the check cannot see.
    assert not awaiting_scheduler(_unbound(timedelta(seconds=2), scheduled="False"), NOW)
    # Judged by nobody for five minutes: no scheduler is coming for it.
    assert awaiting_scheduler(_unbound(timedelta(minutes=4, seconds=59)), NOW)
    assert not awaiting_scheduler(_unbound(timedelta(minutes=5)), NOW)
    # Preempting: marked unschedulable, but given a place once its victims are gone.
    preemptor = _unbound(timedelta(minutes=10), scheduled="False")
    preemptor["status"]["nominatedNodeName"] = "n1"
    assert awaiting_scheduler(preemptor, NOW)
