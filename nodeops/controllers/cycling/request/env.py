"""What every step of a request reads: its collaborators, its typed status, and the outcomes a
step may end with.

A step is a function of `(env, request, view, spec, ctx)`. It reads the cluster through the
informers in `RequestEnv`, the request's own record through `RequestView.typed` (the
`nodeops.api` model of the status) and other requests' through `status_of`, and writes the
record only through `env.status`. It ends by returning (done for
now), raising `Wait` (not ready: say why, look again later) or raising `Heal` (something went
wrong after nodes were touched).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import structlog

from nodeops.api import InvalidResource
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec, CycleNodeRequestStatus
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.checks import CheckRunner
from nodeops.controllers.cycling.cloud import CloudWatcher, Providers
from nodeops.controllers.cycling.inventory import Inventory, node_ip, provider_id
from nodeops.controllers.cycling.keys import SELECTED_LABEL
from nodeops.controllers.cycling.metrics import FAILURES
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.request.indexes import (
    ACTIVE,
    BY_OWNER_STATE,
    BY_QUEUED_FOR,
    BY_SELECTED_FOR,
    BY_STATE,
    BY_UNTAINTED_FOR,
    in_namespace,
    owner_uid,
    phase_of,
    terminal_pod_moves,
)
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.status import StatusWriter, View, timestamp
from nodeops.controllers.kit import Clock, EventSink
from nodeops.kube import Informer, Request
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.providers.base import NodeGroup, NodeGroups, ProviderError

__all__ = [
    "BY_NODE",
    "BY_OWNER",
    "BY_PROVIDER_ID",
    "Children",
    "Heal",
    "RequestEnv",
    "RequestView",
    "Wait",
    "child_name",
    "cnr_node",
    "each",
    "node_dicts",
    "phase_of",
    "status_of",
]

log = structlog.get_logger("nodeops.controllers.cycling.request")

Obj = dict[str, Any]

# Indexes the reconcilers ask their informers for.
BY_OWNER = "cycling-owner"
BY_PROVIDER_ID = "cycling-provider-id"
BY_NODE = "cycling-node"


def child_name(request: str, node: str) -> str:
    """`<request>-<node>` as Cyclops names children, hashed down when too long for a name."""
    name = f"{request}-{node}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: 253 - 11]}-{digest}"


def cnr_node(node: Mapping[str, Any], group: str) -> CycleNodeRequestNode:
    """The record of a node the request works on: enough to act on it after it is gone."""
    return CycleNodeRequestNode.model_validate(
        {
            "name": o.name(node),
            "providerId": provider_id(node),
            "nodeGroupName": group,
            "privateIp": node_ip(node) or None,
        }
    )


def node_dicts(nodes: Iterable[CycleNodeRequestNode]) -> list[Obj] | None:
    """Node records in their wire form; None (the field removed) when there are none."""
    return [n.to_dict() for n in nodes] or None


_PARSED: dict[tuple[str, str], CycleNodeRequestStatus] = {}
_PARSED_MAX = 512


def status_of(request: Mapping[str, Any]) -> CycleNodeRequestStatus:
    """Another request's status (read from the cache), through the model.

    Parsed once per version of the object: a step that looks at every other request's claims
    for every node it considers does not parse the same status again each time.
    """
    key = (o.uid(request), str(o.meta(request).get("resourceVersion") or ""))
    found = _PARSED.get(key)
    if found is None:
        found = CycleNodeRequestStatus.model_validate(request.get("status") or {})
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = found
    return found


@dataclass
class RequestView(View):
    """A request as a reconcile sees it, its status read through `CycleNodeRequestStatus`.

    The model is parsed once per status written (the writer replaces `status` on every
    commit), so a step reads typed fields without paying for a parse on each access.
    """

    _typed: CycleNodeRequestStatus | None = field(default=None, init=False, repr=False)
    _typed_of: Obj | None = field(default=None, init=False, repr=False)

    @property
    def typed(self) -> CycleNodeRequestStatus:
        if self._typed is None or self._typed_of is not self.status:
            self._typed = CycleNodeRequestStatus.model_validate(self.status)
            self._typed_of = self.status
        return self._typed

    @property
    def current_nodes(self) -> list[CycleNodeRequestNode]:
        return list(self.typed.current_nodes or ())

    @property
    def total(self) -> int:
        """Nodes selected for replacement, as selection recorded it (or, in a status an
        earlier release wrote, as many as it listed)."""
        if self.typed.progress is not None:
            return self.typed.progress.total
        return len(self.typed.nodes_to_terminate or ())


class Children:
    """The CycleNodeStatuses of one request, by what they tell the request.

    Read through the children's indexes: a request keeps its children until it ends, and
    all of them read at each reconcile made its cost grow with the roll. Only the children
    still working, and the failed ones (a failure ends the batch), are read; the successful
    ones are counted.
    """

    def __init__(self, informer: Informer, owner: str) -> None:
        # Everything counted is read here, at once, so the counts agree with each other: a
        # child that finishes while a step awaits is not both working and finished.
        self._informer = informer
        self._owner = owner
        self.active: list[Obj] = informer.by_index(BY_OWNER_STATE, f"{owner}/{ACTIVE}")
        self.failed: list[Obj] = informer.by_index(BY_OWNER_STATE, f"{owner}/Failed")
        self.successful = len(informer.index_keys(BY_OWNER_STATE, f"{owner}/Successful"))
        self._finished_moves = terminal_pod_moves(informer, owner)

    def pod_moves(self) -> int:
        """The pods every child had to move off its node (`podsToMove`), summed."""
        working = sum(int((c.get("status") or {}).get("podsToMove") or 0) for c in self.active)
        return working + self._finished_moves

    def for_node(self, node: str) -> Obj | None:
        """The request's child for `node`, in whatever phase."""
        for c in self._informer.by_index(BY_NODE, node):
            if owner_uid(c) == [self._owner]:
                return c
        return None

    def failure_message(self) -> str:
        parts = [
            f"{(c.get('spec') or {}).get('nodeName')}: "
            f"{(c.get('status') or {}).get('message') or 'failed'}"
            for c in self.failed[:5]
        ]
        return f"{len(self.failed)} nodes failed: " + "; ".join(parts)


