"""The drain report in Cluster API's words, from a plan and the refusals seen so far."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeops.drain.classify import Behavior, Classification, Decision
from nodeops.drain.plan import make_plan, report

STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def pod(name: str, *, deleting: bool = False, phase: str = "Running") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:04:06Z"
    return {"metadata": meta, "status": {"phase": phase}}


def classification(*decisions: Decision) -> Classification:
    return Classification(decisions=list(decisions))


def test_report_lists_each_bucket_in_order() -> None:
    c = classification(
        Decision(pod("t1", deleting=True), Behavior.DRAIN, order=0),
        Decision(pod("a1"), Behavior.DRAIN, order=0),
        Decision(pod("a2"), Behavior.DRAIN, order=0),
        Decision(pod("a3"), Behavior.DRAIN, order=0),
        Decision(pod("x1"), Behavior.DRAIN, order=0),
        Decision(pod("w1"), Behavior.WAIT_COMPLETED, order=0),
        Decision(pod("l2"), Behavior.DRAIN, order=20),
        Decision(pod("l1"), Behavior.DRAIN, order=10),
        Decision(pod("s1"), Behavior.SKIP),
    )
    refusal = (
        "Cannot evict pod as it would violate the pod's disruption budget. The disruption "
        "budget b needs 3 healthy pods and has 3 currently"
    )
    text = report(
        make_plan(c),
        started_at=STARTED,
        failures={"ns/a1": refusal, "ns/a2": refusal, "ns/a3": "boom"},
    )
    assert text.splitlines() == [
        "Drain not completed yet (started at 2026-01-02T03:04:05Z):",
        "* Pod ns/t1: deletionTimestamp set, but still not removed from the Node",
        "* Pods ns/a1, ns/a2: cannot evict pod as it would violate the pod's disruption budget. "
        "The disruption budget b needs 3 healthy pods and has 3 currently",
        "* Pod ns/a3: failed to evict Pod, boom",
        "* Pod ns/x1: eviction in progress",
        "* Pod ns/w1: waiting for completion",
        "After above Pods have been removed from the Node, the following Pods will be evicted: "
        "ns/l1, ns/l2",
    ]


def test_long_lists_are_cut_after_three_and_completed_waits_do_not_block() -> None:
    c = classification(
        *(Decision(pod(f"p{i}", deleting=True), Behavior.DRAIN) for i in range(5)),
        Decision(pod("done", phase="Succeeded"), Behavior.WAIT_COMPLETED),
    )
    plan = make_plan(c)
    assert [d.ref for d in plan.wait_completed_now] == []
    assert report(plan, started_at=STARTED, failures={}).splitlines()[1] == (
        "* Pods ns/p0, ns/p1, ns/p2, ... (2 more): deletionTimestamp set, but still not "
        "removed from the Node"
    )
    done = make_plan(
        classification(Decision(pod("done", phase="Succeeded"), Behavior.WAIT_COMPLETED))
    )
    assert report(done, started_at=STARTED, failures={}) == (
        "Drain completed (started at 2026-01-02T03:04:05Z)"
    )
