"""Counts kept from pod events agree with counting the pods again, whatever the events were.

The ReplicaSet and disruption controllers read sums kept from pod events instead of scanning the
pods per reconcile; a random history of adds, updates and deletes must leave those sums equal to
the ones computed from the pods as they stand.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeops.sim.cluster.apiclient import (
    PODS,
    ApiClient,
)
from nodeops.sim.cluster.disruption import DisruptionController
from nodeops.sim.cluster.informer import Informer
from nodeops.sim.cluster.pdb_status import compute_pdb_status, pdb_status_of
from nodeops.sim.cluster.podcontrol import available_after
from nodeops.sim.cluster.replicaset import replicaset_status, replicaset_status_of
from nodeops.sim.cluster.tally import pod_tally

from .disruption_fixture import disruption_controller

NOW = datetime(2025, 1, 1, 0, 10, tzinfo=UTC)
OWNERS = ("rs-a", "rs-b")


def _stamp(seconds: int) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(rng: random.Random, name: str, version: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": str(version),
        "labels": rng.choice([{"app": "web"}, {"app": "web", "tier": "a"}, {"app": "api"}]),
    }
    owner = rng.choice((*OWNERS, None))
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner,
             "controller": True}
        ]  # fmt: skip
    if rng.random() < 0.2:
        meta["deletionTimestamp"] = _stamp(1)
    ready = rng.random() < 0.7
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {
            "phase": rng.choice(["Running", "Running", "Pending", "Succeeded"]),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": _stamp(rng.choice([5, 30, 90, 400])),
                }
            ],
        },
    }


def _history(rng: random.Random, pods: Informer, steps: int) -> None:
    names = [f"p{i}" for i in range(25)]
    for version in range(1, steps + 1):
        name = rng.choice(names)
        if rng.random() < 0.25:
            gone = pods.get("ns", name)
            if gone is not None:
                pods._delete(gone)
        else:
            pods._upsert(_pod(rng, name, version))


def _replicaset(owner: str, min_ready: int) -> dict[str, Any]:
    return {
        "metadata": {"name": owner, "namespace": "ns", "uid": owner, "generation": 2},
        "spec": {
            "minReadySeconds": min_ready,
            "template": {"metadata": {"labels": {"app": "web"}}},
        },
    }


def test_owner_counts_follow_events_as_a_recount_would() -> None:
    rng = random.Random(7)
    pods = Informer(ApiClient("http://127.0.0.1:1"), PODS)
    tally = pod_tally(pods)
    assert pod_tally(pods) is tally
    now = NOW.timestamp()
    for _ in range(20):
        _history(rng, pods, 40)
        for owner in OWNERS:
            owned = [
                p
                for p in pods.items()
                if (p["metadata"].get("ownerReferences") or [{}])[0].get("uid") == owner
            ]
            for min_ready in (0, 60):
                rs = _replicaset(owner, min_ready)
                counts = tally.of(owner)
                assert replicaset_status_of(rs, counts, now) == replicaset_status(rs, owned, now)
                assert counts.available_after(min_ready, now) == available_after(
                    owned, min_ready, now
                )
            frozen = tally.of(owner).copy()
            before = replicaset_status_of(_replicaset(owner, 0), frozen, now)
            _history(rng, pods, 5)
            assert replicaset_status_of(_replicaset(owner, 0), frozen, now) == before


def _controller() -> tuple[DisruptionController, dict[str, Informer]]:
    dc, infs = disruption_controller()
    for owner in OWNERS:
        infs["replicasets"]._upsert(
            {
                "kind": "ReplicaSet",
                "metadata": {
                    "name": owner,
                    "namespace": "ns",
                    "uid": owner,
                    "resourceVersion": "1",
                },
                "spec": {"replicas": 4},
            }
        )
    return dc, infs


def test_budget_members_follow_events_as_a_recount_would() -> None:
    rng = random.Random(11)
    dc, infs = _controller()
    pods = infs["pods"]
    budgets: dict[str, dict[str, Any]] = {
        "by-count": {"minAvailable": 2},
        "by-share": {"maxUnavailable": "25%"},
        "by-share-min": {"minAvailable": "50%"},
    }
    for name, rule in budgets.items():
        infs["poddisruptionbudgets"]._upsert(
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 1,
                             "resourceVersion": "1"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, **rule},
            }
        )  # fmt: skip
    for _ in range(20):
        _history(rng, pods, 40)
        web = [p for p in pods.items() if p["metadata"]["labels"].get("app") == "web"]
        for name in budgets:
            pdb = infs["poddisruptionbudgets"].get("ns", name)
            assert pdb is not None
            # Some approved evictions, one of them expired, one for a pod that is gone.
            chosen = rng.sample(web, min(3, len(web)))
            disrupted = {p["metadata"]["name"]: _stamp(rng.choice([10, 200])) for p in chosen}
            disrupted["gone"] = _stamp(10)
            pdb = {**pdb, "status": {"disruptedPods": disrupted}}
            members = dc._members[("ns", name)]
            assert members.names() == {p["metadata"]["name"] for p in web}
            assert pdb_status_of(pdb, members, dc.scale_of, NOW) == compute_pdb_status(
                pdb, list(pods.items()), dc.scale_of, NOW
            )