T = TypeVar("T")
R = TypeVar("R")

_PARALLEL = 32
"""Writes about different nodes a phase makes at once: a batch of 20 nodes takes one round
trip's time instead of twenty."""


async def each(items: Iterable[T], fn: Callable[[T], Awaitable[R]]) -> list[R]:
    """`fn` on every item, at most `_PARALLEL` at once; every item is tried before the first
    failure (the earliest by item order) is raised, so one bad node does not hold up the rest."""
    sem = asyncio.Semaphore(_PARALLEL)

    async def one(item: T) -> R:
        async with sem:
            return await fn(item)

    results = await asyncio.gather(*(one(i) for i in items), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


class Wait(Exception):
    """Not ready to move on: say why (in status) and look again after `after` cluster seconds."""

    def __init__(self, message: str, after: float | None = None, reason: str = "Waiting") -> None:
        super().__init__(message)
        self.message = message
        self.after = after
        self.reason = reason


class Heal(Exception):
    """Something went wrong after nodes were touched: put them back (Healing), then Failed."""

    def __init__(self, message: str, reason: str = "Failed") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass
class RequestEnv:
    """The request controller's collaborators, and the reads every step shares."""

    client: Client
    requests: Informer
    children: Informer
    nodes: Informer
    pods: Informer
    nodegroups: Informer
    cloud: CloudWatcher
    providers: Providers
    checks: CheckRunner
    events: EventSink
    """Where the request's Events go (the kit's null sink when the manager records none)."""
    settings: CyclingSettings
    time: Clock
    """The manager's one clock: cluster time, scaled on a simulated cluster."""
    notifier: Notifier | None = None
    status: StatusWriter = field(init=False)
    child_status: StatusWriter = field(init=False)
    batch_lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    """Picking a batch (or claiming nodes) reads every request's nodes in replacement and then
    writes this request's: one at a time, so two requests never both take the last of a
    budget or both claim a node."""
    _born: dict[str, datetime] = field(init=False, default_factory=dict)
    """When the first Node of each instance (by provider ID, which no other instance has)
    registered: `new_nodes` skips the earlier batches' replacements without reading them."""
    _settled: dict[tuple[str, str], tuple[datetime | None, set[str]]] = field(
        init=False, default_factory=dict
    )
    """Per request, the provider IDs `new_nodes` found old since the batch's `born_after`."""
    _inventories: dict[tuple[str, tuple[str, ...]], tuple[tuple[NodeGroup, ...], Inventory]] = (
        field(init=False, default_factory=dict)
    )
    """The last index built per provider and groups, with the group objects it was built from:
    the snapshot keeps a group's object while it does not change, and a scale-up reconciles
    many times per batch."""

    def __post_init__(self) -> None:
        notifier = self.notifier
        self.status = StatusWriter(
            self.client,
            CYCLENODEREQUESTS,
            self.events,
            self.time,
            on_transition=notifier.phase if notifier is not None else None,
        )
        self.child_status = StatusWriter(self.client, CYCLENODESTATUSES, self.events, self.time)

    # ---------------------------------------------------------------- the cluster

    def children_of(self, view: View) -> Children:
        return Children(self.children, o.uid(view.obj))

    def unfinished_requests(self, namespace: str) -> list[Obj]:
        """The requests of the namespace whose phase is not terminal (none yet included)."""
        keys = in_namespace(self.requests.index_keys(BY_STATE, ACTIVE), namespace)
        return [r for r in map(self.requests.get_by_key, keys) if r is not None]

    def active_children(self, request: Mapping[str, Any]) -> list[Obj]:
        """The CycleNodeStatuses of `request` that have not finished."""
        return self.children.by_index(BY_OWNER_STATE, f"{o.uid(request)}/{ACTIVE}")

    def node(self, name: str) -> Obj | None:
        return self.nodes.get(name)

    def node_by_pid(self, pid: str) -> Obj | None:
        found = self.nodes.by_index(BY_PROVIDER_ID, pid) if pid else []
        return found[0] if found else None

    def queued(self, view: RequestView, current: Iterable[str] | None = None) -> list[str]:
        """The names of the nodes still to be replaced: selected by this request, not in the
        batch (`current`, else the status's), not handed to a CycleNodeStatus. Read from an
        index, so counting them decodes no node."""
        batch = set(current) if current is not None else {e.name for e in view.current_nodes}
        return [k for k in self.nodes.index_keys(BY_QUEUED_FOR, view.name) if k not in batch]

    def forget(self, request: Request) -> None:
        """Drop what is kept for a request that ended or went: the cloud's interest in it and
        the instances `new_nodes` found old for it."""
        self.cloud.forget(request)
        self._settled.pop((request.namespace or "", request.name), None)

    def queued_count(self, view: RequestView, current: Iterable[str] | None = None) -> int:
        """`len(queued(...))`, counted on the index: the progress of every reconcile asks."""
        batch = current if current is not None else (e.name for e in view.current_nodes)
        return self.nodes.index_count(BY_QUEUED_FOR, view.name, excluding=batch)

    def untainted(self, view: RequestView) -> list[str]:
        """The names of the queue's nodes (the batch aside) that lack the request's taint."""
        batch = {e.name for e in view.current_nodes}
        return [k for k in self.nodes.index_keys(BY_UNTAINTED_FOR, view.name) if k not in batch]

    def selected(self, view: RequestView) -> list[Obj]:
        """Every node still labelled as selected by this request, in whatever state."""
        return self.nodes.by_index(BY_SELECTED_FOR, view.name)

    def new_nodes(
        self,
        view: RequestView,
        inventory: Inventory,
        groups: Iterable[str],
        *,
        skip: Collection[str] = (),
        born_after: datetime | None = None,
    ) -> list[tuple[Obj, str]]:
        """Nodes of the groups' instances that are not being replaced: the replacements (and
        other nodes not selected), with their group; without those named in `skip`, and with
        `born_after` only the instances whose first Node registered since then.

        Called at every scale-up reconcile: the names come from indexes and only the nodes
        that may be the answer are read, not every node of the groups."""
        batch = {e.name for e in view.current_nodes}
        mine = set(self.nodes.index_keys(BY_SELECTED_FOR, view.name))
        # With `born_after`, an instance found to be old (its node registered before, or it is
        # one this request replaces) stays old for the rest of the batch: the next calls skip
        # it in one set difference instead of looking at every instance of the groups again.
        settled: set[str] = set()
        if born_after is not None:
            key = (view.namespace, view.name)
            since, settled = self._settled.get(key, (None, settled))
            if since != born_after:
                settled = set()
            self._settled[key] = (born_after, settled)
        members = inventory.by_provider_id_in(groups)
        out = []
        for pid in [pid for pid in members if pid not in settled]:  # in the cloud's order
            member = members[pid]
            names = self.nodes.index_keys(BY_PROVIDER_ID, pid) if pid else []
            if not names or names[0] in skip:
                continue
            if names[0] in batch or names[0] in mine:
                if born_after is not None:
                    settled.add(pid)
                continue
            born = self._born.get(pid)
            if born is not None and born_after is not None and born < born_after:
                settled.add(pid)
                continue
            node = self.nodes.get(names[0])
            if node is None or o.labels(node).get(SELECTED_LABEL) == view.name:
                continue
            created = o.parse_time(o.meta(node).get("creationTimestamp"))
            if created is not None:
                self._born.setdefault(pid, created)
            out.append((node, member.group))
        return out

    def active_requests(self, view: View) -> list[Obj]:
        """The other requests of the namespace that have started and not ended."""
        return [
            r
            for r in self.unfinished_requests(view.namespace)
            if o.uid(r) != o.uid(view.obj) and phase_of(r)
        ]

    def claimed_elsewhere(self, view: View, node: str) -> bool:
        """Whether another request's batch or CycleNodeStatus is working on `node`."""
        for other in self.active_requests(view):
            if any(n.name == node for n in status_of(other).current_nodes or ()):
                return True
            for child in self.active_children(other):
                if (child.get("spec") or {}).get("nodeName") == node:
                    return True
        return False

    def event(self, view: View, type_: str, reason: str, note: str) -> None:
        self.events.event(view.obj, type_, reason, "Cycle", note)
        log.info(reason, request=o.ref(view.obj), note=note)

    async def fail(self, view: View, message: str, reason: str) -> None:
        """Failed at once: nothing was touched yet, so there is nothing to heal."""
        FAILURES.labels("CycleNodeRequest", reason).inc()
        await self.status.commit(
            view,
            {"finishedTimestamp": timestamp(self.time.now())},
            phase="Failed",
            reason=reason,
            message=message,
            warning=True,
            condition=("Ready", "False", reason, message[:32768]),
        )

    # ---------------------------------------------------------------- the cloud

    def provider(self, spec: CycleNodeRequestSpec) -> tuple[str, NodeGroups]:
        try:
            name = self.providers.name(spec.provider)
            return name, self.providers.get(spec.provider)
        except ProviderError as e:
            raise InvalidResource("spec.provider", str(e)) from None
        except ValueError as e:  # unknown provider or a bad configuration block
            raise InvalidResource("spec.provider", str(e)) from None

    async def inventory(
        self,
        request: Request,
        spec: CycleNodeRequestSpec,
        *,
        fresh: bool = False,
        max_age: float | None = None,
    ) -> tuple[str, NodeGroups, Inventory]:
        name, provider = self.provider(spec)
        groups = spec.node_groups
        self.cloud.watch(request, name, groups)
        if max_age is None:
            max_age = 0.0 if fresh else self.settings.cloud_poll_interval * 2
        max_age = self.time.wall(max_age)
        try:
            described = await self.cloud.describe(name, groups, max_age=max_age)
        except ProviderError as e:
            if e.retryable:
                raise Wait(f"describing node groups: {e}", reason="CloudError") from None
            raise
        return name, provider, self._indexed(name, groups, described)

    def _indexed(
        self, provider: str, groups: Sequence[str], described: Mapping[str, NodeGroup]
    ) -> Inventory:
        key = (provider, tuple(groups))
        objects = tuple(described.values())
        cached = self._inventories.get(key)
        if (
            cached is not None
            and len(cached[0]) == len(objects)
            and all(a is b for a, b in zip(cached[0], objects, strict=True))
        ):
            return cached[1]
        inventory = Inventory(dict(described))
        self._inventories[key] = (objects, inventory)
        return inventory

    # ---------------------------------------------------------------- progress

    def progress(
        self,
        children: Children,
        view: RequestView,
        changes: Mapping[str, Any],
        *,
        total: int | None = None,
    ) -> Obj:
        """The progress fields of the status that `changes` makes from the view's: counts
        only. `total` is given once, by the selection; a node gone before its turn counts as
        cycled, as it is not there to replace any more."""
        status = view.typed
        if total is None:
            total = view.total
        batch = (
            [str(e.get("name")) for e in changes["currentNodes"] or ()]
            if "currentNodes" in changes
            else [e.name for e in status.current_nodes or ()]
        )
        queued = self.queued_count(view, batch)
        pods = changes["podsToMove"] if "podsToMove" in changes else status.pods_to_move
        active, failed = len(children.active), len(children.failed)
        cycled = max(0, total - queued - len(batch) - active - failed)
        moves = children.pod_moves()
        out: Obj = {
            "progress": {
                "total": total,
                "cycled": cycled,
                "inProgress": len(batch) + active,
                "failed": failed,
                "queued": queued,
            },
            "numNodesCycled": cycled,
            "activeChildren": active,
            "podMoves": moves,
        }
        if pods:
            out["podMovesPerPod"] = round(moves / pods, 4)
        return out

    async def commit_progress(
        self, view: RequestView, children: Children, changes: Mapping[str, Any], **kw: Any
    ) -> None:
        merged = dict(changes)
        merged.update(self.progress(children, view, changes))
        await self.status.commit(view, merged, **kw)
