"""Building the cycling controllers on a manager: informers, indexes, event mappings, poller.

`install` is what `nodeops run --controllers cycling` calls, and what a library user or
`nodeops demo` calls with a manager of their own (and, for a simulated cluster, a time base
that runs as fast as its clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.checks import CheckRunner
from nodeops.controllers.cycling.cloud import CloudWatcher, Providers
from nodeops.controllers.cycling.cnr import (
    BY_NODE,
    BY_OWNER,
    BY_PROVIDER_ID,
    CycleNodeRequestReconciler,
)
from nodeops.controllers.cycling.cns import CycleNodeStatusReconciler
from nodeops.controllers.cycling.metrics import register_phase_gauge
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES, NODEGROUPS
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import SharedInformers
from nodeops.kube import Controller, Manager, NotSynced, Request
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES, PDBS, PODS

__all__ = ["CyclingControllers", "install"]

Obj = Mapping[str, Any]


# The node controller's name, also the label of its drains' metrics.
NODE_CONTROLLER = "cyclenodestatus"


def _owner_uid(obj: Obj) -> list[str]:
    owner = o.controller_ref(obj)
    return [str(owner["uid"])] if owner and owner.get("uid") else []


def _spec_node(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def _provider_id(obj: Obj) -> list[str]:
    pid = (obj.get("spec") or {}).get("providerID")
    return [str(pid)] if pid else []


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def _ready(obj: Obj) -> str | None:
    cond = o.condition(obj, "Ready")
    return None if cond is None else str(cond.get("status"))


def node_changed(old: Obj, new: Obj) -> bool:
    """What cycling looks at on a node; heartbeats and image lists are not it."""
    return (
        _ready(old) != _ready(new)
        or (old.get("spec") or {}) != (new.get("spec") or {})
        or o.labels(old) != o.labels(new)
        or o.annotations_of(old) != o.annotations_of(new)
        or o.meta(old).get("finalizers") != o.meta(new).get("finalizers")
        or o.meta(old).get("deletionTimestamp") != o.meta(new).get("deletionTimestamp")
    )


def pod_changed(old: Obj, new: Obj) -> bool:
    return (
        (old.get("status") or {}).get("phase") != (new.get("status") or {}).get("phase")
        or _ready(old) != _ready(new)
        or o.meta(old).get("deletionTimestamp") != o.meta(new).get("deletionTimestamp")
        or (old.get("spec") or {}).get("nodeName") != (new.get("spec") or {}).get("nodeName")
        or o.labels(old) != o.labels(new)
        or o.annotations_of(old) != o.annotations_of(new)
    )


def phase_or_deletion_changed(old: Obj, new: Obj) -> bool:
    return _phase(old) != _phase(new) or o.meta(old).get("deletionTimestamp") != o.meta(new).get(
        "deletionTimestamp"
    )


def _tolerant(mapper: Callable[[Obj], Iterable[Request]]) -> Callable[[Obj], list[Request]]:
    """A mapper that maps to nothing while the informers it reads are still filling: the
    initial list of each controller's own informer enqueues every object anyway."""

    def mapped(obj: Obj) -> list[Request]:
        try:
            return list(mapper(obj))
        except NotSynced:
            return []

    return mapped


@dataclass
class CyclingControllers:
    requests: Controller
    children: Controller
    cloud: CloudWatcher
    checks: CheckRunner
    providers: Providers


