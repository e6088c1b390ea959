"""A simulated cluster with the cycling controllers running against it, in one process.

The manager talks to the simulated API server over loopback HTTP and to the simulated cloud
through the `sim` provider, exactly as it would to a real cluster and cloud; only its clock is
the simulator's, so timeouts mean the same in both.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from nodeops.api import all_crds
from nodeops.controllers.cycling.cloud import Providers
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.observer import Observer, install_observer
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
from nodeops.controllers.cycling.settings import CyclingSettings, ObserverSettings
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.controllers.cycling.wiring import CyclingControllers, install
from nodeops.kube import Manager, errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import CRDS, NAMESPACES, PODS
from nodeops.providers.base import Provider
from nodeops.providers.sim import SimConfig, SimProvider
from nodeops.sim.attach import Attachment, AttachOptions
from nodeops.sim.attach.feed import RecordFeed, WatchFeed
from nodeops.sim.cloud import SimCloud
from nodeops.sim.cloud.traffic import Flow, FlowSpec
from nodeops.sim.record import ClusterRecord
from nodeops.sim.scenario import Scenario
from nodeops.sim.serve import SimCluster, SimOptions
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.store import WatchEvent

__all__ = ["OPERATOR_NAMESPACE", "World", "WorldOptions", "api_requests"]

OPERATOR_NAMESPACE = "nodeops-system"


@dataclass
class WorldOptions:
    scenario: Scenario
    time_scale: float = 30.0
    faults: str | None = None
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    """Overrides of the cycling settings (durations in simulated seconds)."""
    traffic: Mapping[str, str] = field(default_factory=dict)
    """Load balancer -> Service `namespace/name` to send requests through."""
    controllers: bool = True
    """Start the manager; False for a world another process operates (the crash tests)."""
    observer: dict[str, Any] | None = None
    """Also run the observer, with these settings (durations in simulated seconds)."""
    notifier: Callable[[Client], Notifier] | None = None
    """Builds the request notifier from the manager's client."""
    kubeconfig: str | None = None
    """Attach the simulated nodes and cloud to this cluster instead of simulating one."""
    context: str | None = None
    sim_controllers: frozenset[str] = frozenset()
    """With `kubeconfig`: the simulator's control-plane loops to run there too."""
    populate: Callable[[SimCluster], None] | None = None
    """Loads objects into the simulated cluster before its control loops start (see
    `SimOptions.populate`); the operator's CRDs are there already."""
    record: bool = True
    """Keep the demo's record of the cluster (budget violations, evictions, Ready shares) from
    the simulator's store; a rehearsal keeps its own."""
    manager_qps: float = 0.0
    """Requests per simulated second the manager's client may send (bursts of
    `CLIENT_BURST`); 0: as many as it likes. A rehearsal's copy sends at `nodeops run`'s own
    rate (`CLIENT_QPS`): twenty nodes drained at once ask for hundreds of evictions, and how
    fast they go decides how deep a workload dips."""
    attach_id: str = "demo"
    """With `kubeconfig`: the attach's id. An attach removes what an earlier one of the same id
    left (a crash's remains), so two worlds on one cluster need ids of their own."""


def _with_crds(populate: Callable[[SimCluster], None]) -> Callable[[SimCluster], None]:
    """`populate`, with the operator's CRDs installed first, so it can load their objects."""

    def load(sim: SimCluster) -> None:
        for crd in all_crds():
            sim.server.create(crd)
        populate(sim)

    return load


def api_requests(snapshot: Mapping[str, Any], agent: str = "nodeops") -> int:
    """Kubernetes API requests made by `agent` (cloud calls are counted apart)."""
    pairs = ((snapshot.get("by_agent") or {}).get(agent) or {}).get("by_verb_resource") or {}
    return sum(
        int(v.get("requests") or 0)
        for k, v in pairs.items()
        if not k.split("/", 1)[-1].startswith("cloud/")
    )


