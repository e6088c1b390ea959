"""The simulated cluster's control plane and nodes, talking to the simulated API server.

Everything the operator would see a real cluster do (pods scheduled and started, replicas kept,
daemons on every node, taints on cordoned and dead nodes, PodDisruptionBudget status, cascading
deletion) comes from these loops, over the same HTTP API and with the same verbs as kubelet,
kube-scheduler and kube-controller-manager use.

    loops = ClusterLoops(server.url, server.admin_token, clock)
    await loops.start()
    ...
    await loops.stop()
"""

from __future__ import annotations

import asyncio
import gc as pygc
import logging
from collections.abc import Awaitable, Callable, Iterable

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    DAEMONSETS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiClient,
    Obj,
)
from nodeops.sim.cluster.disruption import DisruptionController
from nodeops.sim.cluster.gc import GarbageCollector
from nodeops.sim.cluster.informer import InformerSet
from nodeops.sim.cluster.kubelet import Kubelet
from nodeops.sim.cluster.nodelifecycle import NodeLifecycle
from nodeops.sim.cluster.podgc import PodGC
from nodeops.sim.cluster.runtime import supervise
from nodeops.sim.cluster.scheduler import Scheduler
from nodeops.sim.cluster.workloads import WorkloadControllers

log = logging.getLogger(__name__)

COMPONENTS = ("kubelet", "scheduler", "nodelifecycle", "workloads", "disruption", "gc", "podgc")

__all__ = ["COMPONENTS", "ClusterLoops", "SimCluster"]


