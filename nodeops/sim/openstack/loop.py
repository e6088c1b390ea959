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

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NODES, AlreadyExists, ApiClient, Conflict, NotFound
from nodeops.sim.cluster.sim_annotations import KUBELET_STATE, KUBELET_STOPPED
from nodeops.sim.objects import for_create
from nodeops.sim.openstack.model import NovaServer
from nodeops.sim.openstack.state import NovaState
from nodeops.sim.openstack.views import node_object

__all__ = ["NovaLoop"]

log = logging.getLogger(__name__)

_MIN_WALL_SLEEP = 0.005


class NovaLoop:
    def __init__(
        self, state: NovaState, clock: Clock, client: ApiClient, rng: random.Random
    ) -> None:
        self.state = state
        self.clock = clock
        self.client = client
        self.rng = rng
        self._wake = asyncio.Event()
        self._retry_at: dict[tuple[str, str], float] = {}
        state.subscribe(self._wake.set)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("simulated openstack: step failed")
            await self._sleep()

    async def step(self) -> None:
        self.state.advance()
        for server in self.state.boots_due():
            await self._attempt("boot", server, self._register)
        for server in self.state.silences_due():
            await self._attempt("silence", server, self._silence)
        for server in self.state.node_deletions_due():
            await self._attempt("delete", server, self._delete_node)
        self.state.advance()
        for key in [k for k in self._retry_at if k[1] not in self.state.servers]:
            self._retry_at.pop(key, None)

    async def _sleep(self) -> None:
        now = self.clock.now().timestamp()
        deadlines = [d for d in (self.state.next_due(), *self._retry_at.values()) if d is not None]
        timeout = None
        if deadlines:
            timeout = max(_MIN_WALL_SLEEP, self.clock.wall_seconds(min(deadlines) - now))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _attempt(
        self, what: str, server: NovaServer, action: Callable[[NovaServer], Awaitable[None]]
    ) -> None:
        key = (what, server.id)
        now = self.clock.now().timestamp()
        if self._retry_at.get(key, now) > now:
            return
        try:
            await action(server)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._retry_at[key] = now + self.state.settings.retry_seconds
            log.warning(
                "simulated openstack: %s of %s failed, will retry: %s", what, server.id, exc
            )
        else:
            self._retry_at.pop(key, None)

    async def _register(self, server: NovaServer) -> None:
        pool = self.state.pools[server.pool]
        node = node_object(server, pool, rng=self.rng, now=self.clock.timestamp())
        try:
            await self.client.create(NODES, for_create(node))
        except AlreadyExists:
            existing = await self.client.get(NODES, server.name)
            if (existing.get("spec") or {}).get("providerID") != server.provider_id:
                raise
        self.state.booted(server.id)

    async def _own_node(self, server: NovaServer) -> dict[str, Any] | None:
        try:
            node = await self.client.get(NODES, server.name)
        except NotFound:
            return None
        if (node.get("spec") or {}).get("providerID") != server.provider_id:
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
