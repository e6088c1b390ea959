"""An attached simulator: the simulated nodes, clouds and (optionally) controllers of `nodeops
sim serve`, running against another cluster's API server.

What stays local: the clouds (node groups, load balancers, OpenStack pools) and their HTTP
endpoints, served on loopback for the `sim` and `openstack` providers. What goes to the cluster:
the Nodes the clouds' instances register, their kubelets' Leases and status, the status of pods
bound to those nodes, and the objects of a scenario. Every object created carries
`nodeops.dev/sim-attach=<id>` (see `labels`), nodes carry the clouds' provider IDs (`sim:///`,
`openstack:///`), and `stop()` removes them all by that label, as `nodeops sim detach` does
after a crash.

The control-plane loops (scheduler, workload, disruption, GC, pod-GC, node lifecycle) are off
unless asked for: a cluster with kube-controller-manager must not get a second ReplicaSet
controller, and one without a scheduler is told so (`hints`) rather than guessed at.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import yaml
from aiohttp import web

from nodeops.sim.attach.cleanup import remove_labelled
from nodeops.sim.attach.kubeconfig import AttachError, Target, load_target
from nodeops.sim.attach.labels import ATTACH_LABEL, LabellingClient, labelled, owned_by
from nodeops.sim.attach.preflight import Access, check_access, check_names, check_reachable
from nodeops.sim.clock import Clock
from nodeops.sim.cloud import SimCloud
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.cluster.apiclient import (
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    AlreadyExists,
    ApiClient,
    Obj,
    Resource,
)
from nodeops.sim.cluster.kubelet import NODE_LEASE_NAMESPACE
from nodeops.sim.server.accounting import stats_routes

__all__ = ["CONTROLLERS", "AttachOptions", "Attachment", "parse_controllers"]

CONTROLLERS: Final = ("scheduler", "workloads", "disruption", "gc", "podgc", "nodelifecycle")
"""The control-plane loops attach can add; the kubelets always run."""

_SERVICES = Resource("", "v1", "services", "Service", True)
_BY_KIND: Final = {
    r.kind: r
    for r in (
        *(NAMESPACES, NODES, PODS, _SERVICES, PDBS),
        *(DEPLOYMENTS, STATEFULSETS, DAEMONSETS, REPLICASETS),
    )
}
_WORKLOAD_KINDS: Final = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})

# What each part needs of the cluster, in the order a missing permission is reported.
_KUBELET_NEEDS: Final = (
    Access("create", "nodes"),
    Access("get", "nodes"),
    Access("list", "nodes"),
    Access("watch", "nodes"),
    Access("patch", "nodes"),
    Access("delete", "nodes"),
    Access("patch", "nodes", subresource="status"),
    Access("list", "pods"),
    Access("watch", "pods"),
    Access("delete", "pods"),
    Access("patch", "pods", subresource="status"),
    Access("create", "leases", "coordination.k8s.io", namespace=NODE_LEASE_NAMESPACE),
    Access("get", "leases", "coordination.k8s.io", namespace=NODE_LEASE_NAMESPACE),
    Access("update", "leases", "coordination.k8s.io", namespace=NODE_LEASE_NAMESPACE),
    Access("delete", "leases", "coordination.k8s.io", namespace=NODE_LEASE_NAMESPACE),
)
_CONTROLLER_NEEDS: Final = {
    "scheduler": (Access("create", "pods", subresource="binding"),),
    "workloads": (
        Access("create", "pods"),
        Access("create", "replicasets", "apps"),
        Access("update", "replicasets", "apps", subresource="status"),
        Access("update", "deployments", "apps", subresource="status"),
    ),
    "disruption": (Access("update", "poddisruptionbudgets", "policy", subresource="status"),),
    "gc": (Access("delete", "replicasets", "apps"),),
    "podgc": (Access("delete", "pods"),),
    "nodelifecycle": (Access("list", "leases", "coordination.k8s.io"),),
}

HINT_SECONDS: Final = 30.0


def parse_controllers(text: str | None) -> frozenset[str]:
    """`scheduler,workloads`, `all` or `none` (also empty)."""
    names = {n.strip() for n in (text or "").split(",") if n.strip()}
    if names == {"all"}:
        return frozenset(CONTROLLERS)
    names.discard("none")
    unknown = sorted(names - set(CONTROLLERS))
    if unknown:
        raise AttachError(
            f"unknown controllers {', '.join(unknown)}; choose from {', '.join(CONTROLLERS)}, "
            "all or none"
        )
    return frozenset(names)


@dataclass
class AttachOptions:
    kubeconfig: str
    context: str | None = None
    instance: str = "sim"
    """The value of the attach label; distinct attaches to one cluster need distinct ids."""
    nodes: int = 3
    """Standalone nodes `<instance>-node-<i>`, or with `node_groups` nodes per group."""
    node_groups: int = 0
    scenario: Any = None
    """A scenario file's path, or a `Scenario` already built."""
    openstack_pools: list[Any] = field(default_factory=list)
    time_scale: float | None = None
    seed: int = 0
    instant: bool = False
    controllers: frozenset[str] = frozenset()
    cloud_host: str = "127.0.0.1"
    cloud_port: int = 0
    provider_config_out: str | None = None
    hint_seconds: float = HINT_SECONDS
    """Wall seconds a pod may wait unscheduled before the user is told why."""


