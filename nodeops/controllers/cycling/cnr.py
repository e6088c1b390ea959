"""The CycleNodeRequest reconciler: Cyclops's state machine, crash-safe at every step.

Each reconcile runs the step of the phase stored in status and ends by writing the next phase,
or by waiting for an event: a child CycleNodeStatus changing, a node becoming Ready, the cloud
poller seeing a node group change, or the one timer a phase needs (a timeout, a health check
retry, a budget window). The phases are Cyclops's:

    Pending -> Initialised -> ScalingUp -> CordoningNode -> WaitingTermination -> Initialised ...
    ... -> Successful                         any failure -> Healing -> Failed

What differs from Cyclops is what makes every step safe to crash in and to repeat:

- Intent before action. A batch's nodes get the finalizer and their origin group before their
  instances are detached, and the batch is written to `status.currentNodes` (with the phase
  ScalingUp) before the first detach call; ScalingUp detaches whatever of the batch is still
  attached, so a crash between the write and the calls loses nothing.
- Idempotent children. A CycleNodeStatus has a deterministic name; finding it already there is
  success.
- Healing touches only nodes no CycleNodeStatus is still working on, and waits for the working
  ones to finish before the request becomes Failed. Successful and Failed are terminal: their
  reconciles only clean up, never change the phase.
- Every irreversible call (detach; deleting a Node) is preceded by `ctx.ensure_may_act`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from nodeops.api import CycleNodeRequest, InvalidResource, NodeGroup
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.budgets import BudgetScope, Room, next_change, room
from nodeops.controllers.cycling.checks import CheckRunner, CheckTarget
from nodeops.controllers.cycling.cloud import CloudWatcher, Providers
from nodeops.controllers.cycling.fit import FitResult, check_fit, node_is_ready
from nodeops.controllers.cycling.inventory import Inventory, instance_id, node_ip, provider_id
from nodeops.controllers.cycling.keys import (
    ANNOTATION_MANAGED,
    CYCLOPS_NAME_LABEL,
    DISABLE_ANNOTATION_MANAGEMENT,
    NODE_FINALIZER,
    NODE_GROUP_ANNOTATION,
    REQUEST_FINALIZER,
    REQUEST_LABEL,
    TERMINATE_LABEL,
)
from nodeops.controllers.cycling.loadbalancers import targets_left_unserved
from nodeops.controllers.cycling.metrics import FAILURES
from nodeops.controllers.cycling.nodes import (
    NodeEdit,
    add_scale_down_disabled,
    both,
    clear_cycle_marks,
    cordon,
    edit_node,
    mark_for_detach,
    mark_terminating,
    remove_scale_down_disabled,
    set_cycle_taint,
)
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.pods import movable
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.status import StatusWriter, View, timestamp
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.kube import (
    Informer,
    ReconcileContext,
    Request,
    Result,
    errors,
)
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder
from nodeops.kube.resources import NODES
from nodeops.providers.base import Lifecycle, NodeGroups, ProviderError
from nodeops.providers.base import NodeGroup as CloudGroup

__all__ = ["CycleNodeRequestReconciler", "child_name", "cnr_node"]

log = structlog.get_logger(__name__)

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


def cnr_node(node: Mapping[str, Any], group: str) -> Obj:
    entry: Obj = {"name": o.name(node), "providerId": provider_id(node), "nodeGroupName": group}
    ip = node_ip(node)
    if ip:
        entry["privateIp"] = ip
    return entry


@dataclass
class _Children:
    all: list[Obj]

    @property
    def active(self) -> list[Obj]:
        return [c for c in self.all if _phase(c) not in TERMINAL_PHASES]

    @property
    def failed(self) -> list[Obj]:
        return [c for c in self.all if _phase(c) == "Failed"]

    @property
    def successful(self) -> list[Obj]:
        return [c for c in self.all if _phase(c) == "Successful"]

    def for_node(self, node: str) -> Obj | None:
        for c in self.all:
            if (c.get("spec") or {}).get("nodeName") == node:
                return c
        return None


def _phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


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


class _Wait(Exception):
    """Not ready to move on: say why (in status) and look again after `after` cluster seconds."""

    def __init__(self, message: str, after: float | None = None, reason: str = "Waiting") -> None:
        super().__init__(message)
        self.message = message
        self.after = after
        self.reason = reason


class _Heal(Exception):
    """Something went wrong after nodes were touched: put them back (Healing), then Failed."""

    def __init__(self, message: str, reason: str = "Failed") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


_CHAIN = 8
"""Phases one reconcile may go through before handing back to the queue."""


class CycleNodeRequestReconciler:
    def __init__(
        self,
        *,
        client: Client,
        requests: Informer,
        children: Informer,
        nodes: Informer,
        pods: Informer,
        nodegroups: Informer,
        cloud: CloudWatcher,
        providers: Providers,
        checks: CheckRunner,
        events: EventRecorder | None,
        settings: CyclingSettings,
        time: TimeBase,
        notifier: Notifier | None = None,
    ) -> None:
        self.client = client
        self.requests = requests
        self.children = children
        self.nodes = nodes
        self.pods = pods
        self.nodegroups = nodegroups
        self.cloud = cloud
        self.providers = providers
        self.checks = checks
        self.events = events
        self.settings = settings
        self.time = time
        self.notifier = notifier
        self.status = StatusWriter(
            client,
            CYCLENODEREQUESTS,
            events,
            time,
            on_transition=notifier.phase if notifier is not None else None,
        )
        self.child_status = StatusWriter(client, CYCLENODESTATUSES, events, time)
        # Picking a batch reads every request's nodes in replacement and then writes this
        # request's: one at a time, so two requests never both take the last of a budget.
        self._batch_lock = asyncio.Lock()
        self._handlers = {
            "": self._undefined,
            "Pending": self._pending,
            "Initialised": self._initialised,
            "ScalingUp": self._scaling_up,
            "CordoningNode": self._cordoning,
            "WaitingTermination": self._waiting_termination,
            "Healing": self._healing,
        }

    # ------------------------------------------------------------------ entry

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        obj = self.requests.get(request.name, request.namespace)
        if obj is None:
            self.cloud.forget(request)
            return None
        view = View(obj)
        if o.deletion_timestamp(obj) is not None:
            return await self._deleted(request, view, ctx)
        if view.phase in TERMINAL_PHASES:
            self.cloud.forget(request)
            return await self._terminal(view, ctx)
        try:
            parsed = CycleNodeRequest.parse_spec(obj)
        except InvalidResource as e:
            FAILURES.labels("CycleNodeRequest", "InvalidSpec").inc()
            await self.status.commit(
                view,
                {"finishedTimestamp": timestamp(self.time.now())},
                phase="Failed",
                reason="InvalidSpec",
                message=str(e),
                warning=True,
                condition=("Ready", "False", "InvalidSpec", str(e)),
            )
            return None
        spec = parsed.spec
        # A step that moves to another phase goes on with it at once (its status is written
        # first, so a crash in between resumes from the new phase), instead of waiting for its
        # own write to come back through the watch: a batch is not slowed by round trips.
        for _ in range(_CHAIN):
            phase = view.phase
            handler = self._handlers.get(phase)
            if handler is None:
                await self._fail(view, f"status.phase: unknown phase {phase!r}", "InvalidStatus")
                return None
            try:
                result = await handler(request, view, spec, ctx)
            except _Wait as wait:
                await self.status.commit(
                    view, condition=("Blocked", "True", wait.reason, wait.message[:32768])
                )
                after = wait.after if wait.after is not None else self.settings.check_interval
                ctx.log.debug(
                    "waiting", phase=phase, reason=wait.reason, message=wait.message, after=after
                )
                return Result(requeue_after=self.time.wall(after))
            except _Heal as heal:
                await self._to_healing(view, heal.message, heal.reason)
                return None
            if result is not None or view.phase == phase or view.phase in TERMINAL_PHASES:
                return result
        return None

    # ------------------------------------------------------------------ shared reads

    def _children_of(self, view: View) -> _Children:
        return _Children(self.children.by_index(BY_OWNER, o.uid(view.obj)))

    def _node(self, name: str) -> Obj | None:
        return self.nodes.get(name)

    def _node_by_pid(self, pid: str) -> Obj | None:
        found = self.nodes.by_index(BY_PROVIDER_ID, pid) if pid else []
        return found[0] if found else None

    def _provider(self, spec: CycleNodeRequestSpec) -> tuple[str, NodeGroups]:
        try:
            name = self.providers.name(spec.provider)
            return name, self.providers.get(spec.provider)
        except ProviderError as e:
            raise InvalidResource("spec.provider", str(e)) from None
        except ValueError as e:  # unknown provider or a bad configuration block
            raise InvalidResource("spec.provider", str(e)) from None

    async def _inventory(
        self,
        request: Request,
        spec: CycleNodeRequestSpec,
        *,
        fresh: bool = False,
        max_age: float | None = None,
    ) -> tuple[str, NodeGroups, Inventory]:
        name, provider = self._provider(spec)
        groups = spec.node_groups
        self.cloud.watch(request, name, groups)
        if max_age is None:
            max_age = 0.0 if fresh else self.settings.cloud_poll_interval * 2
        max_age = self.time.wall(max_age)
        try:
            described = await self.cloud.describe(name, groups, max_age=max_age)
        except ProviderError as e:
            if e.retryable:
                raise _Wait(f"describing node groups: {e}", reason="CloudError") from None
            raise
        return name, provider, Inventory(described)

    def _progress(self, view: View, children: _Children, status: Mapping[str, Any]) -> Obj:
        total = len(status.get("nodesToTerminate") or ())
        current = len(status.get("currentNodes") or ())
        available = len(status.get("nodesAvailable") or ())
        active, failed = len(children.active), len(children.failed)
        cycled = max(0, total - available - current - active - failed)
        moves = sum(int((c.get("status") or {}).get("podsToMove") or 0) for c in children.all)
        out: Obj = {
            "progress": {
                "total": total,
                "cycled": cycled,
                "inProgress": current + active,
                "failed": failed,
            },
            "numNodesCycled": cycled,
            "activeChildren": active,
            "podMoves": moves,
        }
        pods = status.get("podsToMove")
        if pods:
            out["podMovesPerPod"] = round(moves / pods, 4)
        return out

    # ------------------------------------------------------------------ Undefined

    async def _undefined(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        del request, spec, ctx
        if REQUEST_FINALIZER not in (o.meta(view.obj).get("finalizers") or ()):
            names = [*(o.meta(view.obj).get("finalizers") or ()), REQUEST_FINALIZER]
            view.obj = await self.client.patch(
                CYCLENODEREQUESTS,
                view.name,
                {
                    "metadata": {
                        "finalizers": names,
                        "resourceVersion": o.meta(view.obj).get("resourceVersion"),
                    }
                },
                view.namespace,
            )
        thread = None
        if self.notifier is not None:
            thread = await self.notifier.started(view)
        now = timestamp(self.time.now())
        await self.status.commit(
            view,
            {
                "startedTimestamp": now,
                "observedGeneration": o.meta(view.obj).get("generation"),
                "threadTimestamp": thread,
            },
            phase="Pending",
            message="",
            condition=("Ready", "False", "Cycling", "cycling has started"),
        )
        return None

    # ------------------------------------------------------------------ Pending

    async def _pending(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        now = self.time.now()
        if view.time("equilibriumWaitStarted") is None:
            await self.status.commit(view, {"equilibriumWaitStarted": timestamp(now)})
        try:
            provider_name, provider, inventory = await self._inventory(request, spec, fresh=True)
        except InvalidResource as e:
            await self._fail(view, str(e), "InvalidSpec")
            return None
        missing = [g for g in spec.node_groups if g not in inventory.groups]
        if missing:
            field = (
                "spec.nodeGroupName"
                if missing[0] == spec.node_group_name
                else f"spec.nodeGroupsList[{(spec.node_groups_list or []).index(missing[0])}]"
            )
            await self._fail(
                view,
                f"{field}: node group {missing[0]!r} not found in provider {provider_name}",
                "NodeGroupNotFound",
            )
            return None
        groups = set(spec.node_groups)
        selected = [n for n in self.nodes.objects() if spec.selector.matches(o.labels(n))]
        valid: list[tuple[Obj, str]] = []
        problems: list[str] = []
        for node in selected:
            member = inventory.member(node)
            if member is not None:
                if member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
                    problems.append(
                        f"instance {member.instance.id} of node {o.name(node)} is "
                        f"{member.instance.raw_state or member.instance.lifecycle_state}"
                    )
                valid.append((node, member.group))
                continue
            origin = o.annotations_of(node).get(NODE_GROUP_ANNOTATION)
            if origin in groups and not self._claimed_elsewhere(view, o.name(node)):
                problems.append(await self._repair_stray(view, node, origin, provider, ctx))
        for member in inventory.instances():
            known = self._node_by_pid(member.instance.provider_id)
            if known is None:
                problems.append(f"instance {member.instance.id} has no node yet")
            elif not node_is_ready(known):
                problems.append(
                    f"node {o.name(known)} of instance {member.instance.id} is not Ready"
                )
        if problems:
            self.cloud.invalidate(provider_name, groups)
            waited = self.time.since(view.time("equilibriumWaitStarted"))
            if waited > self.settings.equilibrium_wait_limit:
                raise _Heal(
                    "the cloud and the cluster did not agree within "
                    f"{self.settings.equilibrium_wait_limit:g}s: " + "; ".join(problems[:10]),
                    "NodeStateInvalid",
                )
            raise _Wait(
                "waiting for the cloud and the cluster to agree: " + "; ".join(problems[:10]),
                after=min(
                    self.settings.check_interval,
                    max(1.0, self.settings.equilibrium_wait_limit - waited),
                ),
                reason="NodeStateInvalid",
            )
        targets = valid
        if spec.node_names:
            by_name = {o.name(n): (n, g) for n, g in valid}
            skip = bool(
                spec.validation_options and spec.validation_options.skip_missing_named_nodes
            )
            targets = []
            for i, wanted in enumerate(spec.node_names):
                if wanted in by_name:
                    targets.append(by_name[wanted])
                elif skip:
                    self._event(
                        view,
                        "Warning",
                        "SkipMissingNamedNode",
                        f"node {wanted} skipped: not among the selected nodes of the node groups",
                    )
                else:
                    raise _Heal(
                        f"spec.nodeNames[{i}]: node {wanted!r} is not among the selected nodes "
                        "of the node groups",
                        "NamedNodeMissing",
                    )
            targets = list({o.name(n): (n, g) for n, g in targets}.values())
        health = await self._initial_health_checks(view, spec, valid)
        nodes = [cnr_node(n, g) for n, g in targets]
        concurrency = spec.cycle_settings.concurrency
        if concurrency <= 0:
            concurrency = max(1, len(nodes))
        pods = sum(
            1 for n, _ in targets for p in self.pods.by_index(BY_NODE, o.name(n)) if movable(p)
        )
        await self._remove_leftover_children(view)
        changes: Obj = {
            "provider": provider_name,
            "nodeGroups": spec.node_groups,
            "concurrency": concurrency,
            "nodesToTerminate": nodes,
            "nodesAvailable": nodes,
            "currentNodes": None,
            "podsToMove": pods,
            "selectedNodes": {n["name"]: True for n in nodes} or None,
        }
        if health is not None:
            changes["healthChecks"] = health
        changes.update(self._progress(view, self._children_of(view), {**view.status, **changes}))
        # Claiming nodes reads the other requests' claims and writes this one's: one request at
        # a time, so two requests never both claim a node.
        async with self._batch_lock:
            blocker = self._blocking_request(view, [o.name(n) for n, _ in targets])
            if blocker is not None:
                raise _Wait(blocker, after=self.settings.check_interval * 3, reason="NodesInUse")
            await self.status.commit(
                view,
                changes,
                phase="Initialised",
                message="",
                condition=("Blocked", "False", "Selected", f"{len(nodes)} nodes selected"),
            )
        if self.notifier is not None:
            await self.notifier.nodes_selected(view, [n["name"] for n in nodes])
        return None

    async def _repair_stray(
        self,
        view: View,
        node: Obj,
        origin: str,
        provider: NodeGroups,
        ctx: ReconcileContext,
    ) -> str:
        """A node we detached earlier that is in none of the groups: re-attach its instance, or
        remove the Node when the instance is gone."""
        iid = instance_id(node)
        name = o.name(node)
        if iid is None:
            return f"node {name} has no provider ID"
        try:
            ctx.ensure_may_act(f"re-attach {iid}")
            await provider.attach_instance(origin, iid)
        except ProviderError as e:
            if (
                e.code not in ("NotFound", "InvalidInstanceID.NotFound", "IncorrectInstanceState")
                or e.retryable
            ):
                return f"re-attaching {iid} of node {name} to {origin}: {e}"
            # The instance is gone (or terminating): the Node is an orphan we held back.
            others = [f for f in o.meta(node).get("finalizers") or () if f != NODE_FINALIZER]
            if others:
                return f"node {name} has no instance but finalizers {others} hold it"
            ctx.ensure_may_act(f"delete orphaned node {name}")
            await edit_node(self.client, node, clear_cycle_marks())
            try:
                await self.client.delete(NODES, name)
            except errors.NotFound:
                pass
            self._event(
                view, "Normal", "OrphanRemoved", f"removed node {name}: its instance {iid} is gone"
            )
            return f"removed orphaned node {name}"
        await edit_node(self.client, node, clear_cycle_marks())
        self._event(
            view, "Normal", "Reattached", f"re-attached instance {iid} of node {name} to {origin}"
        )
        return f"re-attached instance {iid} of node {name} to {origin}"

    async def _initial_health_checks(
        self, view: View, spec: CycleNodeRequestSpec, valid: Sequence[tuple[Obj, str]]
    ) -> Obj | None:
        if not spec.health_checks:
            return None
        out: Obj = {}
        failing: list[str] = []
        for node, group in valid:
            key = f"{provider_id(node)}/{o.name(node)}"
            if spec.skip_initial_health_checks:
                out[key] = {"skip": True}
                continue
            target = CheckTarget.of(node, group)
            results = []
            for check in spec.health_checks:
                outcome = await self.checks.health(check, target, view.namespace)
                results.append(outcome.ok)
                if not outcome.ok:
                    failing.append(outcome.detail)
            out[key] = {"skip": True, "checks": results}
        if failing:
            waited = self.time.since(view.time("equilibriumWaitStarted"))
            if waited > self.settings.equilibrium_wait_limit:
                raise _Heal(
                    f"initial health checks failed: {'; '.join(failing[:5])}", "HealthCheckFailed"
                )
            raise _Wait(
                f"initial health checks failing: {'; '.join(failing[:5])}",
                reason="HealthCheckFailing",
            )
        return out

    def _active_requests(self, view: View) -> list[Obj]:
        return [
            r
            for r in self.requests.objects(view.namespace)
            if o.uid(r) != o.uid(view.obj) and _phase(r) not in TERMINAL_PHASES and _phase(r)
        ]

    def _blocking_request(self, view: View, names: Iterable[str]) -> str | None:
        wanted = set(names)
        for other in self._active_requests(view):
            theirs = {
                n.get("name") for n in (other.get("status") or {}).get("nodesToTerminate") or ()
            }
            overlap = wanted & theirs
            if overlap:
                return (
                    f"waiting for CycleNodeRequest {o.name(other)}, which cycles "
                    f"{sorted(overlap)[0]}"
                    + (
                        f" and {len(overlap) - 1} more of the selected nodes"
                        if len(overlap) > 1
                        else ""
                    )
                )
        return None

    def _claimed_elsewhere(self, view: View, node: str) -> bool:
        for other in self._active_requests(view):
            status = other.get("status") or {}
            if any(n.get("name") == node for n in status.get("currentNodes") or ()):
                return True
            for child in self.children.by_index(BY_OWNER, o.uid(other)):
                if (child.get("spec") or {}).get("nodeName") == node and _phase(
                    child
                ) not in TERMINAL_PHASES:
                    return True
        return False

    async def _remove_leftover_children(self, view: View) -> None:
        """CycleNodeStatuses labelled with this request's name but owned by an earlier request of
        the same name (Cyclops deletes them too)."""
        for child in self.children.objects(view.namespace):
            if o.labels(child).get(REQUEST_LABEL) != view.name:
                continue
            owner = o.controller_ref(child)
            if owner is not None and owner.get("uid") == o.uid(view.obj):
                continue
            try:
                await self.client.delete(CYCLENODESTATUSES, o.name(child), view.namespace)
            except errors.NotFound:
                pass

    # ------------------------------------------------------------------ Initialised

    async def _initialised(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        children = self._children_of(view)
        if children.failed:
            raise _Heal(self._failed_children_message(children), "NodeFailed")
        available = view.nodes("nodesAvailable")
        current = view.nodes("currentNodes")
        # Nodes that are gone before their turn were replaced by someone else: nothing to do.
        still = []
        for entry in available:
            if self._node(entry["name"]) is None:
                self._event(
                    view,
                    "Normal",
                    "NodeGone",
                    f"node {entry['name']} is gone before its turn; skipped",
                )
            else:
                still.append(entry)
        if not still and not current:
            if children.active:
                await self._commit_progress(
                    view, children, {"nodesAvailable": None}, phase="WaitingTermination"
                )
                return None
            return await self._succeed(view, children)
        provider_name, provider, inventory = await self._inventory(request, spec, fresh=True)
        concurrency = int(view.status.get("concurrency") or spec.cycle_settings.concurrency or 1)
        async with self._batch_lock:
            capacity = concurrency - len(children.active) - len(current)
            budget = await self._budget_room(view, spec, inventory)
            allowed = capacity if budget.nodes is None else min(capacity, budget.nodes)
            batch = self._pick(view, still, inventory, allowed)
            if not batch:
                # Stay here until a child finishes, a budget window opens or a node becomes
                # eligible (each wakes this request); going back to WaitingTermination would
                # flip-flop between the two phases (Cyclops issue #10).
                busy = len(children.active) + len(current)
                if budget.nodes is not None and budget.nodes <= 0:
                    change = next_change(self._budget_scopes(view, spec), self.time.now())
                    after = (change - self.time.now()).total_seconds() + 1 if change else None
                    raise _Wait(
                        f"disruption budget: {budget.reason}", after=after, reason="BudgetExhausted"
                    )
                if busy:
                    raise _Wait(
                        f"{busy} nodes in progress; the next batch starts when they finish",
                        after=self.settings.check_interval * 6,
                        reason="BatchInProgress",
                    )
                raise _Wait(
                    "no selected node can start now (not Ready, or its instance is not in service)",
                    reason="NoEligibleNode",
                )
            await self._load_balancers_ready(provider, batch)
            # Intent: the finalizer and the origin group go on each node, then the batch goes into
            # status with the phase, and only then are the instances detached.

            async def mark(entry: Obj) -> None:
                node = self._node(entry["name"])
                if node is not None:
                    await edit_node(self.client, node, mark_for_detach(entry["nodeGroupName"]))

            await each(batch, mark)
            picked = {e["name"] for e in batch}
            changes: Obj = {
                "currentNodes": current + batch,
                "nodesAvailable": [e for e in still if e["name"] not in picked] or None,
                "scaleUpStarted": timestamp(self.time.now()),
                "annotatedNodes": None,
            }
            changes.update(self._progress(view, children, {**view.status, **changes}))
            await self.status.commit(
                view,
                changes,
                phase="ScalingUp",
                message=f"detaching {len(batch)} nodes: {', '.join(sorted(picked)[:10])}",
                condition=("Blocked", "False", "Detaching", f"batch of {len(batch)} nodes"),
            )
        await self._detach(view, provider, current + batch, inventory, ctx)
        self.cloud.invalidate(provider_name, spec.node_groups)
        # The nodes still to be replaced are tainted while the batch scales up: no pod moves
        # before the replacements are up, and the first batch does not wait for it.
        await self._taint_pending(view, spec, view.nodes("nodesAvailable"))
        return None

    async def _load_balancers_ready(self, provider: NodeGroups, batch: Sequence[Obj]) -> None:
        """Wait while the batch would leave a load balancer with no healthy target."""
        if not self.settings.wait_for_load_balancers:
            return
        leaving = {instance_id(e.get("providerId") or "") for e in batch} - {None}
        try:
            unserved = await targets_left_unserved(provider, {str(i) for i in leaving})
        except ProviderError as e:
            hint = "" if e.retryable else " (--cycling-wait-for-load-balancers=false skips this)"
            raise _Wait(
                f"checking the batch's load balancers: {e}{hint}", reason="CloudError"
            ) from None
        if unserved:
            raise _Wait(
                "the batch would leave load balancers with no healthy target: "
                + "; ".join(unserved[:5]),
                reason="LoadBalancerNotReady",
            )

    def _pick(
        self, view: View, available: Sequence[Obj], inventory: Inventory, n: int
    ) -> list[Obj]:
        """Up to `n` nodes that can start: Ready first, their instance in service, not in use."""
        if n <= 0:
            return []
        ready: list[Obj] = []
        not_ready: list[Obj] = []
        for entry in available:
            node = self._node(entry["name"])
            if node is None or o.deletion_timestamp(node) is not None:
                continue
            member = inventory.member(node)
            if member is None or member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
                continue
            label = o.labels(node).get(TERMINATE_LABEL)
            if label is not None and label != view.name:
                continue
            if self._claimed_elsewhere(view, entry["name"]):
                continue
            (ready if node_is_ready(node) else not_ready).append(
                {**entry, "nodeGroupName": member.group}
            )
        # NotReady nodes are replaced too, once no Ready one is left to start with.
        return (ready or not_ready)[:n]

    async def _detach(
        self,
        view: View,
        provider: NodeGroups,
        entries: Sequence[Obj],
        inventory: Inventory,
        ctx: ReconcileContext,
    ) -> None:
        """Detach the entries' instances that are still in service in their group."""

        async def detach(entry: Obj) -> None:
            iid = instance_id(entry.get("providerId") or "")
            member = inventory.member_by_instance(iid)
            if iid is None or member is None:
                return  # already out of the group (detached, or gone)
            if member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
                return
            ctx.ensure_may_act(f"detach {iid} from {member.group}")
            try:
                await provider.detach_instance(member.group, iid)
            except ProviderError as e:
                if e.retryable:
                    raise _Wait(f"detaching {iid}: {e}", reason="CloudError") from None
                raise _Heal(
                    f"detaching {iid} of node {entry['name']} from {member.group}: {e}",
                    "DetachFailed",
                ) from None
            log.info(
                "detached",
                request=o.ref(view.obj),
                node=entry["name"],
                instance=iid,
                group=member.group,
            )

        await each(entries, detach)

    async def _taint_pending(
        self, view: View, spec: CycleNodeRequestSpec, entries: Sequence[Obj]
    ) -> None:
        effect = spec.cycle_settings.pending_node_taint
        if effect == "Off":
            return

        async def taint(entry: Obj) -> None:
            node = self._node(entry["name"])
            if node is not None and o.deletion_timestamp(node) is None:
                await edit_node(self.client, node, set_cycle_taint(view.name, effect))

        await each(entries, taint)

    def _budget_scopes(self, view: View, spec: CycleNodeRequestSpec) -> list[BudgetScope]:
        groups = frozenset(spec.node_groups)
        scopes = []
        if spec.budgets:
            scopes.append(BudgetScope(f"CycleNodeRequest {view.name}", groups, tuple(spec.budgets)))
        for obj in self.nodegroups.objects():
            try:
                ng = NodeGroup.parse_spec(obj)
            except InvalidResource:
                continue
            theirs = frozenset(ng.spec.node_groups)
            if ng.spec.budgets and theirs & groups:
                scopes.append(BudgetScope(f"NodeGroup {ng.name}", theirs, tuple(ng.spec.budgets)))
        return scopes

    async def _budget_room(
        self, view: View, spec: CycleNodeRequestSpec, inventory: Inventory
    ) -> Room:
        scopes = self._budget_scopes(view, spec)
        if not scopes:
            return room((), {}, {}, self.time.now())
        sizes = {name: g.desired for name, g in inventory.groups.items()}
        extra = sorted({g for s in scopes for g in s.groups} - set(sizes))
        if extra:
            provider_name = self.providers.name(spec.provider)
            try:
                more = await self.cloud.describe(
                    provider_name,
                    extra,
                    max_age=self.time.wall(self.settings.cloud_poll_interval * 6),
                )
            except ProviderError:
                more = {}
            sizes.update({name: g.desired for name, g in more.items()})
        return room(scopes, self._in_replacement(view), sizes, self.time.now())

    def _in_replacement(self, view: View) -> dict[str, set[str]]:
        """Nodes being replaced by any request (this one included), by cloud node group."""
        busy: dict[str, set[str]] = {}
        requests = [
            r for r in self.requests.objects(view.namespace) if _phase(r) not in TERMINAL_PHASES
        ]
        for r in requests:
            status = r.get("status") or {}
            for entry in status.get("currentNodes") or ():
                busy.setdefault(str(entry.get("nodeGroupName")), set()).add(str(entry.get("name")))
            for child in self.children.by_index(BY_OWNER, o.uid(r)):
                if _phase(child) in TERMINAL_PHASES:
                    continue
                spec = child.get("spec") or {}
                group = spec.get("nodeGroupName") or (
                    (child.get("status") or {}).get("currentNode") or {}
                ).get("nodeGroupName")
                busy.setdefault(str(group), set()).add(str(spec.get("nodeName")))
        return busy

    # ------------------------------------------------------------------ ScalingUp

    async def _scaling_up(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        children = self._children_of(view)
        if children.failed:
            raise _Heal(self._failed_children_message(children), "NodeFailed")
        _, provider, inventory = await self._inventory(request, spec)
        current = view.nodes("currentNodes")
        await self._detach(view, provider, current, inventory, ctx)
        await self._taint_pending(view, spec, view.nodes("nodesAvailable"))
        # A batch node that vanished (node and instance gone) needs nothing more from us.
        kept = []
        for entry in current:
            gone = (
                self._node(entry["name"]) is None
                and inventory.member_by_instance(instance_id(entry.get("providerId") or "")) is None
            )
            if gone:
                self._event(
                    view, "Normal", "NodeGone", f"node {entry['name']} went away during scale-up"
                )
            else:
                kept.append(entry)
        if len(kept) != len(current):
            await self._commit_progress(view, children, {"currentNodes": kept or None})
            current = kept
        started = view.time("scaleUpStarted")
        elapsed = self.time.since(started)
        if elapsed > self.settings.scale_up_limit:
            raise _Heal(
                f"scale-up did not finish within {self.settings.scale_up_limit:g}s: "
                + self._scale_up_state(spec, inventory, current),
                "ScaleUpTimeout",
            )
        if elapsed < self.settings.scale_up_wait:
            raise _Wait(
                "waiting the minimum scale-up time",
                after=self.settings.scale_up_wait - elapsed,
                reason="ScalingUp",
            )
        waiting = self._scale_up_state(spec, inventory, current)
        catch_up = max(0.5, min(self.settings.cloud_poll_interval / 5, 2.0))
        if waiting:
            # Nodes change under watch, instances only when polled: before waiting longer, look
            # at the cloud again unless it was looked at a moment ago.
            _, _, inventory = await self._inventory(request, spec, max_age=catch_up)
            waiting = self._scale_up_state(spec, inventory, current)
        # Replacements get their annotation as they come up, while the slowest still boots:
        # the batch does not wait for those writes at its end.
        await self._annotate_new_nodes(view, spec, inventory)
        if waiting:
            after = self._scale_up_recheck(elapsed)
            if self._cloud_behind_nodes(spec, inventory, current):
                # A replacement's Node is up while the cloud still calls its instance pending:
                # clouds flip that within seconds, and no event says so. Look again soon
                # rather than at the next poll.
                after = min(after, catch_up)
            raise _Wait(f"scaling up: {waiting}", after=after, reason="ScalingUp")
        health = await self._new_node_health(view, spec, inventory)
        if health:
            raise _Wait(health, after=self.settings.check_interval, reason="HealthCheckFailing")
        if spec.cycle_settings.wait_for_capacity:
            fit = self._fit(view, spec, children, current)
            if not fit.fits:
                raise _Wait(
                    f"waiting for capacity: {fit.message}",
                    after=self._scale_up_recheck(elapsed),
                    reason="InsufficientCapacity",
                )
        await self._commit_progress(view, children, {}, phase="CordoningNode", message="")
        return None

    def _scale_up_recheck(self, elapsed: float) -> float:
        remaining = self.settings.scale_up_limit - elapsed
        return max(1.0, min(self.settings.check_interval * 3, remaining + 1))

    @staticmethod
    def _batch_groups(
        spec: CycleNodeRequestSpec, inventory: Inventory, current: Sequence[Obj]
    ) -> list[tuple[str, CloudGroup]]:
        """The described cloud groups that the batch's nodes come from, in the spec's order."""
        names = {e["nodeGroupName"] for e in current}
        return [
            (name, group)
            for name in spec.node_groups
            if name in names and (group := inventory.groups.get(name)) is not None
        ]

    def _cloud_behind_nodes(
        self, spec: CycleNodeRequestSpec, inventory: Inventory, current: Sequence[Obj]
    ) -> bool:
        """Whether an instance of the batch's groups that the cloud has not put in service yet
        already has a Ready Node (a kubelet registers as soon as the machine is up; the cloud
        may mark the instance in service only after its own checks or lifecycle hooks)."""
        for _, group in self._batch_groups(spec, inventory, current):
            for inst in group.instances:
                if inst.lifecycle_state is not Lifecycle.PENDING:
                    continue
                node = self._node_by_pid(inst.provider_id)
                if node is not None and node_is_ready(node):
                    return True
        return False

    def _scale_up_state(
        self, spec: CycleNodeRequestSpec, inventory: Inventory, current: Sequence[Obj]
    ) -> str:
        """What the replacements still wait for ("" when they are in service and Ready)."""
        problems: list[str] = []
        for entry in current:
            member = inventory.member_by_instance(instance_id(entry.get("providerId") or ""))
            if member is not None:
                problems.append(
                    f"instance of {entry['name']} still in {member.group} ({member.instance.raw_state or member.instance.lifecycle_state})"
                )
        for name, group in self._batch_groups(spec, inventory, current):
            members = [
                i
                for i in group.instances
                if i.lifecycle_state
                not in (Lifecycle.TERMINATED, Lifecycle.TERMINATING, Lifecycle.DETACHING)
            ]
            in_service = [i for i in members if i.lifecycle_state is Lifecycle.IN_SERVICE]
            if len(in_service) < group.desired:
                problems.append(
                    f"{name}: {len(in_service)} of {group.desired} instances in service"
                )
                continue
            for inst in in_service:
                node = self._node_by_pid(inst.provider_id)
                if node is None:
                    problems.append(f"{name}: instance {inst.id} has no node yet")
                elif not node_is_ready(node):
                    problems.append(f"{name}: node {o.name(node)} is not Ready")
        return "; ".join(problems[:10])

    def _new_nodes(
        self, view: View, inventory: Inventory, groups: Iterable[str]
    ) -> list[tuple[Obj, str]]:
        """Ready nodes of the groups that are not being replaced: the replacements (and other
        nodes not selected)."""
        old = {e["name"] for e in view.nodes("nodesToTerminate")}
        out = []
        for member in inventory.instances(groups):
            node = self._node_by_pid(member.instance.provider_id)
            if node is not None and o.name(node) not in old:
                out.append((node, member.group))
        return out

    async def _annotate_new_nodes(
        self, view: View, spec: CycleNodeRequestSpec, inventory: Inventory
    ) -> None:
        """Put the autoscaler annotation on this batch's new nodes, and take it off the
        previous batch's: between batches the removal would be one more round of writes
        before the next batch could start, here it overlaps the scale-up."""
        annotated = set(view.status.get("annotatedNodes") or ())
        batch_groups = {e["nodeGroupName"] for e in view.nodes("currentNodes")}
        batch_groups -= self._annotation_opted_out(spec)
        fresh = [
            node
            for node, _ in self._new_nodes(view, inventory, batch_groups)
            if o.name(node) not in annotated and self._created_this_batch(view, node)
        ]
        edits = [(node, add_scale_down_disabled(view.name)) for node in fresh]
        edits += [
            (node, remove_scale_down_disabled(view.name))
            for node in self._annotated_by(view)
            if not self._created_this_batch(view, node)
        ]
        await each(edits, self._edit_node)
        if fresh:
            added = {o.name(node) for node in fresh}
            await self.status.commit(view, {"annotatedNodes": sorted(annotated | added)})

    def _annotated_by(self, view: View) -> list[Obj]:
        """Nodes carrying the autoscaler annotation this request put on them."""
        return [
            node
            for node in self.nodes.objects()
            if o.annotations_of(node).get(ANNOTATION_MANAGED) == view.name
        ]

    async def _edit_node(self, job: tuple[Obj, NodeEdit]) -> None:
        node, edit = job
        await edit_node(self.client, node, edit)

    def _created_this_batch(self, view: View, node: Mapping[str, Any]) -> bool:
        """A node registered after this batch was detached (a second of slack for clocks
        rounded to seconds)."""
        created = o.parse_time(o.meta(node).get("creationTimestamp"))
        started = view.time("scaleUpStarted")
        return created is None or started is None or (created - started).total_seconds() >= -1

    def _annotation_opted_out(self, spec: CycleNodeRequestSpec) -> set[str]:
        """The request's cloud groups whose NodeGroup keeps the autoscaler annotation off their
        nodes; the request's other groups still get it."""
        groups = set(spec.node_groups)
        out: set[str] = set()
        for obj in self.nodegroups.objects():
            annotations = o.annotations_of(obj)
            if not any(annotations.get(k) == "true" for k in DISABLE_ANNOTATION_MANAGEMENT):
                continue
            ng_spec = obj.get("spec") or {}
            names = {ng_spec.get("nodeGroupName"), *(ng_spec.get("nodeGroupsList") or ())}
            out |= {str(n) for n in names if n} & groups
        return out

    async def _remove_annotations(self, view: View) -> None:
        remove = remove_scale_down_disabled(view.name)
        await each([(node, remove) for node in self._annotated_by(view)], self._edit_node)
        if view.status.get("annotatedNodes"):
            await self.status.commit(view, {"annotatedNodes": None})

    async def _new_node_health(
        self, view: View, spec: CycleNodeRequestSpec, inventory: Inventory
    ) -> str:
        """Run the health checks of new nodes; "" when all pass. Past a check's wait period
        from the node's first Ready time, the request heals."""
        if not spec.health_checks:
            return ""
        status = dict(view.status.get("healthChecks") or {})
        changed = False
        failing: list[str] = []
        batch_groups = {e["nodeGroupName"] for e in view.nodes("currentNodes")}
        for node, group in self._new_nodes(view, inventory, batch_groups):
            key = f"{provider_id(node)}/{o.name(node)}"
            entry = dict(status.get(key) or {})
            if entry.get("skip"):
                continue
            checks = list(entry.get("checks") or [False] * len(spec.health_checks))
            checks += [False] * (len(spec.health_checks) - len(checks))
            if entry.get("ready") is None:
                entry["ready"] = timestamp(self.time.now())
                changed = True
            ready_at = o.parse_time(entry["ready"])
            target = CheckTarget.of(node, group)
            for i, check in enumerate(spec.health_checks):
                if checks[i]:
                    continue
                outcome = await self.checks.health(check, target, view.namespace)
                if outcome.ok:
                    checks[i] = True
                    changed = True
                    continue
                if self.time.since(ready_at) > check.wait_seconds:
                    await self._save_health(view, status, key, entry, checks)
                    raise _Heal(
                        f"health check {i} of new node {o.name(node)} failed for longer than {check.wait_period}: {outcome.detail}",
                        "HealthCheckFailed",
                    )
                failing.append(f"{o.name(node)}: {outcome.detail}")
            if entry.get("checks") != checks:
                changed = True
            entry["checks"] = checks
            status[key] = entry
        if changed:
            await self.status.commit(view, {"healthChecks": status})
        return ("health checks failing: " + "; ".join(failing[:5])) if failing else ""

    async def _save_health(
        self, view: View, status: Obj, key: str, entry: Obj, checks: list[bool]
    ) -> None:
        entry["checks"] = checks
        status[key] = entry
        await self.status.commit(view, {"healthChecks": status})

    def _fit(
        self, view: View, spec: CycleNodeRequestSpec, children: _Children, current: Sequence[Obj]
    ) -> FitResult:
        batch = {e["name"] for e in current}
        draining = {str((c.get("spec") or {}).get("nodeName")) for c in children.active}
        exclude = set(batch) | draining
        if spec.cycle_settings.pending_node_taint == "NoSchedule":
            exclude |= {e["name"] for e in view.nodes("nodesAvailable")}
        for r in self._active_requests(view):
            for entry in (r.get("status") or {}).get("currentNodes") or ():
                exclude.add(str(entry.get("name")))
        nodes = self.nodes.objects()
        pods_on = {o.name(n): self.pods.by_index(BY_NODE, o.name(n)) for n in nodes}
        batch_pods = [p for name in batch for p in pods_on.get(name, ())]
        return check_fit(batch_pods, nodes, pods_on, exclude=exclude)

    # ------------------------------------------------------------------ CordoningNode

    async def _cordoning(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        del request, ctx
        children = self._children_of(view)
        current = view.nodes("currentNodes")
        pending: list[str] = []
        checks_status = dict(view.status.get("preTerminationChecks") or {})
        checked = bool(spec.pre_termination_checks) and not spec.skip_pre_termination_checks

        async def hand_over(entry: Obj) -> None:
            name = entry["name"]
            if children.for_node(name) is not None:
                return
            node = self._node(name)
            if node is None:
                return
            if checked:
                cordoned = await edit_node(self.client, node, cordon())
                if cordoned is None:
                    return
                waiting = await self._pre_termination(view, spec, cordoned, entry, checks_status)
                if waiting:
                    pending.append(waiting)
                    return
                node = cordoned
            # Cordoned and labelled in one write; the child follows (a crash in between is
            # repaired on the next pass, which finds no child and creates it).
            if await edit_node(self.client, node, both(cordon(), mark_terminating(view.name))):
                await self._create_child(view, spec, entry)

        if checked:
            # Check results go into this request's status one node at a time.
            for entry in current:
                await hand_over(entry)
        else:
            await each(current, hand_over)
        if pending:
            raise _Wait(
                "pre-termination checks: " + "; ".join(pending[:5]),
                after=self.settings.check_interval,
                reason="PreTerminationChecks",
            )
        await self._commit_progress(
            view,
            self._children_of(view),
            {"currentNodes": None},
            phase="WaitingTermination",
            message="",
        )
        return None

    async def _pre_termination(
        self, view: View, spec: CycleNodeRequestSpec, node: Obj, entry: Obj, checks_status: Obj
    ) -> str:
        """Trigger (once) and poll each check of a node; "" when all have passed."""
        name = entry["name"]
        state = [dict(c) for c in (checks_status.get(name) or {}).get("checks") or ()]
        state += [{} for _ in range(len(spec.pre_termination_checks or ()) - len(state))]
        target = CheckTarget.of(node, entry.get("nodeGroupName", ""))
        waiting = ""
        for i, check in enumerate(spec.pre_termination_checks or ()):
            if state[i].get("check"):
                continue
            if state[i].get("trigger") is None:
                outcome = await self.checks.trigger(check, target, view.namespace)
                if not outcome.ok:
                    raise _Heal(
                        f"pre-termination trigger {i} of node {name} failed: {outcome.detail}",
                        "PreTerminationFailed",
                    )
                state[i]["trigger"] = timestamp(self.time.now())
                checks_status[name] = {"checks": state}
                await self.status.commit(view, {"preTerminationChecks": checks_status})
            outcome = await self.checks.health(check.health_check, target, view.namespace)
            if outcome.ok:
                state[i]["check"] = True
                checks_status[name] = {"checks": state}
                await self.status.commit(view, {"preTerminationChecks": checks_status})
                continue
            if self.time.since(o.parse_time(state[i]["trigger"])) > check.health_check.wait_seconds:
                raise _Heal(
                    f"pre-termination check {i} of node {name} did not pass within {check.health_check.wait_period}: {outcome.detail}",
                    "PreTerminationFailed",
                )
            waiting = f"{name}: {outcome.detail}"
            break
        return waiting

    async def _create_child(self, view: View, spec: CycleNodeRequestSpec, entry: Obj) -> None:
        body: Obj = {
            "apiVersion": CYCLENODESTATUSES.api_version,
            "kind": CYCLENODESTATUSES.kind,
            "metadata": {
                "name": child_name(view.name, entry["name"]),
                "namespace": view.namespace,
                "labels": {CYCLOPS_NAME_LABEL: view.name, REQUEST_LABEL: view.name},
                "ownerReferences": [o.owner_reference(view.obj, controller=True)],
            },
            "spec": {
                "nodeName": entry["name"],
                "cycleSettings": spec.cycle_settings.to_dict(),
                "nodeGroupName": entry.get("nodeGroupName"),
                "providerId": entry.get("providerId") or None,
                "provider": view.status.get("provider") or spec.provider,
            },
        }
        body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
        try:
            await self.client.create(CYCLENODESTATUSES, body, view.namespace)
        except errors.Conflict as e:  # AlreadyExists: created before a crash or a conflict
            existing = await self.client.get_or_none(
                CYCLENODESTATUSES, body["metadata"]["name"], view.namespace
            )
            if existing is None or not o.is_controlled_by(existing, view.obj):
                raise _Heal(
                    f"CycleNodeStatus {body['metadata']['name']} exists and is not ours: {e}",
                    "ChildConflict",
                ) from None

    # ------------------------------------------------------------------ WaitingTermination

    async def _waiting_termination(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        del request, spec, ctx
        children = self._children_of(view)
        if children.failed:
            raise _Heal(self._failed_children_message(children), "NodeFailed")
        concurrency = int(view.status.get("concurrency") or 1)
        active = len(children.active)
        available = view.nodes("nodesAvailable")
        changes = self._progress(view, children, view.status)
        refill = int(concurrency * self.settings.batch_refill)
        if not available and active == 0:
            await self._remove_annotations(view)
            await self.status.commit(view, changes, phase="Initialised")
            return None
        if available and active <= refill:
            # The batch's annotations come off in the next scale-up (`_annotate_new_nodes`).
            await self.status.commit(view, changes, phase="Initialised")
            return None
        await self.status.commit(view, changes)
        return None

    def _failed_children_message(self, children: _Children) -> str:
        parts = [
            f"{(c.get('spec') or {}).get('nodeName')}: {(c.get('status') or {}).get('message') or 'failed'}"
            for c in children.failed[:5]
        ]
        return f"{len(children.failed)} nodes failed: " + "; ".join(parts)

    async def _commit_progress(
        self, view: View, children: _Children, changes: Mapping[str, Any], **kw: Any
    ) -> None:
        merged = dict(changes)
        merged.update(self._progress(view, children, {**view.status, **changes}))
        await self.status.commit(view, merged, **kw)

    # ------------------------------------------------------------------ endings

    async def _succeed(self, view: View, children: _Children) -> Result | None:
        changes = self._progress(view, children, view.status)
        changes["finishedTimestamp"] = timestamp(self.time.now())
        await self.status.commit(
            view,
            changes,
            phase="Successful",
            message="",
            condition=(
                "Ready",
                "True",
                "Successful",
                f"{changes['numNodesCycled']} nodes replaced",
            ),
        )
        return None

    async def _fail(self, view: View, message: str, reason: str) -> None:
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

    async def _to_healing(self, view: View, message: str, reason: str) -> None:
        FAILURES.labels("CycleNodeRequest", reason).inc()
        previous = view.status.get("message") or ""
        text = f"{previous}, {message}" if previous and message not in previous else message
        await self.status.commit(
            view,
            phase="Healing",
            reason=reason,
            message=text,
            warning=True,
            condition=("Ready", "False", reason, message[:32768]),
        )

    async def _healing(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> Result | None:
        remaining = await self._heal_nodes(request, view, spec, ctx)
        children = self._children_of(view)
        if remaining or children.active:
            busy = len(children.active)
            raise _Wait(
                f"healing: waiting for {busy} nodes still being replaced"
                + (f"; {'; '.join(remaining[:5])}" if remaining else ""),
                reason="Healing",
            )
        await self._remove_annotations(view)
        changes = self._progress(view, children, view.status)
        changes["finishedTimestamp"] = timestamp(self.time.now())
        changes["currentNodes"] = None
        await self.status.commit(
            view,
            changes,
            phase="Failed",
            reason="Failed",
            warning=True,
            message=view.status.get("message") or "failed",
        )
        return None

    async def _heal_nodes(
        self, request: Request, view: View, spec: CycleNodeRequestSpec, ctx: ReconcileContext
    ) -> list[str]:
        """Put back every node of the request that no CycleNodeStatus works on or finished:
        re-attach its instance to its group, uncordon it, remove our marks. Returns problems
        that need another attempt."""
        children = self._children_of(view)
        entries = {e["name"]: e for e in view.nodes("nodesToTerminate")}
        for e in view.nodes("currentNodes"):
            entries.setdefault(e["name"], e)
        if not entries:
            return []
        try:
            _, provider, inventory = await self._inventory(request, spec, fresh=True)
        except (InvalidResource, ProviderError) as e:
            return [f"describing node groups: {e}"]
        problems = []
        for name, entry in entries.items():
            child = children.for_node(name)
            if child is not None and _phase(child) != "Failed":
                continue  # being replaced, or replaced: not ours to undo
            node = self._node(name)
            iid = instance_id(entry.get("providerId") or "")
            origin = entry.get("nodeGroupName") or (
                o.annotations_of(node).get(NODE_GROUP_ANNOTATION) if node else None
            )
            if child is not None and node is None:
                # Its CycleNodeStatus failed once the Node was gone (drained and deleted, or
                # deleted by someone else): re-attached, the instance would count as capacity
                # in its group with no node to run pods. It stays out; its group replaced it.
                if iid and inventory.member_by_instance(iid) is None:
                    self._event(
                        view,
                        "Warning",
                        "InstanceLeftDetached",
                        f"instance {iid} of deleted node {name} could not be terminated and "
                        "is left out of its group: terminate it",
                    )
                continue
            if iid and origin and inventory.member_by_instance(iid) is None:
                try:
                    ctx.ensure_may_act(f"re-attach {iid}")
                    await provider.attach_instance(str(origin), iid)
                    log.info("re-attached", request=o.ref(view.obj), node=name, instance=iid)
                except ProviderError as e:
                    if e.retryable:
                        problems.append(f"re-attaching {iid}: {e}")
                        continue
                    if e.code not in ("NotFound", "IncorrectInstanceState"):
                        problems.append(f"re-attaching {iid}: {e}")
                        continue
            if node is not None:
                await edit_node(self.client, node, clear_cycle_marks())
        if not problems:
            self.cloud.invalidate(self.providers.name(spec.provider), spec.node_groups)
        return problems

    async def _terminal(self, view: View, ctx: ReconcileContext) -> Result | None:
        """Successful and Failed stay so; their reconciles clean up, once."""
        del ctx
        if view.phase == "Successful":
            if not _cleaned(view):
                await self._clean_up(view)
            if self.settings.delete_cnr:
                finished = view.time("finishedTimestamp")
                age = self.time.since(finished)
                if age >= self.settings.delete_cnr_expiry:
                    try:
                        await self.client.delete(CYCLENODEREQUESTS, view.name, view.namespace)
                    except errors.NotFound:
                        pass
                    return None
                return Result(
                    requeue_after=self.time.wall(self.settings.delete_cnr_expiry - age + 1)
                )
        elif not _cleaned(view):
            await self._remove_annotations(view)
            await self.status.commit(
                view, condition=("CleanedUp", "True", "CleanedUp", "annotations removed")
            )
        return None

    async def _clean_up(self, view: View) -> None:
        await self._remove_annotations(view)
        for entry in view.nodes("nodesToTerminate"):
            node = self._node(entry["name"])
            if node is not None:
                await edit_node(self.client, node, clear_cycle_marks(view.name))
        # Failed requests of the same node groups made before this one no longer block the
        # observer: the groups are healthy again (Cyclops does the same).
        mine = _node_groups_of(view.obj)
        created = o.parse_time(o.meta(view.obj).get("creationTimestamp"))
        for other in self.requests.objects(view.namespace):
            if _phase(other) != "Failed" or o.uid(other) == o.uid(view.obj):
                continue
            theirs = _node_groups_of(other)
            when = o.parse_time(o.meta(other).get("creationTimestamp"))
            if (
                theirs
                and theirs == mine
                and created is not None
                and when is not None
                and when < created
            ):
                try:
                    await self.client.delete(CYCLENODEREQUESTS, o.name(other), view.namespace)
                except errors.NotFound:
                    pass
        await self.status.commit(
            view, condition=("CleanedUp", "True", "CleanedUp", "nodes and annotations cleaned up")
        )

    async def _deleted(self, request: Request, view: View, ctx: ReconcileContext) -> Result | None:
        """A deleted request first puts back its nodes no CycleNodeStatus is past draining."""
        if REQUEST_FINALIZER not in (o.meta(view.obj).get("finalizers") or ()):
            return None
        if view.phase not in TERMINAL_PHASES and view.phase:
            try:
                spec = CycleNodeRequest.parse_spec(view.obj).spec
            except InvalidResource:
                spec = None
            if spec is not None:
                children = self._children_of(view)
                if children.active:
                    # Children past draining finish (their nodes are drained already); the
                    # others stop, and their nodes are put back with the rest once they have.
                    for child in children.active:
                        if _phase(child) not in ("DeletingNode", "TerminatingNode"):
                            await self._stop_child(child)
                    return Result(requeue_after=self.time.wall(self.settings.check_interval))
                problems = await self._heal_nodes(request, view, spec, ctx)
                if problems:
                    return Result(requeue_after=self.time.wall(self.settings.check_interval))
        await self._remove_annotations(view)
        names = [f for f in o.meta(view.obj).get("finalizers") or () if f != REQUEST_FINALIZER]
        try:
            await self.client.patch(
                CYCLENODEREQUESTS,
                view.name,
                {
                    "metadata": {
                        "finalizers": names or None,
                        "resourceVersion": o.meta(view.obj).get("resourceVersion"),
                    }
                },
                view.namespace,
            )
        except errors.NotFound:
            pass
        self.cloud.forget(request)
        return None

    async def _stop_child(self, child: Obj) -> None:
        """Fail a child that is still waiting or draining, through the same writer as its own
        transitions: its Event and metrics say it stopped, and why."""
        try:
            await self.child_status.commit(
                View(child),
                phase="Failed",
                reason="RequestDeleted",
                message="its CycleNodeRequest was deleted",
                warning=True,
            )
        except (errors.NotFound, errors.Conflict):
            pass

    def _event(self, view: View, type_: str, reason: str, note: str) -> None:
        if self.events is not None:
            self.events.event(view.obj, type_, reason, "Cycle", note)
        log.info(reason, request=o.ref(view.obj), note=note)


def _node_groups_of(request: Mapping[str, Any]) -> set[str]:
    """The cloud groups a request cycles: as it recorded them, or as its spec names them (a
    request that failed before recording them, such as one naming a missing node, is still
    the groups')."""
    recorded = (request.get("status") or {}).get("nodeGroups")
    if recorded:
        return set(recorded)
    spec = request.get("spec") or {}
    return {g for g in [spec.get("nodeGroupName"), *(spec.get("nodeGroupsList") or ())] if g}


def _cleaned(view: View) -> bool:
    for cond in view.status.get("conditions") or ():
        if cond.get("type") == "CleanedUp" and cond.get("status") == "True":
            return True
    return False
