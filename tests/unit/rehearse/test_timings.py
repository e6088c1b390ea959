"""Pod start times read from the cluster's record, and the crowd a record can carry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodeops.rehearse.timings import Workloads, pod_start_seconds

ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(seconds: float) -> str:
    return (ORIGIN + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _pod(name: str, owner: str, created: float, ready_after: float) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "creationTimestamp": _iso(created),
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{owner}-1", "controller": True}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": _iso(created + ready_after),
                }
            ],
            "containerStatuses": [{"name": "main", "restartCount": 0}],
        },
    }


WORKLOADS = Workloads(
    [
        {
            "metadata": {
                "name": f"{name}-1",
                "namespace": "shop",
                "ownerReferences": [{"kind": "Deployment", "name": name, "controller": True}],
            }
        }
        for name in ("web", "api")
    ]
)


def test_starts_made_at_ease_give_their_median() -> None:
    pods = [_pod(f"web-{i}", "web", created=60.0 * i, ready_after=2.0 + i % 3) for i in range(9)]
    starts = pod_start_seconds(pods, WORKLOADS, crowd_limit=10)
    assert starts.seconds == {"Deployment/shop/web": 3.0}
    assert starts.crowded == {}
    assert starts.notes() == []


def test_a_crowd_larger_than_the_roll_makes_gives_its_fastest_tenth_and_says_so() -> None:
    # 200 pods created at once, served one after another: the last waited 40 s.
    pods = [_pod(f"web-{i}", "web", created=0.0, ready_after=2.0 + i / 5) for i in range(200)]
    starts = pod_start_seconds(pods, WORKLOADS, crowd_limit=30)
    assert starts.seconds["Deployment/shop/web"] == 6.0
    crowd = starts.crowded["Deployment/shop/web"]
    assert crowd["pods"] == 200
    assert crowd["median_seconds"] == 21.9
    assert crowd["started_with"] == 199
    assert crowd["roll_starts_at_most"] == 30
    (note,) = starts.notes()
    assert "Deployment/shop/web" in note and "199 others" in note and "30 this roll" in note
    # Without a limit (nothing known of the roll) every start counts.
    assert pod_start_seconds(pods, WORKLOADS).seconds["Deployment/shop/web"] == 21.9


def test_the_first_of_a_crowd_started_as_a_roll_starts_them() -> None:
    """Created one after another within a second: the first 31 began amid at most 30 others,
    as many as the roll starts at once, and only theirs count."""
    pods = [_pod(f"web-{i}", "web", created=i / 200, ready_after=2.0 + i / 5) for i in range(200)]
    starts = pod_start_seconds(pods, WORKLOADS, crowd_limit=30)
    assert starts.seconds["Deployment/shop/web"] == 5.0
    assert starts.crowded == {}


def test_a_workload_with_quiet_starts_uses_only_those() -> None:
    crowd = [_pod(f"web-{i}", "web", created=0.0, ready_after=30.0) for i in range(50)]
    crowd += [_pod(f"api-{i}", "api", created=0.0, ready_after=30.0) for i in range(50)]
    # Later, a rollout of web alone: three pods at a time, 2 s each.
    quiet = [_pod(f"web-new-{i}", "web", created=100.0 + 10 * i, ready_after=2.0) for i in range(6)]
    starts = pod_start_seconds(crowd + quiet, WORKLOADS, crowd_limit=5)
    assert starts.seconds["Deployment/shop/web"] == 2.0
    assert "Deployment/shop/web" not in starts.crowded
    assert starts.seconds["Deployment/shop/api"] == 30.0
    assert set(starts.crowded) == {"Deployment/shop/api"}