class ClusterLoops:
    """All control loops of the simulated cluster, on shared informers, as asyncio tasks.

    `instant=True` removes every simulated delay of the kubelet (pods start, become ready and
    stop at once) for tests that only care about end states. `components` selects a subset of
    `COMPONENTS`, e.g. to leave scheduling to the test. `freeze_caches` moves what exists once
    the caches are filled out of the cyclic garbage collector's reach (`gc.freeze`), which is
    what keeps a 150,000-pod cache from causing multi-second collection pauses.
    `client_factory` (component -> client) and `owns_node` are for loops attached to another
    cluster: its credentials and labels, and the only nodes whose kubelet is simulated.
    `server_clock` is the clock the API server stamps times with, when it is not `clock`: an
    attached kube-apiserver writes wall-clock times while these loops may run faster.
    """

    def __init__(
        self,
        server_url: str,
        token: str | None,
        clock: Clock,
        *,
        kubelet_start_seconds: float = 2.0,
        instant: bool = False,
        heartbeat_seconds: float = 10.0,
        node_grace_seconds: float = 40.0,
        node_status_report_seconds: float = 300.0,
        components: Iterable[str] = COMPONENTS,
        freeze_caches: bool = True,
        ca_pem: bytes | None = None,
        client_factory: Callable[[str], ApiClient] | None = None,
        owns_node: Callable[[Obj], bool] | None = None,
        server_clock: Clock | None = None,
    ) -> None:
        self.server_url = server_url
        self.token = token
        self.ca_pem = ca_pem
        self.clock = clock
        self.server_clock = server_clock or clock
        self.kubelet_start_seconds = kubelet_start_seconds
        self.instant = instant
        self.heartbeat_seconds = heartbeat_seconds
        self.node_grace_seconds = node_grace_seconds
        self.node_status_report_seconds = node_status_report_seconds
        self.components = frozenset(components)
        self.freeze_caches = freeze_caches
        self.client_factory = client_factory
        self.owns_node = owns_node
        unknown = self.components - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown components: {sorted(unknown)}")
        self.informers: InformerSet | None = None
        self.kubelet: Kubelet | None = None
        self.scheduler: Scheduler | None = None
        self.nodelifecycle: NodeLifecycle | None = None
        self.workloads: WorkloadControllers | None = None
        self.disruption: DisruptionController | None = None
        self.gc: GarbageCollector | None = None
        self.podgc: PodGC | None = None
        self._clients: list[ApiClient] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._froze = False

    def _client(self, component: str) -> ApiClient:
        if self.client_factory is not None:
            client = self.client_factory(component)
        else:
            client = ApiClient(
                self.server_url,
                self.token,
                component=component,
                ca_pem=self.ca_pem,
                time_scale=self.clock.time_scale,
            )
        self._clients.append(client)
        return client

    async def start(self, *, sync_timeout: float | None = 60.0) -> None:
        """Start every loop; returns once the shared caches hold the cluster's current state."""
        if self._tasks:
            raise RuntimeError("already started")
        clock = self.clock
        informers = self.informers = InformerSet(self._client("informers"))
        pods, nodes = informers.get(PODS), informers.get(NODES)
        runs: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        if "kubelet" in self.components:
            self.kubelet = Kubelet(
                clock,
                self._client("kubelet"),
                pods,
                nodes,
                start_seconds=self.kubelet_start_seconds,
                instant=self.instant,
                heartbeat_seconds=self.heartbeat_seconds,
                lease_duration_seconds=int(self.node_grace_seconds),
                status_report_seconds=self.node_status_report_seconds,
                owns=self.owns_node,
            )
            runs.append(("kubelet", self.kubelet.run))
        if "scheduler" in self.components:
            self.scheduler = Scheduler(
                clock,
                self._client("scheduler"),
                pods,
                nodes,
                namespaces=informers.get(NAMESPACES),
                pdbs=informers.get(PDBS),
            )
            runs.append(("scheduler", self.scheduler.run))
        if "nodelifecycle" in self.components:
            self.nodelifecycle = NodeLifecycle(
                clock,
                self._client("nodelifecycle"),
                nodes,
                informers.get(LEASES),
                grace_seconds=self.node_grace_seconds,
            )
            runs.append(("nodelifecycle", self.nodelifecycle.run))
        if "workloads" in self.components:
            self.workloads = WorkloadControllers(clock, self._client("workloads"), informers)
            runs.append(("workloads", self.workloads.run))
        if "disruption" in self.components:
            self.disruption = DisruptionController(
                clock,
                self._client("disruption"),
                pods,
                informers.get(PDBS),
                informers.get(REPLICASETS),
                informers.get(DEPLOYMENTS),
                informers.get(STATEFULSETS),
                server_clock=self.server_clock,
            )
            runs.append(("disruption", self.disruption.run))
        if "gc" in self.components:
            owned = [
                informers.get(r) for r in (PODS, REPLICASETS, DEPLOYMENTS, STATEFULSETS, DAEMONSETS)
            ]
            owned += [nodes, informers.get(LEASES)]
            # Everything else discovery lists (ConfigMaps, Secrets, custom resources, ...) is
            # watched by the collector itself, as it appears.
            self.gc = GarbageCollector(clock, self._client("gc"), owned, discover=informers)
            runs.append(("gc", self.gc.run))
        if "podgc" in self.components:
            self.podgc = PodGC(clock, self._client("podgc"), pods, nodes)
            runs.append(("podgc", self.podgc.run))
        informers.start()
        for name, run in runs:
            self._tasks.append(asyncio.create_task(supervise(name, run), name=f"sim-{name}"))
        try:
            await informers.wait_synced(sync_timeout)
        except BaseException:
            await self.stop()
            raise
        if self.freeze_caches:
            # (`gc` here would name this package's garbage collector module.)
            # The caches just listed are millions of long-lived containers; left to the cyclic
            # collector, each full collection would walk all of them and stall every loop for
            # seconds. Frozen, they are still freed by reference counting when replaced.
            pygc.freeze()
            self._froze = True

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.scheduler is not None:
            await self.scheduler.stop()
        for loop in (self.kubelet, self.nodelifecycle, self.disruption, self.gc, self.podgc):
            if loop is not None:
                loop.queue.close()
        if self.workloads is not None:
            for c in (
                self.workloads.replicaset,
                self.workloads.deployment,
                self.workloads.statefulset,
                self.workloads.daemonset,
            ):
                c.queue.close()
        if self.informers is not None:
            await self.informers.stop()
        for client in self._clients:
            await client.close()
        self._clients.clear()
        if self._froze:
            # Whatever became cyclic garbage while frozen (a stopped run's tasks and sessions)
            # must be collectable again.
            pygc.unfreeze()
            self._froze = False

    async def __aenter__(self) -> ClusterLoops:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


SimCluster = ClusterLoops