class Attachment:
    """The attached simulator, started and stopped as one."""

    def __init__(self, options: AttachOptions, *, out: TextIO | None = None) -> None:
        self.options = options
        self.out = out if out is not None else sys.stderr
        self.target: Target = load_target(options.kubeconfig, options.context)
        self.scenario: Any = None
        if isinstance(options.scenario, str):
            from nodeops.sim.scenario import load_scenario

            self.scenario = load_scenario(options.scenario)
        elif options.scenario is not None:
            self.scenario = options.scenario
        time_scale = options.time_scale
        if time_scale is None and self.scenario is not None:
            time_scale = getattr(self.scenario, "time_scale", None)
        self.clock = Clock(time_scale or 1.0)
        self.cloud_token = secrets.token_urlsafe(24)
        self.cloud = SimCloud(self.clock, token=self.cloud_token, seed=options.seed)
        if self.scenario is not None:
            self.cloud.add_scenario(self.scenario)
        else:
            from nodeops.sim.scenario import NodeGroup

            for i in range(options.node_groups):
                self.cloud.add_group(NodeGroup(name=f"group-{i}", size=options.nodes))
        self.openstack: Any = None
        if options.openstack_pools:
            from nodeops.sim.openstack import SimOpenStack

            self.openstack = SimOpenStack(
                self.clock, faults=self.cloud.faults, stats=self.cloud.stats, seed=options.seed
            )
            for pool in options.openstack_pools:
                self.openstack.add_pool(pool)
        self.loops: ClusterLoops | None = None
        self.client: ApiClient | None = None
        self.cloud_url: str | None = None
        self.provider_config: Path | None = None
        self._runner: web.AppRunner | None = None
        self._hinted: set[str] = set()
        self._hint_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._started = False
        self._wrote = False

    @property
    def instance(self) -> str:
        return self.options.instance

    @property
    def labels(self) -> dict[str, str]:
        """What marks this attach's objects; callers creating objects for it add these."""
        return {ATTACH_LABEL: self.instance}

    def new_client(self, component: str) -> LabellingClient:
        return LabellingClient(
            self.target.server,
            self.target.token,
            instance=self.instance,
            component=component,
            ssl_context=self.target.ssl_context,
            token_source=self.target.token_source,
        )

    # -- what it will create ----------------------------------------------------------------------

    def _initial_objects(self) -> list[tuple[Resource, Obj]]:
        """Everything created before the loops start, labelled, in creation order."""
        from nodeops.sim import objects

        now = self.clock.timestamp()
        made: list[Obj] = []
        if self.openstack is not None:
            made.extend(objects.for_create(n) for n in self.openstack.initial_nodes())
        if self.scenario is not None:
            for obj in self.scenario.objects(now=now):
                made.append(self.cloud.admit(obj) if obj.get("kind") == "Node" else obj)
        elif self.cloud.state.groups:
            for group in self.cloud.state.groups:
                made.extend(self.cloud.initial_nodes(group, self.options.nodes))
        else:
            rng = random.Random(self.options.seed)
            for i in range(self.options.nodes):
                made.append(
                    objects.for_create(
                        objects.make_node(
                            f"{self.instance}-node-{i}", cloud="sim", rng=rng, now=now
                        )
                    )
                )
        out = []
        for obj in made:
            kind = str(obj.get("kind"))
            resource = _BY_KIND.get(kind)
            if resource is None:
                raise AttachError(f"attach cannot create {kind} objects")
            out.append((resource, labelled(obj, self.instance, templates=kind in _WORKLOAD_KINDS)))
        return out

    def _needs(self, objects: Iterable[tuple[Resource, Obj]]) -> list[Access]:
        needs = list(_KUBELET_NEEDS)
        for resource, _ in objects:
            for verb in ("create", "get", "delete"):
                needs.append(Access(verb, resource.plural, resource.group))
        for name in CONTROLLERS:
            if name in self.options.controllers:
                needs.extend(_CONTROLLER_NEEDS[name])
        return needs

    # -- running --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check, then create: nothing is written to the cluster before every check passed."""
        if self._started:
            raise RuntimeError("already started")
        self._started = True
        self.client = self.new_client("attach")
        await check_reachable(self.client)
        planned = self._initial_objects()
        await check_access(self.client, self._needs(planned))
        todo = await check_names(self.client, self.instance, planned)
        self._wrote = True
        leftovers = await remove_labelled(self.client, self.instance)
        if leftovers:
            self._say(
                f"removed {sum(leftovers.values())} objects a previous attach "
                f"{self.instance!r} left behind"
            )
        await self._serve_clouds()
        for resource, obj in todo:
            try:
                await self.client.create(resource, obj)
            except AlreadyExists:
                if resource.plural != "namespaces":
                    raise
        owns = owned_by(self.instance)
        self.loops = ClusterLoops(
            self.target.server,
            self.target.token,
            self.clock,
            instant=self.options.instant,
            components=("kubelet", *sorted(self.options.controllers)),
            freeze_caches=False,
            client_factory=self.new_client,
            owns_node=owns,
            # The attached server stamps times by the wall clock.
            server_clock=Clock(1.0),
        )
        await self.loops.start()
        await self.cloud.start(self.target.server, client=self.new_client("cloud"), owns=owns)
        if self.openstack is not None:
            await self.openstack.start(
                self.target.server, client=self.new_client("openstack"), owns=owns
            )
        if "scheduler" not in self.options.controllers:
            assert self.loops.informers is not None
            self.loops.informers.get(PODS).add_handler(self._on_pod)
        if self.options.provider_config_out:
            self.provider_config = self.write_provider_config(self.options.provider_config_out)

    async def _serve_clouds(self) -> None:
        """The clouds' APIs on loopback, where the `sim` and `openstack` providers reach them."""
        app = web.Application()
        app.add_routes(stats_routes(self.cloud.stats, self.cloud.faults))
        app.add_routes(self.cloud.routes())
        if self.openstack is not None:
            app.add_routes(self.openstack.routes())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.cloud_host, self.options.cloud_port)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        port = sockets[0].getsockname()[1] if sockets else self.options.cloud_port
        self.cloud_url = f"http://{self.options.cloud_host}:{port}"

    def provider_settings(self) -> dict[str, Any]:
        """The `providers:` block of `nodeops run --provider-config` for these clouds."""
        assert self.cloud_url is not None
        return {"sim": {"url": self.cloud_url, "token": self.cloud_token}}

    def write_provider_config(self, path: str | Path) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        providers = self.provider_settings()
        if self.openstack is not None:
            assert self.cloud_url is not None
            conf = target.with_name(f"{target.stem}.cloudprovider.conf")
            auth_url = self.openstack.auth_url(self.cloud_url)
            conf.write_text(self.openstack.credentials.cloudprovider_conf(auth_url))
            conf.chmod(0o600)
            providers["openstack"] = {"cloudprovider_conf": str(conf.resolve())}
        target.write_text(yaml.safe_dump({"providers": providers}, sort_keys=False))
        target.chmod(0o600)
        return target

    async def stop(self, *, detach: bool = True) -> Counter[str]:
        """Stop every loop, then (unless told not to) remove what was created."""
        for timer in self._hint_timers.values():
            timer.cancel()
        self._hint_timers.clear()
        if self.openstack is not None:
            await self.openstack.stop()
        await self.cloud.stop()
        if self.loops is not None:
            await self.loops.stop()
            self.loops = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        removed: Counter[str] = Counter()
        if self.client is not None:
            try:
                if detach and self._wrote:
                    removed = await remove_labelled(self.client, self.instance)
            finally:
                await self.client.close()
                self.client = None
        return removed

    # -- hints ----------------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        print(f"nodeops sim attach: {line}", file=self.out, flush=True)

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        """A pod waiting for a scheduler that is not there gets its hint once."""
        obj = new if new is not None else old
        assert obj is not None
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if new is None or not _waits_for_scheduler(new):
            timer = self._hint_timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            return
        if "scheduler" in self._hinted or key in self._hint_timers:
            return
        loop = asyncio.get_running_loop()
        self._hint_timers[key] = loop.call_later(
            self.options.hint_seconds, self._hint_scheduler, key
        )

    def _hint_scheduler(self, key: tuple[str, str]) -> None:
        self._hint_timers.pop(key, None)
        if "scheduler" in self._hinted:
            return
        self._hinted.add("scheduler")
        self._say(
            f"pod {key[0]}/{key[1]} has been Pending for {self.options.hint_seconds:g}s and "
            "nothing has tried to schedule it: this cluster seems to run no kube-scheduler; "
            "attach with --controllers scheduler (see --controllers all for a bare API server)"
        )


def _waits_for_scheduler(pod: Mapping[str, Any]) -> bool:
    """Unbound, not terminating, for the default scheduler, and never judged by one."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
        return False
    status = pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending":
        return False
    return not any(c.get("type") == "PodScheduled" for c in status.get("conditions") or ())
