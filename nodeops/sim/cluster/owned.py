"""Controllers of pod-owning workloads: the cache wiring and event handling they share.

A ReplicaSet, StatefulSet or DaemonSet controller follows its owners and their pods the same way.
An owner event queues the owner; a deleted owner's expectations are dropped so that nothing waits
on pods that will never be counted. A pod event counts against the expectations of the owner that
controls it, then queues that owner, found by uid because a controller reference names no
namespace key.
"""

from __future__ import annotations

from typing import ClassVar

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import ApiClient, Obj
from nodeops.sim.cluster.indexes import BY_CONTROLLER, BY_UID, controller_ref, controller_uid, uid
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.podcontrol import Expectations, PodControl, WrittenStatuses
from nodeops.sim.cluster.runtime import Controller


class OwnerController(Controller[Key]):
    """Reconciles objects of `owner_kind` (from the `owners` cache) against the pods they control.

    The pods cache is indexed by controller uid (`owned_pods`) and the owners cache by uid; both
    must be synced before the first reconcile.
    """

    owner_kind: ClassVar[str]

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        owners: Informer,
        *,
        workers: int,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.pods = pods
        self.owners = owners
        self.expectations = Expectations()
        self.control = PodControl(clock, client)
        self.written = WrittenStatuses()
        self.needs(pods, owners)
        pods.add_index(BY_CONTROLLER, controller_uid)
        owners.add_index(BY_UID, uid)
        owners.add_handler(self._on_owner)
        pods.add_handler(self._on_pod)

    def owned_pods(self, owner_uid: str) -> list[Obj]:
        """Pods whose controller reference points at this owner uid, terminal ones included."""
        return self.pods.by_index(BY_CONTROLLER, owner_uid)

    def _on_owner(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        if new is None:
            self.expectations.forget((obj.get("metadata") or {}).get("uid") or "")
        self.queue.add(key_of(obj))

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        ref = controller_ref(obj)
        if ref is None or ref.get("kind") != self.owner_kind:
            return
        owner_uid = str(ref.get("uid"))
        self.expectations.observe(old, new, owner_uid)
        for owner in self.owners.by_index(BY_UID, owner_uid):
            self.queue.add(key_of(owner))
