"""The StatefulSet controller: stable ordinal pods, created, replaced and removed in order.

Drains treat StatefulSet pods differently from ReplicaSet ones: the replacement has the same
name and only appears after the old pod is fully gone, and with OrderedReady nothing else moves
while one ordinal is down. Those are the behaviours reproduced here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import STATEFULSETS, AlreadyExists, ApiClient, Obj
from nodeops.sim.cluster.informer import Informer, Key
from nodeops.sim.cluster.owned import OwnerController
from nodeops.sim.cluster.podcontrol import (
    available_after,
    is_available,
    merge_status,
    write_status,
)
from nodeops.sim.cluster.podstatus import pod_ready
from nodeops.sim.cluster.scheduling import is_deleting, is_terminal
from nodeops.sim.objects import template_hash

REVISION_LABEL = "controller-revision-hash"
STATUS_FIELDS = (
    "observedGeneration",
    "replicas",
    "readyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "availableReplicas",
    "currentRevision",
    "updateRevision",
    "collisionCount",
)


def ordinal_of(pod_name: str, sts_name: str) -> int | None:
    prefix = sts_name + "-"
    if not pod_name.startswith(prefix):
        return None
    tail = pod_name[len(prefix) :]
    return int(tail) if tail.isdigit() else None


def update_revision(sts: Mapping[str, Any]) -> str:
    meta = sts.get("metadata") or {}
    template = (sts.get("spec") or {}).get("template") or {}
    return f"{meta.get('name')}-{template_hash(template)}"


def _running_ready(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and pod_ready(pod)


@dataclass(slots=True)
class StsPlan:
    """What one sync does: pods to create (ordinals), pods to delete (names)."""

    create: list[int] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


def plan_statefulset(
    sts: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], revision: str
) -> StsPlan:
    """The next actions, following `StatefulSetControl`'s ordering rules.

    OrderedReady creates ordinal n only when 0..n-1 are Running and Ready, removes surplus pods
    from the highest ordinal one at a time, and waits for any terminating pod. Parallel acts on
    everything at once. Rolling updates replace the highest outdated ordinal at or above the
    partition once every pod is Running and Ready.
    """
    spec = sts.get("spec") or {}
    name = str((sts.get("metadata") or {}).get("name") or "")
    replicas = int(spec.get("replicas", 1) or 0)
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    parallel = spec.get("podManagementPolicy") == "Parallel"
    by_ordinal: dict[int, Mapping[str, Any]] = {}
    for p in pods:
        o = ordinal_of(str((p.get("metadata") or {}).get("name") or ""), name)
        if o is not None:
            by_ordinal[o] = p
    wanted = range(start, start + replicas)
    plan = StsPlan()
    blocked = False
    for o in wanted:
        pod = by_ordinal.get(o)
        if pod is None:
            if not blocked or parallel:
                plan.create.append(o)
            blocked = True
            continue
        if is_deleting(pod):
            blocked = True
            continue
        if is_terminal(pod):
            plan.delete.append(str(pod["metadata"]["name"]))
            blocked = True
            continue
        if not _running_ready(pod):
            blocked = True
    if plan.create or plan.delete:
        if not parallel:
            plan.create = plan.create[:1]
        return plan
    condemned = sorted((o for o in by_ordinal if o not in wanted), reverse=True)
    if condemned:
        for o in condemned:
            pod = by_ordinal[o]
            if is_deleting(pod):
                if not parallel:
                    return plan
                continue
            if not parallel and blocked:
                return plan
            plan.delete.append(str(pod["metadata"]["name"]))
            if not parallel:
                break
        return plan
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate" or blocked:
        return plan
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    for o in sorted(wanted, reverse=True):
        if o < partition:
            break
        pod = by_ordinal[o]
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(REVISION_LABEL) != revision:
            plan.delete.append(str(pod["metadata"]["name"]))
            break
    return plan


def statefulset_status(
    sts: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], revision: str, now: float
) -> Obj:
    spec = sts.get("spec") or {}
    old = sts.get("status") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    min_ready = float(spec.get("minReadySeconds") or 0)
    live = [p for p in pods if not is_terminal(p)]
    current_rev = old.get("currentRevision") or revision

    def rev(p: Mapping[str, Any]) -> str | None:
        return ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)

    updated = sum(1 for p in live if rev(p) == revision)
    if updated == replicas and len(live) == replicas:
        current_rev = revision
    computed: Obj = {
        "observedGeneration": int((sts.get("metadata") or {}).get("generation") or 0),
        "replicas": len(live),
        "readyReplicas": sum(1 for p in live if pod_ready(p)),
        "currentReplicas": sum(1 for p in live if rev(p) == current_rev),
        "updatedReplicas": updated,
        "availableReplicas": sum(1 for p in live if is_available(p, min_ready, now)),
        "currentRevision": current_rev,
        "updateRevision": revision,
        "collisionCount": int(old.get("collisionCount") or 0),
    }
    status = merge_status(old, STATUS_FIELDS, computed)
    status["collisionCount"] = computed["collisionCount"]
    status["availableReplicas"] = computed["availableReplicas"]
    return status


class StatefulSetController(OwnerController):
    name = "statefulset"
    owner_kind = "StatefulSet"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        statefulsets: Informer,
        *,
        workers: int = 4,
    ) -> None:
        super().__init__(clock, client, pods, statefulsets, workers=workers)

    async def reconcile(self, key: Key) -> float | None:
        sts = self.owners.store.get(key)
        if sts is None:
            return None
        meta = sts.get("metadata") or {}
        sts_uid = meta.get("uid") or ""
        pods = self.owned_pods(sts_uid)
        revision = update_revision(sts)
        if not is_deleting(sts) and self.expectations.satisfied(sts_uid):
            plan = plan_statefulset(sts, pods, revision)
            if plan.create or plan.delete:
                await self._apply(sts, sts_uid, plan, pods)
        now = self.clock.now().timestamp()
        await write_status(
            self.client,
            STATEFULSETS,
            sts,
            statefulset_status(sts, pods, revision, now),
            self.written,
        )
        min_ready = float((sts.get("spec") or {}).get("minReadySeconds") or 0)
        return available_after(pods, min_ready, now)

    async def _apply(self, sts: Obj, sts_uid: str, plan: StsPlan, pods: Sequence[Obj]) -> None:
        name = (sts.get("metadata") or {}).get("name")
        template = (sts.get("spec") or {}).get("template") or {}
        if plan.delete:
            victims = [p for p in pods if (p.get("metadata") or {}).get("name") in plan.delete]
            await self.control.delete_many(victims, self.expectations, sts_uid)
        if plan.create:
            new_pods = [self.control.build(template, sts, name=f"{name}-{o}") for o in plan.create]
            try:
                await self.control.create_many(new_pods, self.expectations, sts_uid)
            except AlreadyExists:
                # The previous pod of this ordinal is still being removed; its deletion event
                # brings the StatefulSet back.
                self.expectations.forget(sts_uid)
