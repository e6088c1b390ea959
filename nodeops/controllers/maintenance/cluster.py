"""What plugins see of the cluster: the controller's informer caches, its client and HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from nodeops.controllers.kit import Drainers
from nodeops.controllers.maintenance.keys import Keys
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder
from nodeops.kube.informer import Informer
from nodeops.kube.resources import PODS

Obj = dict[str, Any]
STATE_INDEX = "maintenance-state"
NODE_NAME_INDEX = "spec.nodeName"


def state_indexer(keys: Keys) -> Any:
    def index(node: Obj) -> list[str]:
        value = ((node.get("metadata") or {}).get("labels") or {}).get(keys.state)
        return [value] if value else []

    return index


def pods_by_node(pod: Obj) -> list[str]:
    name = (pod.get("spec") or {}).get("nodeName")
    return [name] if name else []


class CacheView:
    """A `ClusterView` over informers; without a pod informer, pods are listed on demand.

    `drainers` are the controller's drains (`Drainers.for_manager`: the manager's shared
    sources, so their budget tokens are those of every other controller in the process; made on
    the first drain, so a configuration without one watches no more than it needs).
    """

    def __init__(
        self,
        client: Client,
        nodes: Informer,
        keys: Keys,
        *,
        pods: Informer | None = None,
        events: EventRecorder | None = None,
        http: httpx.AsyncClient | None = None,
        drainers: Drainers | None = None,
    ) -> None:
        self._client = client
        self._drainers = drainers or Drainers(client, controller="maintenance", events=events)
        self._nodes = nodes
        self._pods = pods
        self._events = events
        self._http = http
        self.keys = keys
        nodes.add_indexer(STATE_INDEX, state_indexer(keys))
        if pods is not None:
            pods.add_indexer(NODE_NAME_INDEX, pods_by_node)
        self._snapshot: tuple[str, int, list[Obj]] | None = None

    @property
    def client(self) -> Client:
        return self._client

    @property
    def events(self) -> EventRecorder | None:
        return self._events

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(follow_redirects=False)
        return self._http

    def node(self, name: str) -> Obj | None:
        return self._nodes.get(name)

    def nodes(self) -> list[Obj]:
        """Every node, decoded once per change of the cache (cluster-wide checks read this)."""
        key = (self._nodes.resource_version, len(self._nodes))
        snap = self._snapshot
        if snap is None or (snap[0], snap[1]) != key or not key[0]:
            nodes = [orjson.loads(raw) for raw in self._nodes.iter_raw()]
            self._snapshot = (key[0], key[1], nodes)
            return nodes
        return snap[2]

    def nodes_in_state(self, state: str) -> list[Obj]:
        return self._nodes.by_index(STATE_INDEX, state)

    def node_count(self) -> int:
        return len(self._nodes)

    async def pods_on_node(self, node_name: str) -> list[Obj]:
        if self._pods is not None and self._pods.has_synced:
            return self._pods.by_index(NODE_NAME_INDEX, node_name)
        items, _ = await self._client.list(PODS, field_selector=f"spec.nodeName={node_name}")
        return items

    def drainer(self, options: DrainOptions) -> Drainer:
        return self._drainers.get(options)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


class SnapshotView:
    """A `ClusterView` for one-off commands (`explain`): nodes listed once, pods on demand."""

    def __init__(self, client: Client, nodes: list[Obj], keys: Keys) -> None:
        self._client = client
        self._nodes = nodes
        self.keys = keys
        self._http: httpx.AsyncClient | None = None

    @property
    def client(self) -> Client:
        return self._client

    @property
    def events(self) -> EventRecorder | None:
        return None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(follow_redirects=False)
        return self._http

    def nodes(self) -> list[Obj]:
        return self._nodes

    def nodes_in_state(self, state: str) -> list[Obj]:
        return [
            n
            for n in self._nodes
            if ((n.get("metadata") or {}).get("labels") or {}).get(self.keys.state) == state
        ]

    def node_count(self) -> int:
        return len(self._nodes)

    async def pods_on_node(self, node_name: str) -> list[Obj]:
        items, _ = await self._client.list(PODS, field_selector=f"spec.nodeName={node_name}")
        return items

    def drainer(self, options: DrainOptions) -> Drainer:
        raise RuntimeError("explain never acts")

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
