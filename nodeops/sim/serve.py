"""`nodeops sim serve`: a whole simulated cluster in one process, until a signal stops it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cloud import SimCloud
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.faults import FaultSpecError


@dataclass
class SimOptions:
    nodes: int = 3
    pods_per_node: int = 0
    node_groups: int = 0
    """Without a scenario: this many cloud node groups (`group-<i>`) of `nodes` nodes each."""
    scenario: Any = None
    """A scenario file's path, or a `Scenario` already built."""
    host: str = "127.0.0.1"
    port: int = 0
    kubeconfig_out: str | None = None
    time_scale: float | None = None
    faults: str | None = None
    seed: int = 0
    auth: bool = False
    tls: bool | None = None  # None: on exactly when tokens are checked (kubectl needs it then)
    rbac: bool = False
    instant: bool = False
    controllers: bool = True
    kube_version: str | None = None
    """What the API server's `/version` reports; the simulator's own release when unset."""
    openstack_pools: list[Any] = field(default_factory=list)
    """Kubernikus-style node pools (`nodeops.sim.openstack.NodePool`) of a simulated
    Keystone + Nova served under `/sim/openstack/`."""
    extra: dict[str, Any] = field(default_factory=dict)
    populate: Callable[[SimCluster], None] | None = None
    """Loads objects once the server is up and before the control loops start (after the
    scenario's): the loops list them as they come up, as a restored cluster's controllers do,
    instead of racing their creation (a ReplicaSet seen before its pods makes its pods again)."""


class SimCluster:
    """The API server plus the cluster's control loops, started and stopped together."""

    def __init__(self, options: SimOptions) -> None:
        self.options = options
        self.scenario: Any = None
        time_scale = options.time_scale
        if isinstance(options.scenario, str):
            from nodeops.sim.scenario import load_scenario

            self.scenario = load_scenario(options.scenario)
        elif options.scenario is not None:
            self.scenario = options.scenario
        if self.scenario is not None:
            if time_scale is None:
                time_scale = getattr(self.scenario, "time_scale", None)
        self.clock = Clock(time_scale or 1.0)
        self.server = SimServer(
            clock=self.clock,
            host=options.host,
            port=options.port,
            auth=options.auth or options.rbac,
            tls=options.tls if options.tls is not None else (options.auth or options.rbac),
            rbac=options.rbac,
            faults=options.faults,
            seed=options.seed,
            kube_version=options.kube_version,
        )
        self.cloud = SimCloud(
            self.clock,
            faults=self.server.faults,
            stats=self.server.stats,
            token=self.server.admin_token,
            seed=options.seed,
        )
        if self.scenario is not None:
            self.cloud.add_scenario(self.scenario)
        else:
            from nodeops.sim.scenario import NodeGroup

            for i in range(options.node_groups):
                self.cloud.add_group(NodeGroup(name=f"group-{i}", size=options.nodes))
        self.server.extra_routes.extend(self.cloud.routes())
        self.openstack: Any = None
        if options.openstack_pools:
            from nodeops.sim.openstack import SimOpenStack

            self.openstack = SimOpenStack(
                self.clock, faults=self.server.faults, stats=self.server.stats, seed=options.seed
            )
            for pool in options.openstack_pools:
                self.openstack.add_pool(pool)
            self.server.extra_routes.extend(self.openstack.routes())
        self.loops: Any = None

    async def start(self) -> None:
        await self.server.start()
        self.populate()
        if self.options.populate is not None:
            self.options.populate(self)
        if self.options.controllers:
            from nodeops.sim.cluster import ClusterLoops

            self.loops = ClusterLoops(
                self.server.url,
                self.server.admin_token,
                self.clock,
                instant=self.options.instant,
                ca_pem=self.server.ca_pem,
            )
            await self.loops.start()
        await self.cloud.start(self.server.url, self.server.admin_token, self.server.ca_pem)
        if self.openstack is not None:
            await self.openstack.start(self.server.url, self.server.admin_token, self.server.ca_pem)

    def populate(self) -> None:
        from nodeops.sim import objects

        now = self.clock.timestamp()
        if self.openstack is not None:
            for node in self.openstack.initial_nodes():
                self.server.create(node)
        if self.scenario is not None:
            # The scenario's own seed makes its objects reproducible.
            for obj in self.scenario.objects(now=now):
                # The cloud owns its groups' nodes: they get its instances' provider IDs.
                self.server.create(self.cloud.admit(obj) if obj.get("kind") == "Node" else obj)
            return
        rng = random.Random(self.options.seed)
        names: list[str] = []
        if self.cloud.state.groups:
            for group in self.cloud.state.groups:
                for node in self.cloud.initial_nodes(group, self.options.nodes):
                    names.append(self.server.create(node)["metadata"]["name"])
        else:
            for i in range(self.options.nodes):
                node = objects.make_node(f"node-{i}", rng=rng, now=now)
                names.append(self.server.create(node)["metadata"]["name"])
        if self.options.pods_per_node:
            self._populate_pods(names, rng, now)

    def _populate_pods(self, nodes: list[str], rng: random.Random, now: str) -> None:
        """`--pods-per-node` pods on each node, owned by a few ReplicaSets as in a real cluster.

        Each ReplicaSet is created with exactly as many replicas as it gets pods, so its
        controller is content; evicted pods are replaced wherever the scheduler finds room.
        """
        from nodeops.sim import objects

        apps = min(10, self.options.pods_per_node)
        counts = [0] * apps
        for j in range(self.options.pods_per_node):
            counts[j % apps] += len(nodes)
        owners = []
        for k, count in enumerate(counts):
            rs = objects.make_replicaset(f"app-{k}", "default", replicas=count, rng=rng, now=now)
            owners.append(self.server.create(rs))
        for i, node_name in enumerate(nodes):
            for j in range(self.options.pods_per_node):
                owner = owners[j % apps]
                pod = objects.make_pod(
                    f"{owner['metadata']['name']}-{i}-{j}",
                    "default",
                    node_name=node_name,
                    owner=owner,
                    rng=rng,
                    now=now,
                )
                self.server.create(pod)

    async def stop(self) -> None:
        if self.openstack is not None:
            await self.openstack.stop()
        await self.cloud.stop()
        if self.loops is not None:
            await self.loops.stop()
        await self.server.stop()


