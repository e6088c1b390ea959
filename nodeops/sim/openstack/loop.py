"""The OpenStack cloud's clockwork: servers that boot register their Node, deleted ones vanish.

As in a Kubernikus cluster, everything reaches the cluster through the API server over HTTP:

- a booted server's kubelet registers its Node (the pool's labels and taints, the server's
  provider ID `openstack:///<id>` and Kubernetes version);
- a server Nova has torn down stops its kubelet (`sim.nodeops.dev/kubelet: Stopped`), so the
  node goes NotReady like a switched-off machine;
- `nodeDeleteSeconds` later the Node is deleted, as the OpenStack cloud controller manager
  does for a server Nova no longer knows, and the pod GC removes its pods.

A failed API call is retried `retry_seconds` later on the simulator's clock.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.clockwork import Clockwork
from nodeops.sim.cluster.apiclient import NODES, AlreadyExists, ApiClient, Conflict, NotFound
from nodeops.sim.cluster.sim_annotations import KUBELET_STATE, KUBELET_STOPPED
from nodeops.sim.objects import for_create
from nodeops.sim.openstack.model import NovaServer
from nodeops.sim.openstack.state import NovaState
from nodeops.sim.openstack.views import node_object

__all__ = ["NovaLoop"]


class NovaLoop(Clockwork):
    name = "simulated openstack"

    def __init__(
        self,
        state: NovaState,
        clock: Clock,
        client: ApiClient,
        rng: random.Random,
        *,
        owns: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        super().__init__(state, clock)
        self.state = state
        self.client = client
        self.rng = rng
        # In a cluster shared with other node sources, a provider ID alone does not make a
        # node this cloud's: `owns` (its attach label) must say so too.
        self.owns = owns or (lambda node: True)

    async def step(self) -> None:
        self.state.advance()
        for server in self.state.boots_due():
            await self.attempt("boot", server, self._register)
        for server in self.state.silences_due():
            await self.attempt("silence", server, self._silence)
        for server in self.state.node_deletions_due():
            await self.attempt("delete", server, self._delete_node)
        self.state.advance()
        self.forget_all_but(self.state.servers)

    async def _register(self, server: NovaServer) -> None:
        pool = self.state.pools[server.pool]
        node = node_object(server, pool, rng=self.rng, now=self.clock.timestamp())
        try:
            await self.client.create(NODES, for_create(node))
        except AlreadyExists:
            existing = await self.client.get(NODES, server.name)
            if (existing.get("spec") or {}).get(
                "providerID"
            ) != server.provider_id or not self.owns(existing):
                raise
        self.state.booted(server.id)

    async def _own_node(self, server: NovaServer) -> dict[str, Any] | None:
        try:
            node = await self.client.get(NODES, server.name)
        except NotFound:
            return None
        if (node.get("spec") or {}).get("providerID") != server.provider_id or not self.owns(node):
            return None
        return node

    async def _silence(self, server: NovaServer) -> None:
        node = await self._own_node(server)
        if node is None:
            self.state.node_gone(server.id)
            return
        uid = (node.get("metadata") or {}).get("uid")
        patch = {"metadata": {"uid": uid, "annotations": {KUBELET_STATE: KUBELET_STOPPED}}}
        try:
            await self.client.patch(NODES, server.name, patch, patch_type="merge")
        except (NotFound, Conflict):
            self.state.node_gone(server.id)
            return
        server.kubelet_stopped = True

    async def _delete_node(self, server: NovaServer) -> None:
        node = await self._own_node(server)
        if node is not None:
            uid = (node.get("metadata") or {}).get("uid")
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(NODES, server.name, uid=uid)
        self.state.node_gone(server.id)
