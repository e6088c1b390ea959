"""A reconciler written against the nodeops runtime: label every node with its pod count.

Run it against the simulated cluster:

    nodeops sim serve --nodes 3 --pods-per-node 4 --kubeconfig-out sim.kubeconfig &
    python examples/library_reconciler.py --kubeconfig sim.kubeconfig
"""

from __future__ import annotations

import argparse
import asyncio

from nodeops.kube import (
    Client,
    Controller,
    Manager,
    ReconcileContext,
    Request,
    Result,
    index_pods_by_node,
)
from nodeops.kube.resources import NODES, PODS


class PodCountLabeler:
    def __init__(self, manager: Manager) -> None:
        self.client = manager.client
        self.nodes = manager.informers.informer(NODES)
        # Only metadata and the node name of each pod are kept: a tenth of a pod's size.
        self.pods = manager.informers.informer(
            PODS, indexers={"node": index_pods_by_node}, metadata_only=("spec.nodeName",)
        )

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        node = self.nodes.get(request.name)
        if node is None:
            return None  # deleted: nothing to do
        count = str(len(self.pods.index_keys("node", request.name)))
        if node["metadata"].get("labels", {}).get("example.nodeops.dev/pods") != count:
            patch = {"metadata": {"labels": {"example.nodeops.dev/pods": count}}}
            rv = node["metadata"]["resourceVersion"]
            await self.client.patch(NODES, request.name, patch, resource_version=rv)
        return None


def node_of_pod(pod: dict) -> list[Request]:  # type: ignore[type-arg]
    node = (pod.get("spec") or {}).get("nodeName")
    return [Request(node)] if node else []


async def main(kubeconfig: str, seconds: float) -> None:
    client = await Client.from_kubeconfig(kubeconfig)
    manager = Manager(client, metrics_addr="0", health_addr="0")
    labeler = PodCountLabeler(manager)
    manager.add(
        Controller("pod-count", labeler).for_(labeler.nodes).watches(labeler.pods, node_of_pod)
    )
    asyncio.get_running_loop().call_later(seconds, manager.stop)
    await manager.run()
    await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--seconds", type=float, default=5.0, help="run this long, then stop")
    args = parser.parse_args()
    asyncio.run(main(args.kubeconfig, args.seconds))