class World:
    sim: SimCluster
    """The simulated cluster; unset when attached to another one (`attachment`)."""

    def __init__(self, options: WorldOptions) -> None:
        self.options = options
        self.attachment: Attachment | None = None
        self._feed: RecordFeed | None = None
        if options.kubeconfig is not None:
            self.attachment = Attachment(
                AttachOptions(
                    kubeconfig=options.kubeconfig,
                    context=options.context,
                    instance=options.attach_id,
                    scenario=options.scenario,
                    time_scale=options.time_scale,
                    seed=options.seed,
                    controllers=options.sim_controllers,
                )
            )
            self.clock = self.attachment.clock
            self.cloud: SimCloud = self.attachment.cloud
            self.record = ClusterRecord(None, self.clock)
        else:
            self.sim = SimCluster(
                SimOptions(
                    scenario=options.scenario,
                    time_scale=options.time_scale,
                    faults=None,
                    seed=options.seed,
                    populate=_with_crds(options.populate) if options.populate else None,
                )
            )
            self.clock = self.sim.clock
            self.cloud = self.sim.cloud
            self.record = ClusterRecord(self.sim.server if options.record else None, self.sim.clock)
        self.flows: list[Flow] = []
        self.client: Client | None = None
        self.manager: Manager | None = None
        self.controllers: CyclingControllers | None = None
        self.providers: Providers | None = None
        self.observer: Observer | None = None
        self.notifier: Notifier | None = None
        self._task: asyncio.Task[int] | None = None
        self._requests_base = 0
        self._manager_client: Client | None = None

    @property
    def time(self) -> TimeBase:
        return TimeBase(now=self.clock.now, scale=self.clock.time_scale)

    @property
    def stats(self) -> RequestStats:
        """Requests counted by the simulator: all of them, or only the cloud's when attached."""
        return self.cloud.stats if self.attachment is not None else self.sim.server.stats

    @property
    def operator_requests(self) -> int:
        """Kubernetes API requests of the operator since the scene was set: the simulated
        server's count, or the client's own where the server is not ours."""
        if self.attachment is None:
            return api_requests(self.sim.server.stats.snapshot())
        assert self.client is not None
        manager = self._manager_client.requests if self._manager_client is not None else 0
        return self.client.requests + manager - self._requests_base

    def api_client(self, **options: Any) -> Client:
        """A client of the cluster's API server, as the admin of the simulated one or with the
        kubeconfig's credentials of the attached one."""
        if self.attachment is not None:
            target = self.attachment.target
            return Client(
                target.server,
                token=target.token,
                token_source=target.token_source,
                ssl_context=target.ssl_context,
                **options,
            )
        return Client(self.sim.server.url, token=self.sim.server.admin_token, **options)

    def _labelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Objects the demo creates in an attached cluster are the attach's, for detach."""
        if self.attachment is None:
            return obj
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **self.attachment.labels}
        return obj

    def provider(self, name: str | None = None) -> Provider:
        if name not in (None, "sim"):
            raise ValueError(f"unknown provider {name!r}; the simulated cluster has only 'sim'")
        if self.attachment is not None:
            config = SimConfig(**self.attachment.provider_settings()["sim"])
        else:
            config = SimConfig(url=self.sim.server.url, token=self.sim.server.admin_token)
        return cast(Provider, SimProvider(config))

    def settings(self) -> CyclingSettings:
        """Settings for a cluster this fast: checks and polls every few simulated seconds."""
        base: dict[str, Any] = {
            "check_interval": 5.0,
            "cloud_poll_interval": 5.0,
            "cloud_max_backoff": 60.0,
            "request_workers": 4,
            "node_workers": 32,
        }
        base.update(self.options.settings)
        return CyclingSettings(**base)

    async def start(self, *, wait_ready: float = 120.0) -> None:
        if self.attachment is not None:
            await self.attachment.start()
            self._feed = RecordFeed(self.record, self.attachment.new_client)
            await self._feed.start()
        else:
            await self.sim.start()
        self.client = self.api_client(qps=0, timeout=30)
        for crd in all_crds():
            with contextlib.suppress(errors.AlreadyExists, errors.Conflict):
                await self.client.create(CRDS, self._labelled(crd))
        with contextlib.suppress(errors.AlreadyExists, errors.Conflict):
            await self.client.create(
                NAMESPACES,
                self._labelled(
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": OPERATOR_NAMESPACE},
                    }
                ),
            )
        await self.wait_workloads(wait_ready)
        # Faults start once the scene is set: they are for the operator, not for the setup.
        if self.options.faults:
            faults = self.cloud.faults if self.attachment is not None else self.sim.server.faults
            faults.update(self.options.faults, seed=self.options.seed)
        self.stats.reset()
        self._requests_base = self.client.requests
        self.record.start()
        # Clients behind the load balancers: the simulated cloud's traffic, whose records say
        # which requests failed and why.
        for lb, service in self.options.traffic.items():
            namespace, _, name = service.rpartition("/")
            self.flows.append(
                self.cloud.traffic.start_flow(
                    FlowSpec(
                        load_balancer=lb, namespace=namespace or "default", service=name, rate=100.0
                    )
                )
            )
        if self.options.controllers:
            self.start_manager()

    def start_manager(self) -> None:
        assert self.client is not None
        client = self.client
        if self.options.manager_qps > 0:
            qps = self.options.manager_qps * self.options.time_scale  # in the loop's seconds
            client = self._manager_client = self.api_client(qps=qps, timeout=30)
        self.manager = Manager(client, metrics_addr="0", health_addr="0")
        self.providers = Providers(self.provider, "sim")
        notifier = self.options.notifier(self.client) if self.options.notifier else None
        self.notifier = notifier
        self.controllers = install(
            self.manager,
            namespace=OPERATOR_NAMESPACE,
            providers=self.providers,
            settings=self.settings(),
            time=self.time,
            notifier=notifier,
        )
        if self.options.observer is not None:
            self.observer = install_observer(
                self.manager,
                namespace=OPERATOR_NAMESPACE,
                providers=self.providers,
                settings=ObserverSettings(**self.options.observer),
                time=self.time,
            )
        self._task = asyncio.create_task(self.manager.run(), name="demo-manager")

    def manager_command(self, directory: Path, **settings: Any) -> list[str]:
        """`nodeops run` with the cycling controllers against this world, for running the
        manager in a process of its own (crash tests, CPU measurements). `settings` are
        cycling settings, as `--cycling-<name>` flags."""
        config = self.sim.server.write_kubeconfig(directory / "kubeconfig")
        providers = directory / "providers.yaml"
        providers.write_text(
            yaml.safe_dump(
                {
                    "providers": {
                        "sim": {"url": self.sim.server.url, "token": self.sim.server.admin_token}
                    }
                }
            ),
            encoding="utf-8",
        )
        flags = {
            "time_scale": self.sim.clock.time_scale,
            "time_origin": self.sim.clock.origin.isoformat(),
            "check_interval": 5,
            "cloud_poll_interval": 5,
            **settings,
        }
        args = [
            sys.executable, "-m", "nodeops.cli", "run",
            "--kubeconfig", str(config),
            "--namespace", OPERATOR_NAMESPACE,
            "--controllers", "cycling",
            "--provider", "sim",
            "--provider-config", str(providers),
            "--metrics-addr", "0",
            "--health-addr", "0",
            "--log-level", "warning",
        ]  # fmt: skip
        for name, value in flags.items():
            args += [f"--cycling-{name.replace('_', '-')}", str(value)]
        return args

    async def wait_workloads(self, timeout: float) -> None:
        """Until every pod the scenario's workloads want is Running and Ready."""
        assert self.client is not None
        scenario = self.options.scenario
        nodes = sum(g.size for g in scenario.node_groups) + len(scenario.nodes)
        want = sum(
            (w.replica_count if w.kind != "DaemonSet" else nodes) for w in scenario.workloads
        )
        if not want:
            return  # a rehearsal's copy: its pods are loaded, and it waits for them itself
        ready: set[tuple[str, str]] = set()
        try:
            async with asyncio.timeout(timeout):
                if self.attachment is None:
                    await self._until_pods_ready(want, ready)
                else:
                    await self._until_attached_pods_ready(want, ready)
        except TimeoutError:
            raise TimeoutError(
                f"workloads not ready after {timeout:g}s ({len(ready)} of {want} pods)"
            ) from None

    async def _until_attached_pods_ready(self, want: int, ready: set[tuple[str, str]]) -> None:
        """Until `want` of the attach's pods (not the cluster's own) are Ready, by a watch."""
        assert self.attachment is not None
        changed = asyncio.Event()

        def observe(_key: tuple[str, str], event: str, pod: Mapping[str, Any]) -> None:
            _count_ready(ready, [pod], deleted=event == "DELETED")
            changed.set()

        feed = WatchFeed(
            self.attachment.new_client("demo"),
            observe,
            (PODS,),
            label_selector=",".join(f"{k}={v}" for k, v in self.attachment.labels.items()),
            name="demo-wait",
        )
        try:
            await feed.start()
            while len(ready) < want:
                changed.clear()
                await changed.wait()
        finally:
            await feed.stop()

    async def _until_pods_ready(self, want: int, ready: set[tuple[str, str]]) -> None:
        """Until `want` pods are Ready, woken by the simulator's own writes of pods: no list
        per poll, which at thousands of pods cost more than building them, and on a loop that
        skips idle waits a poll every tenth of a second was a busy wait."""
        assert self.client is not None
        touched: set[tuple[str, str]] = set()
        changed = asyncio.Event()

        def on_write(key: tuple[str, str], ev: WatchEvent) -> None:
            if key != _POD_STORAGE:
                return
            pod = ev.decoded()
            touched.add((o.namespace(pod), o.name(pod)))
            _count_ready(ready, [pod], deleted=ev.type == "DELETED")
            changed.set()

        hooks = self.sim.server.store.write_hooks
        hooks.append(on_write)
        try:
            pods, _ = await self.client.list(PODS)
            # What the hook saw since it was hung is newer than the list.
            _count_ready(ready, [p for p in pods if (o.namespace(p), o.name(p)) not in touched])
            while len(ready) < want:
                changed.clear()
                await changed.wait()
        finally:
            hooks.remove(on_write)

    async def create_request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the roll's request. The injected faults are for the operator: a create they
        answer with a 5xx or cut off is sent again, and one that happened meanwhile is read."""
        assert self.client is not None
        labelled = self._labelled(dict(body))
        attempts = 10
        for attempt in range(attempts):
            try:
                return await self.client.create(CYCLENODEREQUESTS, labelled, OPERATOR_NAMESPACE)
            except errors.AlreadyExists:
                if attempt == 0:
                    raise  # not ours: a request of that name was there before
                name = str(labelled["metadata"]["name"])
                return await self.client.get(CYCLENODEREQUESTS, name, OPERATOR_NAMESPACE)
            except (errors.ServerError, errors.ConnectionFailed, errors.RequestTimeout):
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def request(self, name: str) -> dict[str, Any] | None:
        assert self.client is not None
        return await self.client.get_or_none(CYCLENODEREQUESTS, name, OPERATOR_NAMESPACE)

    @property
    def requests_sent(self) -> int:
        return sum(f.sent for f in self.flows)

    @property
    def requests_failed(self) -> int:
        return sum(f.failed for f in self.flows)

    async def stop_manager(self) -> None:
        """The operator stops where it is; the simulated cluster runs on."""
        if self.manager is not None:
            self.manager.stop()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 30)

    async def stop(self) -> None:
        await self.record.stop()
        await self.stop_manager()
        if self.providers is not None:
            await self.providers.close()
        if self.controllers is not None:
            await self.controllers.checks.close()
        if self.notifier is not None:
            await self.notifier.close()
        if self.client is not None:
            await self.client.close()
        if self._manager_client is not None:
            await self._manager_client.close()
        if self._feed is not None:
            await self._feed.stop()
        if self.attachment is not None:
            await self.attachment.stop()
        else:
            await self.sim.stop()


def _count_ready(
    ready: set[tuple[str, str]], pods: Iterable[Mapping[str, Any]], *, deleted: bool = False
) -> None:
    """Keep `ready`, the namespace and name of every Ready pod, current with `pods`."""
    for pod in pods:
        name = (o.namespace(pod), o.name(pod))
        if not deleted and _pod_ready(pod):
            ready.add(name)
        else:
            ready.discard(name)


_POD_STORAGE = ("", "pods")
"""The simulator's store key of pods (API group, plural)."""


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
