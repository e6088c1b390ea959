"""The ReplicaSet controller: keep `replicas` active pods, report how many are ready.

Node drains depend on it: an evicted pod is replaced by its ReplicaSet elsewhere, and the new
pod's readiness is what lets the next eviction pass the PodDisruptionBudget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import REPLICASETS, ApiClient, Obj
from nodeops.sim.cluster.informer import Informer, Key
from nodeops.sim.cluster.owned import OwnerController
from nodeops.sim.cluster.podcontrol import deletion_order, is_active, merge_status, write_status
from nodeops.sim.cluster.scheduling import is_deleting
from nodeops.sim.cluster.tally import OwnedCounts, counts_of, pod_tally

STATUS_FIELDS = (
    "replicas",
    "fullyLabeledReplicas",
    "readyReplicas",
    "availableReplicas",
    "observedGeneration",
)


def replica_diff(replicas: int, active: int, *, burst: int = 500) -> int:
    """Pods to create (> 0) or delete (< 0), at most `burst` per sync like `burstReplicas`."""
    diff = replicas - active
    return max(-burst, min(burst, diff))


def pods_to_delete(active: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    return deletion_order(active)[:count] if count > 0 else []


def replicaset_status(
    rs: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    return replicaset_status_of(rs, counts_of(pods), now)


def replicaset_status_of(rs: Mapping[str, Any], counts: OwnedCounts, now: float) -> dict[str, Any]:
    """The status from the counts of the pods the ReplicaSet controls."""
    spec = rs.get("spec") or {}
    min_ready = float(spec.get("minReadySeconds") or 0)
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    computed: Obj = {
        "replicas": counts.active,
        "fullyLabeledReplicas": counts.fully_labelled(labels),
        "readyReplicas": counts.ready,
        "availableReplicas": counts.available(min_ready, now),
        "observedGeneration": int((rs.get("metadata") or {}).get("generation") or 0),
    }
    return merge_status(rs.get("status"), STATUS_FIELDS, computed)


class ReplicaSetController(OwnerController):
    name = "replicaset"
    owner_kind = "ReplicaSet"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        replicasets: Informer,
        *,
        workers: int = 4,
        burst: int = 500,
    ) -> None:
        super().__init__(clock, client, pods, replicasets, workers=workers)
        self.burst = burst
        self.tally = pod_tally(pods)

    async def reconcile(self, key: Key) -> float | None:
        rs = self.owners.store.get(key)
        if rs is None:
            return None
        meta = rs.get("metadata") or {}
        rs_uid = meta.get("uid") or ""
        counts = self.tally.of(rs_uid)
        if not is_deleting(rs) and self.expectations.satisfied(rs_uid):
            replicas = int((rs.get("spec") or {}).get("replicas", 1) or 0)
            diff = replica_diff(replicas, counts.active, burst=self.burst)
            if diff:
                # The status is the pods' as they were before this sync's creates and deletes,
                # as kube's syncReplicaSet computes it from the list it managed with.
                counts = counts.copy()
                await self._manage(rs, rs_uid, diff)
        now = self.clock.now().timestamp()
        status = replicaset_status_of(rs, counts, now)
        min_ready = float((rs.get("spec") or {}).get("minReadySeconds") or 0)
        again = counts.available_after(min_ready, now)
        await write_status(self.client, REPLICASETS, rs, status, self.written)
        return again

    async def _manage(self, rs: Obj, rs_uid: str, diff: int) -> None:
        if diff > 0:
            template = (rs.get("spec") or {}).get("template") or {}
            pods = [self.control.build(template, rs) for _ in range(diff)]
            await self.control.create_many(pods, self.expectations, rs_uid, max_batch=self.burst)
        elif diff < 0:
            victims = pods_to_delete([p for p in self.owned_pods(rs_uid) if is_active(p)], -diff)
            await self.control.delete_many(victims, self.expectations, rs_uid)
