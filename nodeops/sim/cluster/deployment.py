"""The Deployment controller: one ReplicaSet per pod template, rolled with maxSurge/maxUnavailable.

The rolling-update arithmetic follows `pkg/controller/deployment/rolling.go` closely, because how
many pods may be unavailable at once during a rollout is exactly what a node drain competes with.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import DEPLOYMENTS, REPLICASETS, AlreadyExists, ApiClient, Obj
from nodeops.sim.cluster.indexes import BY_CONTROLLER, BY_UID, controller_ref, controller_uid, uid
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.podcontrol import (
    WrittenStatuses,
    int_or_percent,
    merge_status,
    write_status,
)
from nodeops.sim.cluster.runtime import Controller
from nodeops.sim.cluster.scheduling import is_deleting
from nodeops.sim.objects import owner_reference, template_hash

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"

STATUS_FIELDS = (
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
    "conditions",
    "collisionCount",
)


@dataclass(slots=True)
class RSState:
    """The numbers of a ReplicaSet the rollout needs."""

    name: str
    replicas: int
    available: int
    created: str = ""


def surge_and_unavailable(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved: surge rounds up, unavailable down; never both 0."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    ru = strategy.get("rollingUpdate") or {}
    surge = int_or_percent(ru.get("maxSurge"), replicas, round_up=True, default="25%")
    unavailable = int_or_percent(ru.get("maxUnavailable"), replicas, round_up=False, default="25%")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, replicas)


def new_rs_target(replicas: int, surge: int, new: RSState, olds: Sequence[RSState]) -> int:
    """`NewRSNewReplicas` for RollingUpdate: grow the new ReplicaSet within the surge."""
    if new.replicas > replicas:
        return replicas
    total = new.replicas + sum(o.replicas for o in olds)
    max_total = replicas + surge
    if total >= max_total:
        return new.replicas
    return new.replicas + max(0, min(max_total - total, replicas - new.replicas))


def old_rs_targets(
    replicas: int, max_unavailable: int, new: RSState, olds: Sequence[RSState]
) -> dict[str, int]:
    """New replica counts for old ReplicaSets (`reconcileOldReplicaSets`): first drop their
    unhealthy pods, then scale down oldest-first while availability stays above the minimum."""
    if sum(o.replicas for o in olds) == 0:
        return {}
    min_available = replicas - max_unavailable
    all_pods = new.replicas + sum(o.replicas for o in olds)
    new_unavailable = new.replicas - new.available
    max_scaled_down = all_pods - min_available - new_unavailable
    if max_scaled_down <= 0:
        return {}
    ordered = sorted(olds, key=lambda o: (o.created, o.name))
    target = {o.name: o.replicas for o in ordered}
    cleaned = 0
    for o in ordered:
        if cleaned >= max_scaled_down:
            break
        unhealthy = target[o.name] - o.available
        if target[o.name] == 0 or unhealthy <= 0:
            continue
        down = min(max_scaled_down - cleaned, unhealthy)
        target[o.name] -= down
        cleaned += down
    available = new.available + sum(min(o.available, target[o.name]) for o in ordered)
    if available > min_available:
        budget = available - min_available
        for o in ordered:
            if budget <= 0:
                break
            if target[o.name] == 0:
                continue
            down = min(target[o.name], budget)
            target[o.name] -= down
            budget -= down
    return {o.name: target[o.name] for o in ordered if target[o.name] != o.replicas}


def _without_hash(template: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = dict(template.get("metadata") or {})
    labels = meta.get("labels")
    if labels and HASH_LABEL in labels:
        meta["labels"] = {k: v for k, v in labels.items() if k != HASH_LABEL}
    rest = {k: v for k, v in template.items() if k != "metadata"}
    return meta, rest


def template_matches(rs: Mapping[str, Any], deployment: Mapping[str, Any]) -> bool:
    """`EqualIgnoreHash`: the ReplicaSet runs the Deployment's current template."""
    rs_t = ((rs.get("spec") or {}).get("template")) or {}
    d_t = ((deployment.get("spec") or {}).get("template")) or {}
    return _without_hash(rs_t) == _without_hash(d_t)


def _revision(rs: Mapping[str, Any]) -> int:
    value = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _condition(
    old: Mapping[str, Any] | None, ctype: str, status: str, reason: str, message: str, now: str
) -> Obj:
    """A Deployment condition; its times move only when its status (or reason) changes."""
    prev = old or {}
    same_status = prev.get("status") == status
    same_reason = same_status and prev.get("reason") == reason and prev.get("message") == message
    return {
        "type": ctype,
        "status": status,
        "lastUpdateTime": prev.get("lastUpdateTime", now) if same_reason else now,
        "lastTransitionTime": prev.get("lastTransitionTime", now) if same_status else now,
        "reason": reason,
        "message": message,
    }


