"""The simulated OpenStack cloud's state and every operation on it, without I/O.

Nova's API changes the state at once; what takes time is a deadline (`NovaServer.due`) that
`advance()` acts on, and the loop asks which Node objects need registering, silencing or
deleting in the API server. One place decides, and every rule is testable without a cluster.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from nodeops.sim.openstack.model import (
    ACTIVE,
    BUILD,
    DELETED,
    NodePool,
    NovaError,
    NovaServer,
    OpenStackSettings,
)

__all__ = ["NovaState"]

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class NovaState:
    """Node pools and their servers, in one project of one region."""

    def __init__(
        self,
        settings: OpenStackSettings,
        now: Callable[[], float],
        rng: random.Random,
        *,
        cluster: str = "kks",
    ) -> None:
        self.settings = settings
        self.now = now
        self.rng = rng
        self.cluster = cluster
        self.pools: dict[str, NodePool] = {}
        self.servers: dict[str, NovaServer] = {}
        self.used_ips: set[str] = set()
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change (the loop's wake-up)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # -- pools ---------------------------------------------------------------------------------

    def add_pool(self, pool: NodePool) -> NodePool:
        if pool.name in self.pools:
            raise ValueError(f"node pool {pool.name!r} exists already")
        if pool.size < 0:
            raise ValueError("a node pool's size must be >= 0")
        self.pools[pool.name] = pool
        return pool

    def initial_servers(self, pool_name: str) -> list[NovaServer]:
        """ACTIVE servers filling the pool from the start, their nodes created with the cluster."""
        pool = self.pool(pool_name)
        servers = []
        for _ in range(pool.size - len(self.active(pool))):
            server = self._launch(pool, ACTIVE)
            server.kubelet_version = pool.initial_kubelet_version or pool.kubelet_version
            server.node_created = True
            servers.append(server)
        return servers

    def update_pool(
        self, name: str, *, size: int | None = None, kubelet_version: str | None = None
    ) -> NodePool:
        """Resize the pool or change the version new servers start with (running ones keep
        theirs, as Kubernikus never upgrades a kubelet in place)."""
        pool = self.pool(name)
        if size is not None:
            if size < 0:
                raise ValueError("a node pool's size must be >= 0")
            pool.size = size
        if kubelet_version is not None:
            pool.kubelet_version = kubelet_version
        self._changed()
        return pool

    def pool(self, name: str) -> NodePool:
        pool = self.pools.get(name)
        if pool is None:
            raise NovaError(404, f"node pool {name} does not exist")
        return pool

    def active(self, pool: NodePool) -> list[NovaServer]:
        return [s for s in self.servers.values() if s.pool == pool.name and not s.deleting]

    # -- servers -------------------------------------------------------------------------------

    def server(self, server_id: str) -> NovaServer:
        """The server as a GET sees it: unknown and deleted ones are a 404."""
        server = self.servers.get(server_id)
        if server is None or not server.listed:
            raise NovaError(404, f"Instance {server_id} could not be found.")
        return server

    def listed(self) -> list[NovaServer]:
        return [s for s in self.servers.values() if s.listed]

    def delete(self, server_id: str) -> NovaServer:
        """Start tearing the server down; deleting one already being deleted is accepted."""
        server = self.server(server_id)
        if not server.deleting:
            server.deleting = True
            server.due = self.now() + self.settings.shutdown_seconds
            self._changed()
        return server

    # -- time ----------------------------------------------------------------------------------

    def advance(self) -> None:
        """Finish every teardown whose deadline has passed and keep pools at their size."""
        now = self.now()
        for server in list(self.servers.values()):
            if server.deleting and server.status != DELETED and server.due is not None:
                if server.due <= now:
                    server.status = DELETED
                    server.deleted_at = now
                    server.due = self._node_delete_due(server, now)
            if (
                server.status == DELETED
                and (server.node_gone or not server.node_created)
                and server.id in self.servers
            ):
                del self.servers[server.id]
        for pool in self.pools.values():
            for _ in range(pool.size - len(self.active(pool))):
                server = self._launch(pool, BUILD)
                server.due = now + pool.boot_seconds

    def boots_due(self) -> list[NovaServer]:
        now = self.now()
        return [
            s
            for s in self.servers.values()
            if s.status == BUILD
            and not s.deleting
            and not s.node_created
            and s.due is not None
            and s.due <= now
        ]

    def booted(self, server_id: str) -> None:
        server = self.servers.get(server_id)
        if server is None:
            return
        server.node_created = True
        if server.status == BUILD:
            server.status = ACTIVE
            server.due = None

    def silences_due(self) -> list[NovaServer]:
        """Servers switched off whose kubelet must stop talking to the API server."""
        return [
            s
            for s in self.servers.values()
            if s.status == DELETED and s.node_created and not s.node_gone and not s.kubelet_stopped
        ]

    def node_deletions_due(self) -> list[NovaServer]:
        now = self.now()
        return [
            s
            for s in self.servers.values()
            if s.status == DELETED
            and s.node_created
            and not s.node_gone
            and s.due is not None
            and s.due <= now
        ]

    def node_gone(self, server_id: str) -> None:
        server = self.servers.get(server_id)
        if server is not None:
            server.node_gone = True
            if server.status == DELETED:
                del self.servers[server_id]

    def next_due(self) -> float | None:
        return min((s.due for s in self.servers.values() if s.due is not None), default=None)

    # -- internals -----------------------------------------------------------------------------

    def _node_delete_due(self, server: NovaServer, now: float) -> float | None:
        if server.node_created and not server.node_gone:
            return now + self.settings.node_delete_seconds
        return None

    def _launch(self, pool: NodePool, status: str) -> NovaServer:
        while True:
            suffix = "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))
            name = f"{self.cluster}-{pool.name}-{suffix}"
            if not any(s.name == name for s in self.servers.values()):
                break
        pool.launched += 1
        server = NovaServer(
            id=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            name=name,
            pool=pool.name,
            zone=pool.zone,
            flavor=pool.flavor,
            kubelet_version=pool.kubelet_version,
            os_version=pool.os_version,
            ip=self._new_ip(),
            created_at=self.now(),
            status=status,
        )
        self.servers[server.id] = server
        return server

    def _new_ip(self) -> str:
        while True:
            ip = f"10.180.{self.rng.randrange(256)}.{self.rng.randrange(4, 255)}"
            if ip not in self.used_ips:
                self.used_ips.add(ip)
                return ip
