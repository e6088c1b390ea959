"""Pod garbage collection of pods bound to nodes that no longer exist, as kube does it.

When a node is deleted (a node roll's last step) its kubelet is gone and nobody else would ever
finish its pods. kube-controller-manager's pod GC looks every 20 s for pods bound to a node its
cache does not know; such a node is quarantined for 40 s (its cache may simply lag a node that
was just created) and, if a live GET still finds no node after that, each of its pods is marked
`Failed` with a `DisruptionTarget` condition (reason `DeletionByPodGC`) and then force-deleted
with grace 0. Replacement pods are only created by their controllers after that, so a node that
vanishes leaves its pods visible, and counted by their PodDisruptionBudgets, for 40-60 s of
simulated time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NODES, PODS, ApiClient, NotFound
from nodeops.sim.cluster.indexes import BY_NODE, pod_node
from nodeops.sim.cluster.informer import Informer, Key
from nodeops.sim.cluster.runtime import Controller

CHECK_PERIOD_SECONDS = 20.0
"""kube-controller-manager's `gcCheckPeriod`."""
QUARANTINE_SECONDS = 40.0
"""kube-controller-manager's `quarantineTime` for nodes missing from the cache."""
DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
}
_TERMINAL = ("Succeeded", "Failed")


class PodGC(Controller[Key]):
    name = "podgc"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        nodes: Informer,
        *,
        workers: int = 4,
        check_period_seconds: float = CHECK_PERIOD_SECONDS,
        quarantine_seconds: float = QUARANTINE_SECONDS,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.check_period = check_period_seconds
        self.quarantine = timedelta(seconds=quarantine_seconds)
        # Missing node -> simulated time from which its pods may be collected.
        self.quarantined: dict[str, datetime] = {}
        pods.add_index(BY_NODE, pod_node)
        self.needs(pods, nodes)

    async def run(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        await asyncio.gather(super().run(), self._check_periodically())

    async def _check_periodically(self) -> None:
        while True:
            self.check()
            await self.clock.sleep(self.check_period)

    def check(self) -> None:
        """One pass: quarantine newly missing nodes, queue the pods of those past quarantine."""
        now = self.clock.now()
        missing = {n for n in self.pods.index_values(BY_NODE) if ("", n) not in self.nodes.store}
        for node in list(self.quarantined):
            if node not in missing:
                del self.quarantined[node]
        for node in missing:
            until = self.quarantined.setdefault(node, now + self.quarantine)
            if until <= now:
                for key in self.pods.index_keys(BY_NODE, node):
                    self.queue.add(key)

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
        name, namespace, uid = meta["name"], meta["namespace"], meta.get("uid")
        try:
            if (pod.get("status") or {}).get("phase") not in _TERMINAL:
                condition = {**DISRUPTION_TARGET, "lastTransitionTime": self.clock.timestamp()}
                await self.client.patch(
                    PODS,
                    name,
                    {
                        "metadata": {"uid": uid},
                        "status": {"phase": "Failed", "conditions": [condition]},
                    },
                    namespace,
                    patch_type="strategic",
                    subresource="status",
                )
            await self.client.delete(PODS, name, namespace, grace_period_seconds=0, uid=uid)
        except NotFound:
            pass
        # A Conflict (a new pod under the name, or a write the server refused for now) is
        # retried: the next pass reads the pod again and tells which.
        return None