def deployment_status(
    deployment: Mapping[str, Any],
    new_rs: Mapping[str, Any] | None,
    all_rs: Sequence[Mapping[str, Any]],
    now: str,
) -> Obj:
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    _, max_unavailable = surge_and_unavailable(deployment)

    def st(rs: Mapping[str, Any], k: str) -> int:
        return int((rs.get("status") or {}).get(k) or 0)

    total_spec = sum(int((rs.get("spec") or {}).get("replicas") or 0) for rs in all_rs)
    available = sum(st(rs, "availableReplicas") for rs in all_rs)
    computed: Obj = {
        "observedGeneration": int((deployment.get("metadata") or {}).get("generation") or 0),
        "replicas": sum(st(rs, "replicas") for rs in all_rs),
        "updatedReplicas": st(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(st(rs, "readyReplicas") for rs in all_rs),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total_spec - available),
    }
    old_status = deployment.get("status") or {}
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or []}
    if available >= replicas - max_unavailable:
        avail = _condition(
            old_conds.get("Available"),
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    else:
        avail = _condition(
            old_conds.get("Available"),
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    rs_name = ((new_rs or {}).get("metadata") or {}).get("name", "")
    complete = (
        new_rs is not None
        and computed["updatedReplicas"] == replicas
        and computed["replicas"] == replicas
        and available == replicas
    )
    if complete:
        prog = _condition(
            old_conds.get("Progressing"),
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{rs_name}" has successfully progressed.',
            now,
        )
    else:
        prog = _condition(
            old_conds.get("Progressing"),
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            f'ReplicaSet "{rs_name}" is progressing.',
            now,
        )
    others = [c for t, c in old_conds.items() if t not in ("Available", "Progressing")]
    computed["conditions"] = [avail, prog, *others]
    if old_status.get("collisionCount"):
        computed["collisionCount"] = old_status["collisionCount"]
    return merge_status(old_status, STATUS_FIELDS, computed)


class DeploymentController(Controller[Key]):
    name = "deployment"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        deployments: Informer,
        replicasets: Informer,
        *,
        workers: int = 4,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.deployments = deployments
        self.written = WrittenStatuses()
        self.replicasets = replicasets
        self.needs(deployments, replicasets)
        replicasets.add_index(BY_CONTROLLER, controller_uid)
        deployments.add_index(BY_UID, uid)
        deployments.add_handler(self._on_deployment)
        replicasets.add_handler(self._on_rs)

    def _on_deployment(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        self.queue.add(key_of(obj))

    def _on_rs(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        ref = controller_ref(obj)
        if ref is None or ref.get("kind") != "Deployment":
            return
        for d in self.deployments.by_index(BY_UID, str(ref.get("uid"))):
            self.queue.add(key_of(d))

    async def reconcile(self, key: Key) -> float | None:
        d = self.deployments.store.get(key)
        if d is None or is_deleting(d):
            return None
        meta = d.get("metadata") or {}
        spec = d.get("spec") or {}
        all_rs = self.replicasets.by_index(BY_CONTROLLER, meta.get("uid") or "")
        new_rs = next((rs for rs in all_rs if template_matches(rs, d)), None)
        olds = [rs for rs in all_rs if rs is not new_rs]
        if not spec.get("paused"):
            if new_rs is None:
                await self._create_rs(d, all_rs)
                return None
            if await self._ensure_revision(d, new_rs, olds):
                return None
            if await self._rollout(d, new_rs, olds):
                return None
            await self._cleanup(d, olds)
        status = deployment_status(d, new_rs, all_rs, self.clock.timestamp())
        await write_status(self.client, DEPLOYMENTS, d, status, self.written)
        return None

    async def _create_rs(self, d: Obj, all_rs: Sequence[Obj]) -> None:
        meta = d.get("metadata") or {}
        spec = d.get("spec") or {}
        collisions = int((d.get("status") or {}).get("collisionCount") or 0)
        template = copy.deepcopy(spec.get("template") or {})
        pth = template_hash(template if not collisions else {"t": template, "c": collisions})
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pth
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = pth
        replicas = int(spec.get("replicas", 1) or 0)
        surge, _ = surge_and_unavailable(d)
        olds = [_state(rs) for rs in all_rs]
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            initial = 0 if any(o.replicas for o in olds) else replicas
        else:
            initial = new_rs_target(replicas, surge, RSState("", 0, 0), olds)
        revision = max((_revision(rs) for rs in all_rs), default=0) + 1
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta.get('name')}-{pth}",
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": {
                    REVISION: str(revision),
                    DESIRED_REPLICAS: str(replicas),
                    MAX_REPLICAS: str(replicas + surge),
                },
                "ownerReferences": [owner_reference(d)],
            },
            "spec": {
                "replicas": initial,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": template,
            },
        }
        try:
            await self.client.create(REPLICASETS, body, meta.get("namespace"))
        except AlreadyExists:
            existing = self.replicasets.get(meta.get("namespace") or "", body["metadata"]["name"])
            if existing is not None and not template_matches(existing, d):
                # A hash collision: bump collisionCount so the next hash differs (as kube does).
                status = dict(d.get("status") or {})
                status["collisionCount"] = collisions + 1
                await write_status(self.client, DEPLOYMENTS, d, status, self.written)
            raise
        if str(revision) != ((meta.get("annotations") or {}).get(REVISION)):
            await self._annotate_revision(d, revision)

    async def _annotate_revision(self, d: Obj, revision: int) -> None:
        meta = d.get("metadata") or {}
        await self.client.patch(
            DEPLOYMENTS,
            meta["name"],
            {"metadata": {"annotations": {REVISION: str(revision)}}},
            meta["namespace"],
        )

    async def _ensure_revision(self, d: Obj, new_rs: Obj, olds: Sequence[Obj]) -> bool:
        """A rollback makes an old ReplicaSet new again: it gets the next revision number."""
        top = max((_revision(rs) for rs in olds), default=0)
        current = _revision(new_rs)
        if current > top:
            if ((d.get("metadata") or {}).get("annotations") or {}).get(REVISION) != str(current):
                await self._annotate_revision(d, current)
            return False
        rs_meta = new_rs.get("metadata") or {}
        await self.client.patch(
            REPLICASETS,
            rs_meta["name"],
            {
                "metadata": {
                    "resourceVersion": rs_meta.get("resourceVersion"),
                    "annotations": {REVISION: str(top + 1)},
                }
            },
            rs_meta["namespace"],
        )
        return True

    async def _scale(self, rs: Obj, replicas: int, d: Obj) -> None:
        meta = rs.get("metadata") or {}
        surge, _ = surge_and_unavailable(d)
        want = int((d.get("spec") or {}).get("replicas", 1) or 0)
        await self.client.patch(
            REPLICASETS,
            meta["name"],
            {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {DESIRED_REPLICAS: str(want), MAX_REPLICAS: str(want + surge)},
                },
                "spec": {"replicas": replicas},
            },
            meta["namespace"],
        )

    async def _rollout(self, d: Obj, new_rs: Obj, olds: Sequence[Obj]) -> bool:
        """One step of the rollout; True when something was written (its events come back)."""
        spec = d.get("spec") or {}
        replicas = int(spec.get("replicas", 1) or 0)
        new = _state(new_rs)
        old_states = [_state(rs) for rs in olds]
        by_name = {(rs.get("metadata") or {}).get("name"): rs for rs in olds}
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            active_olds = [rs for rs in olds if _spec_replicas(rs)]
            if active_olds:
                for rs in active_olds:
                    await self._scale(rs, 0, d)
                return True
            if any(int((rs.get("status") or {}).get("replicas") or 0) for rs in olds):
                return False  # wait for the old pods to go
            if new.replicas != replicas:
                await self._scale(new_rs, replicas, d)
                return True
            return False
        surge, max_unavailable = surge_and_unavailable(d)
        target = new_rs_target(replicas, surge, new, old_states)
        if target != new.replicas:
            await self._scale(new_rs, target, d)
            return True
        changed = False
        for name, n in old_rs_targets(replicas, max_unavailable, new, old_states).items():
            await self._scale(by_name[name], n, d)
            changed = True
        return changed

    async def _cleanup(self, d: Obj, olds: Sequence[Obj]) -> None:
        """Delete old, empty ReplicaSets beyond revisionHistoryLimit, oldest first."""
        limit = int((d.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in olds
            if not _spec_replicas(rs)
            and not int((rs.get("status") or {}).get("replicas") or 0)
            and not is_deleting(rs)
        ]
        excess = len(idle) - limit
        if excess <= 0:
            return
        for rs in sorted(idle, key=_revision)[:excess]:
            meta = rs.get("metadata") or {}
            await self.client.delete(
                REPLICASETS, meta["name"], meta["namespace"], uid=meta.get("uid")
            )


def _spec_replicas(rs: Mapping[str, Any]) -> int:
    return int((rs.get("spec") or {}).get("replicas") or 0)


def _state(rs: Mapping[str, Any]) -> RSState:
    meta = rs.get("metadata") or {}
    return RSState(
        name=str(meta.get("name") or ""),
        replicas=_spec_replicas(rs),
        available=int((rs.get("status") or {}).get("availableReplicas") or 0),
        created=str(meta.get("creationTimestamp") or ""),
    )
