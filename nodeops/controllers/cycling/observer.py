"""The observer: requests to cycle node groups whose nodes are out of date.

A node is out of date when its instance was launched from an older launch version than its
group launches now, or when it runs a pod of an `OnDelete` DaemonSet from an older revision
(such pods are only replaced when deleted, which cycling the node does). Every check interval
the observer looks at each NodeGroup and, for those with out-of-date nodes, creates one
CycleNodeRequest naming them, made from the NodeGroup as `nodeops cycle` makes it, when:

- the finding has held for the wait interval (changes settle first: a launch template is often
  updated in several steps);
- the NodeGroup has no request in progress, and fewer Failed ones than its
  maxFailedCycleNodeRequests allows more than (a Failed request that a later Successful one
  superseded does not count);
- no request of a NodeGroup with a lower priority is in progress, and no NodeGroup of a lower
  priority is out of date too (lower priorities go first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from prometheus_client import Counter, Gauge

from nodeops.api import InvalidResource, NodeGroup
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers import SetupError
from nodeops.controllers.cycling.cloud import Providers
from nodeops.controllers.cycling.generation import (
    GenerationOptions,
    nodegroup_problems,
    request_from_nodegroup,
    validate_request,
)
from nodeops.controllers.cycling.inventory import Inventory
from nodeops.controllers.cycling.keys import SUPERSEDED_LABEL
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.controllers.cycling.settings import ObserverSettings
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.controllers.kit.clock import clock_at, use_clock
from nodeops.kube import Informer, Manager, NotSynced
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import NODES, PODS, Resource
from nodeops.providers.base import Lifecycle, ProviderError

__all__ = ["Observer", "install_observer"]

log = structlog.get_logger(__name__)

Obj = Mapping[str, Any]

DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision", True)
REVISION_LABEL = "controller-revision-hash"
BY_PROVIDER_ID = "observer-provider-id"

CREATED = Counter(
    "nodeops_cycling_observer_requests_created_total",
    "CycleNodeRequests the observer created",
    ["nodegroup"],
    registry=REGISTRY,
)
OUT_OF_DATE = Gauge(
    "nodeops_cycling_observer_nodegroups_out_of_date",
    "NodeGroups with out-of-date nodes at the last observation",
    registry=REGISTRY,
)


@dataclass
class Finding:
    group: NodeGroup
    nodes: dict[str, list[str]]
    """Out-of-date node -> why."""

    @property
    def reason(self) -> str:
        reasons = sorted({r for rs in self.nodes.values() for r in rs})
        return ", ".join(reasons)


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


class Observer:
    def __init__(
        self,
        *,
        client: Client,
        namespace: str,
        providers: Providers,
        nodegroups: Informer,
        requests: Informer,
        nodes: Informer,
        pods: Informer,
        daemonsets: Sequence[Informer],
        revisions: Sequence[Informer],
        settings: ObserverSettings,
        time: TimeBase,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.providers = providers
        self.nodegroups = nodegroups
        self.requests = requests
        self.nodes = nodes
        self.pods = pods
        self.daemonsets = daemonsets
        self.revisions = revisions
        self.settings = settings
        self.time = time
        self.first_seen: dict[str, datetime] = {}
        self.created: list[dict[str, Any]] = []

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.observe()
            except NotSynced:
                pass
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("observation failed", error=str(e))
            try:
                await asyncio.wait_for(stop.wait(), self.time.wall(self.settings.check_interval))
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ one observation

    async def observe(self) -> list[dict[str, Any]]:
        """One pass: the requests created (or, dry, that would have been)."""
        groups = self._groups()
        requests = self.requests.objects(self.namespace)
        busy: dict[str, bool] = {}
        failed: dict[str, int] = {}
        for group in groups:
            mine = [r for r in requests if self._belongs(r, group)]
            busy[group.name] = any(_phase(r) not in TERMINAL_PHASES for r in mine)
            # A Failed request a later success superseded is kept for its reason, not counted.
            failed[group.name] = sum(
                1 for r in mine if _phase(r) == "Failed" and not o.labels(r).get(SUPERSEDED_LABEL)
            )
        findings: list[Finding] = []
        nodes = self.nodes.objects()
        for group in groups:
            if busy[group.name]:
                continue
            if failed[group.name] > group.spec.max_failed_cycle_node_requests:
                log.info("node group blocked by failed requests", nodegroup=group.name)
                continue
            problems = nodegroup_problems(group, nodes)
            if problems:
                log.info("node group skipped", nodegroup=group.name, problems=problems)
                continue
            stale = await self._stale_nodes(group)
            if stale:
                findings.append(Finding(group, stale))
        OUT_OF_DATE.set(len(findings))
        now = self.time.now()
        dirty = {f.group.name for f in findings}
        for name in list(self.first_seen):
            if name not in dirty:
                del self.first_seen[name]
        if not findings:
            return []
        lowest = min(f.group.spec.priority for f in findings)
        blocking = [g for g in groups if busy[g.name] and g.spec.priority < lowest]
        if blocking:
            log.info(
                "waiting for node groups of a lower priority",
                nodegroups=[g.name for g in blocking],
            )
            return []
        made = []
        for finding in findings:
            if finding.group.spec.priority != lowest:
                continue
            seen = self.first_seen.setdefault(finding.group.name, now)
            if (now - seen).total_seconds() < self.settings.wait_interval:
                continue
            body = await self._create(finding)
            if body is not None:
                made.append(body)
                self.first_seen.pop(finding.group.name, None)
        return made

    def _groups(self) -> list[NodeGroup]:
        out = []
        for obj in self.nodegroups.objects():
            try:
                out.append(NodeGroup.parse_spec(obj))
            except InvalidResource as e:
                log.warning("invalid NodeGroup", nodegroup=o.name(obj), error=str(e))
        return sorted(out, key=lambda g: (g.spec.priority, g.name))

    @staticmethod
    def _belongs(request: Obj, group: NodeGroup) -> bool:
        """A request is a NodeGroup's when it cycles the same cloud node groups (Cyclops)."""
        spec = request.get("spec") or {}
        names = (request.get("status") or {}).get("nodeGroups") or list(
            dict.fromkeys(
                ([spec["nodeGroupName"]] if spec.get("nodeGroupName") else [])
                + list(spec.get("nodeGroupsList") or ())
            )
        )
        return set(names) == set(group.spec.node_groups)

    async def _stale_nodes(self, group: NodeGroup) -> dict[str, list[str]]:
        stale: dict[str, list[str]] = {}
        selector = group.spec.node_selector
        try:
            described = await self.providers.get(group.spec.provider).describe_groups(
                group.spec.node_groups
            )
        except (ProviderError, ValueError) as e:
            log.warning("cannot describe node groups", nodegroup=group.name, error=str(e))
            described = []
        inventory = Inventory({g.name: g for g in described})
        for member in inventory.instances():
            instance = member.instance
            if not instance.out_of_date or instance.lifecycle_state is not Lifecycle.IN_SERVICE:
                continue
            for node in self.nodes.by_index(BY_PROVIDER_ID, instance.provider_id):
                if selector.matches(o.labels(node)):
                    stale.setdefault(o.name(node), []).append(
                        f"launch version {instance.launch_version} is out of date"
                    )
        for ds, current in self._ondelete_daemonsets():
            for pod in self.pods.objects(o.namespace(ds)):
                owner = o.controller_ref(pod)
                if owner is None or owner.get("uid") != o.uid(ds):
                    continue
                if (pod.get("status") or {}).get("phase") != "Running":
                    continue
                if o.labels(pod).get(REVISION_LABEL) in (None, current):
                    continue
                node_name = (pod.get("spec") or {}).get("nodeName")
                host = self.nodes.get(str(node_name)) if node_name else None
                if host is not None and selector.matches(o.labels(host)):
                    stale.setdefault(o.name(host), []).append(
                        f"DaemonSet {o.ref(ds)} pod is out of date"
                    )
        return stale

    def _ondelete_daemonsets(self) -> Iterable[tuple[Obj, str]]:
        """(OnDelete DaemonSet, its current revision's hash)."""
        revisions = [r for inf in self.revisions for r in inf.objects()]
        for informer in self.daemonsets:
            for ds in informer.objects():
                strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type")
                if strategy != "OnDelete":
                    continue
                owned = [
                    r for r in revisions if (o.controller_ref(r) or {}).get("uid") == o.uid(ds)
                ]
                if not owned:
                    continue
                newest = max(owned, key=lambda r: int(r.get("revision") or 0))
                current = o.labels(newest).get(REVISION_LABEL)
                if current:
                    yield ds, current

    async def _create(self, finding: Finding) -> dict[str, Any] | None:
        body = request_from_nodegroup(
            finding.group,
            self.namespace,
            GenerationOptions(
                generate_name=f"observer-{finding.group.name}-"[:58],
                node_names=sorted(finding.nodes),
                reason=finding.reason,
            ),
        )
        try:
            validate_request(body)
        except InvalidResource as e:
            log.warning(
                "not creating an invalid request", nodegroup=finding.group.name, error=str(e)
            )
            return None
        log.info(
            "node group out of date",
            nodegroup=finding.group.name,
            nodes=len(finding.nodes),
            reason=finding.reason,
            dry=self.settings.dry,
        )
        if self.settings.dry:
            self.created.append(body)
            return body
        created = await self.client.create(CYCLENODEREQUESTS, body, self.namespace)
        CREATED.labels(finding.group.name).inc()
        self.created.append(created)
        return created


