"""Pod garbage collection: pods bound to nodes that no longer exist are force-deleted.

When a node is deleted (a node roll's last step) its kubelet is gone and nobody else would ever
finish its pods; kube-controller-manager's pod GC deletes them with grace 0, and replacement pods
are only created by their controllers after that.
"""

from __future__ import annotations

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NODES, PODS, ApiClient, Conflict, NotFound, Obj
from nodeops.sim.cluster.indexes import BY_NODE, pod_node
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.runtime import Controller


class PodGC(Controller[Key]):
    name = "podgc"

    def __init__(
        self, clock: Clock, client: ApiClient, pods: Informer, nodes: Informer, *, workers: int = 4
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.pods = pods
        self.nodes = nodes
        pods.add_index(BY_NODE, pod_node)
        pods.add_handler(self._on_pod)
        nodes.add_handler(self._on_node)

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is None or not self.nodes.synced.is_set():
            return
        node = (new.get("spec") or {}).get("nodeName")
        if node and ("", node) not in self.nodes.store:
            self.queue.add(key_of(new))

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None:
            return
        assert old is not None
        for key in self.pods.index_keys(BY_NODE, key_of(old)[1]):
            self.queue.add(key)

    async def run(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        for pod in list(self.pods.store.values()):
            self._on_pod(None, pod)
        await super().run()

    async def reconcile(self, key: Key) -> float | None:
        pod = self.pods.store.get(key)
        if pod is None:
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or ("", node) in self.nodes.store:
            return None
        # The node cache may lag a node created a moment ago: ask before deleting.
        try:
            await self.client.get(NODES, node)
            return None
        except NotFound:
            pass
        meta = pod.get("metadata") or {}
        try:
            await self.client.delete(
                PODS, meta["name"], meta["namespace"], grace_period_seconds=0, uid=meta.get("uid")
            )
        except (NotFound, Conflict):
            pass
        return None
