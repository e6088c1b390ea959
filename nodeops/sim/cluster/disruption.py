"""The disruption controller: every PodDisruptionBudget's status, kept current from watches.

The eviction subresource trusts `status.disruptionsAllowed`, so a drain can only be as right as
this status is fresh. Each budget's member pods, and the sums its status is made of, are kept
incrementally from pod events, so a pod event costs a selector match per budget in its namespace
and a budget's status costs its controllers, not a scan of its pods.
"""

from __future__ import annotations

from typing import Any

from nodeops.common.selectors import LabelSelector, label_selector_from_object
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import PDBS, ApiClient, Obj
from nodeops.sim.cluster.indexes import BY_NAMESPACE, BY_UID, controller_ref, namespace, uid
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.pdb_status import (
    ControllerScale,
    Member,
    Members,
    compute_pdb_status,
    member_of,
    pdb_recheck_time,
    pdb_status_of,
)
from nodeops.sim.cluster.podcontrol import WrittenStatuses, write_status
from nodeops.sim.cluster.runtime import Controller


def _labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


class DisruptionController(Controller[Key]):
    name = "disruption"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        pdbs: Informer,
        replicasets: Informer,
        deployments: Informer,
        statefulsets: Informer,
        *,
        workers: int = 4,
        server_clock: Clock | None = None,
    ) -> None:
        super().__init__(clock, workers=workers)
        # The eviction API stamps `disruptedPods` with the API server's time, and their expiry
        # is judged against it: attached to a kube-apiserver, that is the wall clock, not the
        # faster simulated one, which would expire every entry at once and count a pod the
        # eviction API just approved as healthy again (a second eviction then passes).
        self.server_clock = server_clock or clock
        self.client = client
        self.written = WrittenStatuses()
        self.pods = pods
        self.pdbs = pdbs
        self.replicasets = replicasets
        self.deployments = deployments
        self.statefulsets = statefulsets
        self.needs(pods, pdbs, replicasets, deployments, statefulsets)
        self._selectors: dict[Key, tuple[Any, LabelSelector | None]] = {}
        self._members: dict[Key, Members] = {}
        pods.add_index(BY_NAMESPACE, namespace)
        pdbs.add_index(BY_NAMESPACE, namespace)
        for inf in (replicasets, deployments, statefulsets):
            inf.add_index(BY_UID, uid)
        pdbs.add_handler(self._on_pdb)
        pods.add_handler(self._on_pod)

    # -- membership -----------------------------------------------------------------------------

    def _selector(self, key: Key, pdb: Obj) -> LabelSelector | None:
        raw = (pdb.get("spec") or {}).get("selector")
        cached = self._selectors.get(key)
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            sel: LabelSelector | None = label_selector_from_object(raw)
        except ValueError:
            sel = None  # compute_pdb_status reports the invalid selector itself
        self._selectors[key] = (raw, sel)
        return sel

    def _on_pdb(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            key = key_of(old)
            self._selectors.pop(key, None)
            self._members.pop(key, None)
            return
        key = key_of(new)
        raw_before = self._selectors.get(key, (object(), None))[0]
        sel = self._selector(key, new)
        if key not in self._members or raw_before != (new.get("spec") or {}).get("selector"):
            members = Members()
            if sel is not None:
                for pod in self.pods.by_index(BY_NAMESPACE, key[0]):
                    if sel.matches(_labels(pod)):
                        members.put(key_of(pod)[1], member_of(pod))
            self._members[key] = members
        self.queue.add(key)

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        namespace, name = key_of(obj)
        member: Member | None = None
        for pdb_key in self.pdbs.index_keys(BY_NAMESPACE, namespace):
            members = self._members.get(pdb_key)
            if members is None:
                continue
            cached = self._selectors.get(pdb_key)
            sel = cached[1] if cached is not None else None
            if new is not None and sel is not None and sel.matches(_labels(new)):
                member = member or member_of(new)
                if members.get(name) != member:
                    members.put(name, member)
                    self.queue.add(pdb_key)
            elif members.get(name) is not None:
                members.put(name, None)
                self.queue.add(pdb_key)

    # -- scale of controllers -------------------------------------------------------------------

    def scale_of(self, ref: dict[str, Any]) -> int | ControllerScale | None:
        """The replicas of a pod's controller; a Deployment answers for its ReplicaSets."""
        kind = ref.get("kind")
        ref_uid = str(ref.get("uid") or "")
        if kind == "ReplicaSet":
            found = self.replicasets.by_index(BY_UID, ref_uid)
            if not found:
                return None
            rs = found[0]
            owner = controller_ref(rs)
            if owner is not None and owner.get("kind") == "Deployment":
                deps = self.deployments.by_index(BY_UID, str(owner.get("uid") or ""))
                if deps:
                    d = deps[0]
                    replicas = int((d.get("spec") or {}).get("replicas", 1) or 0)
                    return ControllerScale(str(owner.get("uid")), replicas)
                return None
            return int((rs.get("spec") or {}).get("replicas", 1) or 0)
        informer = {"Deployment": self.deployments, "StatefulSet": self.statefulsets}.get(str(kind))
        if informer is None:
            return None
        found = informer.by_index(BY_UID, ref_uid)
        if not found:
            return None
        return int((found[0].get("spec") or {}).get("replicas", 1) or 0)

    # -- reconcile ------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> float | None:
        pdb = self.pdbs.store.get(key)
        if pdb is None:
            return None
        now = self.server_clock.now()
        cached = self._selectors.get(key)
        members = self._members.get(key)
        if cached is None or cached[1] is None or members is None:
            # An invalid selector: the full computation fails safe and says why.
            status = compute_pdb_status(pdb, (), self.scale_of, now)
        else:
            status = pdb_status_of(pdb, members, self.scale_of, now)
        await write_status(self.client, PDBS, pdb, status, self.written)
        recheck = pdb_recheck_time(status)
        if recheck is None:
            return None
        # A delay in the server's seconds, requeued in this loop's.
        ratio = self.clock.time_scale / self.server_clock.time_scale
        return max(0.0, (recheck - now).total_seconds()) * ratio + 0.5
