"""The cloud's clockwork: boots and terminations, and the Node objects they come with.

Everything the cloud does to the cluster goes through the API server over HTTP, as a real
kubelet registering its node and a real cloud node lifecycle controller deleting it would:

- a booted instance's kubelet registers its Node (the group's labels and taints, the instance's
  provider ID), after which the instance is InService and joins its group's load balancers;
- a shutting-down instance's kubelet reports NotReady, and once the machine is off it says
  nothing more (`sim.nodeops.dev/kubelet` on the node steers the simulated kubelet);
- a few seconds after termination the Node is deleted, as the cloud node lifecycle controller
  does when the cloud no longer knows the instance, and the pod GC then removes its pods.

The loop sleeps until the state's next deadline or until an API call changes the state, on the
simulator's clock. A failed API call is retried `retry_seconds` later; the instance stays where
it was meanwhile, as a real machine whose kubelet cannot reach the API server would.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.clockwork import Clockwork
from nodeops.sim.cloud.model import SimInstance
from nodeops.sim.cloud.state import CloudState
from nodeops.sim.cluster.apiclient import NODES, AlreadyExists, ApiClient, Conflict, NotFound
from nodeops.sim.cluster.sim_annotations import KUBELET_STATE
from nodeops.sim.objects import for_create

__all__ = ["CloudLoop"]


class CloudLoop(Clockwork):
    """Runs the state's deadlines and mirrors instances into Node objects."""

    def __init__(
        self,
        state: CloudState,
        clock: Clock,
        client: ApiClient,
        *,
        owns: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        super().__init__(state, clock)
        self.state = state
        self.client = client
        # In a cluster shared with other node sources, a provider ID alone does not make a
        # node the cloud's: `owns` (its attach label) must say so too.
        self.owns = owns or (lambda node: True)

    async def step(self) -> None:
        """One pass: advance the state, then make the cluster match it."""
        self.state.advance()
        for instance in self.state.boots_due():
            await self.attempt("boot", instance, self._register_node)
        for instance, kubelet in self.state.signals_due():
            await self.attempt("signal", instance, functools.partial(self._signal, kubelet=kubelet))
        for instance in self.state.deletions_due():
            await self.attempt("delete", instance, self._delete_node)
        # Registrations and deletions may have started the next transitions.
        self.state.advance()
        self.forget_all_but(self.state.instances)

    async def _register_node(self, instance: SimInstance) -> None:
        node = self.state.node_object(instance, now_text=self.clock.timestamp())
        try:
            await self.client.create(NODES, for_create(node))
        except AlreadyExists:
            existing = await self.client.get(NODES, instance.node_name)
            if _provider_id(existing) != instance.provider_id or not self.owns(existing):
                # Another node has the name this instance's address gives it.
                self.state.readdress(instance.id)
                raise
        self.state.booted(instance.id)

    async def _own_node(self, instance: SimInstance) -> dict[str, Any] | None:
        """The instance's Node, or None when no node of that name belongs to it any more."""
        try:
            node = await self.client.get(NODES, instance.node_name)
        except NotFound:
            return None
        return node if _provider_id(node) == instance.provider_id and self.owns(node) else None

    async def _signal(self, instance: SimInstance, kubelet: str) -> None:
        node = await self._own_node(instance)
        if node is None:
            instance.node_gone = True
            return
        uid = (node.get("metadata") or {}).get("uid")
        patch = {"metadata": {"uid": uid, "annotations": {KUBELET_STATE: kubelet}}}
        try:
            await self.client.patch(NODES, instance.node_name, patch, patch_type="merge")
        except NotFound:
            instance.node_gone = True
            return
        except Conflict:
            # Another node under the name, or a write the server refused for now: only a
            # fresh read tells which.
            if await self._own_node(instance) is None:
                instance.node_gone = True
                return
            raise
        instance.kubelet_signalled = kubelet

    async def _delete_node(self, instance: SimInstance) -> None:
        node = await self._own_node(instance)
        if node is not None:
            uid = (node.get("metadata") or {}).get("uid")
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(NODES, instance.node_name, uid=uid)
        instance.node_gone = True


def _provider_id(node: dict[str, Any]) -> str | None:
    value = (node.get("spec") or {}).get("providerID")
    return str(value) if value else None
