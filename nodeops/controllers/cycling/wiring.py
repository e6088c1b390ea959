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

from nodeops.controllers import SetupError
from nodeops.controllers.cycling.checks import CheckRunner
from nodeops.controllers.cycling.cloud import CloudWatcher, Providers
from nodeops.controllers.cycling.cns import CycleNodeStatusReconciler
from nodeops.controllers.cycling.metrics import register_phase_gauge
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.request import (
    BY_NODE,
    BY_OWNER,
    BY_PROVIDER_ID,
    CycleNodeRequestReconciler,
)
from nodeops.controllers.cycling.request.indexes import (
    ACTIVE,
    BY_ANNOTATED_FOR,
    BY_ANTI_AFFINITY,
    BY_LABEL,
    BY_OWNER_MOVES,
    BY_OWNER_STATE,
    BY_QUEUED_FOR,
    BY_SELECTED_FOR,
    BY_STATE,
    BY_UNBOUND,
    BY_UNTAINTED_FOR,
    annotated_for,
    anti_affinity,
    in_namespace,
    label_pairs,
    owner_moves,
    owner_state,
    owner_uid,
    phase_of,
    queued_for,
    requests_of,
    selected_for,
    spec_node,
    states,
    unbound,
    untainted_for,
)
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES, NODEGROUPS
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.controllers.kit import (
    Channel,
    Drainers,
    clock_at,
    more_than_notes_changed,
    node_changed,
    to_request,
    use_clock,
)
from nodeops.kube import Controller, Manager, NotSynced, Request
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES, PDBS, PODS

__all__ = ["CyclingControllers", "install", "node_changed"]

Obj = Mapping[str, Any]


# The node controller's name, also the label of its drains' metrics.
NODE_CONTROLLER = "cyclenodestatus"


def _provider_id(obj: Obj) -> list[str]:
    pid = (obj.get("spec") or {}).get("providerID")
    return [str(pid)] if pid else []


def _ready(obj: Obj) -> str | None:
    cond = o.condition(obj, "Ready")
    return None if cond is None else str(cond.get("status"))


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
    deletion = o.meta(old).get("deletionTimestamp") != o.meta(new).get("deletionTimestamp")
    return phase_of(old) != phase_of(new) or deletion


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
    try:
        if time is not None:
            time = use_clock(manager, time)
        else:
            time = clock_at(manager, settings.time_scale, settings.time_origin)
    except ValueError as exc:
        raise SetupError(f"--cycling-time-scale: {exc}") from None
    informers = manager.informers
    # Every event mapper and every count of children reads through an index: see
    # `request.indexes` for why nothing here may decode every object per event.
    requests = informers.informer(
        CYCLENODEREQUESTS, namespace=namespace, indexers={BY_STATE: states}
    )
    children = informers.informer(
        CYCLENODESTATUSES,
        namespace=namespace,
        indexers={
            BY_OWNER: owner_uid,
            BY_NODE: spec_node,
            BY_OWNER_STATE: owner_state,
            BY_OWNER_MOVES: owner_moves,
        },
    )
    nodes = informers.informer(
        NODES,
        indexers={
            BY_PROVIDER_ID: _provider_id,
            BY_ANNOTATED_FOR: annotated_for,
            BY_SELECTED_FOR: selected_for,
            BY_QUEUED_FOR: queued_for,
            BY_UNTAINTED_FOR: untainted_for,
        },
    )
    pods = informers.informer(
        PODS,
        indexers={
            BY_NODE: spec_node,
            BY_ANTI_AFFINITY: anti_affinity,
            BY_LABEL: label_pairs,
            BY_UNBOUND: unbound,
        },
    )
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
    drainers = Drainers.for_manager(manager, NODE_CONTROLLER)
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
        drainers=drainers,
    )

    def active_requests(_: Obj) -> Iterable[Request]:
        return requests_of(in_namespace(requests.index_keys(BY_STATE, ACTIVE), namespace))

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
        return requests_of(children.index_keys(BY_NODE, name))

    def children_held_by(pdb: Obj) -> Iterable[Request]:
        # Only the drains this budget held back: waking every draining child at every budget
        # change (each eviction changes one) cost a pass per node drained at once per eviction.
        # A child not yet past its first pass has a reconcile queued already.
        held = drainers.nodes_held_by(o.namespace(pdb), o.name(pdb))
        return requests_of([k for node in held for k in children.index_keys(BY_NODE, node)])

    def children_of_request(obj: Obj) -> Iterable[Request]:
        return requests_of(children.index_keys(BY_OWNER, o.uid(obj)))

    request_controller = (
        Controller(
            "cyclenoderequest",
            request_reconciler,
            max_concurrent_reconciles=settings.request_workers,
        )
        .for_(requests)
        # A child's drain notes are not the request's business; its phase and counts are.
        .owns(children, update_predicate=more_than_notes_changed)
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
        .for_(children, update_predicate=more_than_notes_changed)
        .watches(pods, _tolerant(children_on_node), update_predicate=pod_changed)
        .watches(nodes, _tolerant(children_on_node), update_predicate=node_changed)
        .watches(pdbs, _tolerant(children_held_by))
        .watches(
            requests, _tolerant(children_of_request), update_predicate=phase_or_deletion_changed
        )
    )
    cloud.on_change = Channel(request_controller, to_request).send
    manager.add(request_controller, child_controller)
    manager.add_runnable(cloud.run, name="cycling-cloud-poller", needs_leader=True)
    register_phase_gauge(lambda: requests.objects(namespace))
    return CyclingControllers(request_controller, child_controller, cloud, checks, providers)