def install(
    manager: Manager,
    *,
    namespace: str,
    providers: Providers,
    settings: CyclingSettings | None = None,
    time: TimeBase | None = None,
    notifier: Notifier | None = None,
    check_transport: httpx.AsyncBaseTransport | None = None,
) -> CyclingControllers:
    """Add the CycleNodeRequest and CycleNodeStatus controllers and the cloud poller."""
    settings = settings or CyclingSettings()
    if time is None:
        time = (
            TimeBase()
            if settings.time_scale == 1.0
            else TimeBase.scaled(settings.time_scale, settings.time_origin)
        )
    informers = manager.informers
    requests = informers.informer(CYCLENODEREQUESTS, namespace=namespace)
    children = informers.informer(
        CYCLENODESTATUSES,
        namespace=namespace,
        indexers={BY_OWNER: _owner_uid, BY_NODE: _spec_node},
    )
    nodes = informers.informer(NODES, indexers={BY_PROVIDER_ID: _provider_id})
    pods = informers.informer(PODS, indexers={BY_NODE: _spec_node})
    pdbs = informers.informer(PDBS)
    nodegroups = informers.informer(NODEGROUPS)
    cloud = CloudWatcher(
        providers,
        interval=time.wall(settings.cloud_poll_interval),
        max_backoff=time.wall(settings.cloud_max_backoff),
    )
    checks = CheckRunner(
        manager.client, timeout=settings.health_check_timeout, transport=check_transport
    )
    events = getattr(manager, "events", None)
    request_reconciler = CycleNodeRequestReconciler(
        client=manager.client,
        requests=requests,
        children=children,
        nodes=nodes,
        pods=pods,
        nodegroups=nodegroups,
        cloud=cloud,
        providers=providers,
        checks=checks,
        events=events,
        settings=settings,
        time=time,
        notifier=notifier,
    )
    # One set of drain sources for every node's drain: shared informers, and budget tokens that
    # outlive a pass and are shared by every drain under the same budgets.
    sources = SharedInformers.for_manager(manager)

    def drainer(options: DrainOptions) -> Drainer:
        return Drainer(
            manager.client, options, sources=sources, events=events, controller=NODE_CONTROLLER
        )

    child_reconciler = CycleNodeStatusReconciler(
        client=manager.client,
        children=children,
        requests=requests,
        nodes=nodes,
        pods=pods,
        providers=providers,
        events=events,
        settings=settings,
        time=time,
        drainer=drainer,
    )

    def active_requests(_: Obj) -> Iterable[Request]:
        return [
            Request(o.name(r), o.namespace(r))
            for r in requests.objects(namespace)
            if _phase(r) not in TERMINAL_PHASES
        ]

    def waiting_requests(obj: Obj) -> Iterable[Request]:
        # Another request finishing may unblock requests waiting for the same nodes.
        return [
            r
            for r in active_requests(obj)
            if (r.name, r.namespace) != (o.name(obj), o.namespace(obj))
        ]

    def children_on_node(obj: Obj) -> Iterable[Request]:
        node = (obj.get("spec") or {}).get("nodeName") if obj.get("kind") != "Node" else None
        name = str(node) if node else o.name(obj)
        return [Request(o.name(c), o.namespace(c)) for c in children.by_index(BY_NODE, name)]

    def draining_children(_: Obj) -> Iterable[Request]:
        return [
            Request(o.name(c), o.namespace(c))
            for c in children.objects(namespace)
            if _phase(c) == "DrainingPods"
        ]

    def children_of_request(obj: Obj) -> Iterable[Request]:
        uid = o.uid(obj)
        return [Request(o.name(c), o.namespace(c)) for c in children.by_index(BY_OWNER, uid)]

    request_controller = (
        Controller(
            "cyclenoderequest",
            request_reconciler,
            max_concurrent_reconciles=settings.request_workers,
        )
        .for_(requests)
        .owns(children)
        .watches(nodes, _tolerant(active_requests), update_predicate=node_changed)
        .watches(nodegroups, _tolerant(active_requests))
        .watches(requests, _tolerant(waiting_requests), update_predicate=phase_or_deletion_changed)
    )
    child_controller = (
        Controller(
            NODE_CONTROLLER,
            child_reconciler,
            max_concurrent_reconciles=settings.node_workers,
        )
        .for_(children)
        .watches(pods, _tolerant(children_on_node), update_predicate=pod_changed)
        .watches(nodes, _tolerant(children_on_node), update_predicate=node_changed)
        .watches(pdbs, _tolerant(draining_children))
        .watches(
            requests, _tolerant(children_of_request), update_predicate=phase_or_deletion_changed
        )
    )
    cloud.on_change = request_controller.queue.add
    manager.add(request_controller, child_controller)
    manager.add_runnable(cloud.run, name="cycling-cloud-poller", needs_leader=True)
    register_phase_gauge(lambda: requests.objects(namespace))
    return CyclingControllers(request_controller, child_controller, cloud, checks, providers)