async def _serve(options: SimOptions) -> int:
    cluster = SimCluster(options)
    await cluster.start()
    if options.kubeconfig_out:
        path = cluster.server.write_kubeconfig(options.kubeconfig_out)
        print(f"kubeconfig written to {path}", flush=True)
    print(f"simulated cluster serving at {cluster.server.url}", flush=True)
    if cluster.openstack is not None:
        auth_url = cluster.openstack.auth_url(cluster.server.url)
        print(f"simulated OpenStack (Keystone v3) at {auth_url}", flush=True)
        if options.kubeconfig_out:
            from pathlib import Path

            conf = Path(options.kubeconfig_out).with_name("sim-cloudprovider.conf")
            conf.write_text(cluster.openstack.credentials.cloudprovider_conf(auth_url))
            conf.chmod(0o600)
            print(f"its cloudprovider.conf written to {conf}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await cluster.stop()
    return 0


def serve_from_args(args: argparse.Namespace) -> int:
    options = SimOptions(
        nodes=args.nodes,
        pods_per_node=args.pods_per_node,
        node_groups=getattr(args, "node_groups", 0),
        scenario=args.scenario,
        host=args.host,
        port=args.port,
        kubeconfig_out=args.kubeconfig_out,
        time_scale=args.time_scale,
        faults=args.faults,
        seed=args.seed,
        auth=args.auth,
        tls=args.tls,
        rbac=args.rbac,
        instant=args.instant,
        controllers=not args.no_controllers,
        kube_version=getattr(args, "kube_version", None),
    )
    try:
        options.openstack_pools = _openstack_pools(
            getattr(args, "openstack_pool", None) or [], options.kube_version
        )
    except ValueError as exc:
        print(f"nodeops sim serve: --openstack-pool: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(options))
    except FaultSpecError as exc:
        print(f"nodeops sim serve: --faults: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bad scenario or a port in use: one clear line
        from nodeops.sim.scenario import ScenarioError

        if isinstance(exc, ScenarioError | OSError):
            print(f"nodeops sim serve: {exc}", file=sys.stderr)
            return 2
        raise


def _openstack_pools(specs: list[str], kube_version: str | None) -> list[Any]:
    """`NAME:SIZE[:VERSION]` pools; new servers run the API server's version."""
    from nodeops.sim.objects import DEFAULT_KUBELET_VERSION
    from nodeops.sim.openstack import NodePool

    pools = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
            raise ValueError(f"{spec!r} is not NAME:SIZE or NAME:SIZE:VERSION")
        current = kube_version or DEFAULT_KUBELET_VERSION
        pools.append(
            NodePool(
                parts[0],
                size=int(parts[1]),
                kubelet_version=current,
                initial_kubelet_version=parts[2] if len(parts) == 3 else None,
            )
        )
    return pools


__all__ = ["SimCluster", "SimOptions", "serve_from_args"]