def install_observer(
    manager: Manager,
    *,
    namespace: str,
    providers: Providers,
    settings: ObserverSettings | None = None,
    time: TimeBase | None = None,
) -> Observer:
    settings = settings or ObserverSettings()
    try:
        time = use_clock(manager, time) if time else clock_at(manager, settings.time_scale)
    except ValueError as exc:
        raise SetupError(f"--cycling-observer-time-scale: {exc}") from None
    informers = manager.informers

    def provider_id(obj: Obj) -> list[str]:
        pid = (obj.get("spec") or {}).get("providerID")
        return [str(pid)] if pid else []

    observer = Observer(
        client=manager.client,
        namespace=namespace,
        providers=providers,
        nodegroups=informers.informer(NODEGROUPS),
        requests=informers.informer(CYCLENODEREQUESTS, namespace=namespace),
        nodes=informers.informer(NODES, indexers={BY_PROVIDER_ID: provider_id}),
        pods=informers.informer(PODS),
        daemonsets=[
            informers.informer(DAEMONSETS, namespace=ns) for ns in settings.daemonset_namespaces
        ],
        revisions=[
            informers.informer(CONTROLLERREVISIONS, namespace=ns)
            for ns in settings.daemonset_namespaces
        ],
        settings=settings,
        time=time,
    )
    manager.add_runnable(observer.run, name="cycling-observer", needs_leader=True)
    return observer
