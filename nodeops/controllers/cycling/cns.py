"""The CycleNodeStatus reconciler: drain (or wait for) one node, delete it, terminate it.

    Pending -> [WaitingPods ->] RemovingLabelsFromPods -> DrainingPods -> DeletingNode
            -> TerminatingNode -> Successful              (timeout or error -> Failed)

Every step is repeatable: labels are removed with merge patches (removing an absent label is a
no-op), the drain engine takes one non-blocking pass per reconcile, deleting a deleted Node and
terminating a terminated instance succeed. The instance to terminate is recorded in status in
Pending, before anything is done to the node, so it is known even once the Node is gone. The
node's own pods, PodDisruptionBudgets and the node itself wake the reconcile; a timer is only
the fallback for what has no event (a do-not-disrupt duration running out).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

import structlog

from nodeops.api import CycleNodeStatus, InvalidResource
from nodeops.api.cyclenodestatus import CycleNodeStatusSpec
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.cloud import Providers
from nodeops.controllers.cycling.inventory import instance_id, node_ip, provider_id
from nodeops.controllers.cycling.keys import NODE_FINALIZER, NODE_GROUP_ANNOTATION
from nodeops.controllers.cycling.metrics import FAILURES, NODES_CYCLED, POD_MOVES
from nodeops.controllers.cycling.pods import movable, protected_pods
from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.status import StatusWriter, View, timestamp
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.controllers.kit import Drainers, drain_pass, going_away, remove_finalizer
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.kube import Informer, ReconcileContext, Request, Result, errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder
from nodeops.kube.resources import NODES, PODS
from nodeops.providers.base import ProviderError

__all__ = ["PHASES", "CycleNodeStatusReconciler", "drain_options"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
BY_NODE = "cycling-node"


def drain_options(force: bool) -> DrainOptions:
    """The node goes away whatever its pods are (Cyclops drains all of them too): eviction
    (budgets respected), or past the drain deadline with Force, plain deletion."""
    return going_away(disable_eviction=True) if force else going_away()


_CHAIN = 8
"""Phases one reconcile may go through before handing back to the queue."""

NOTE_SECONDS = 5.0
"""A drain's message changes each time a pod leaves or a budget answers; it is rewritten at most
this often (cluster seconds), so a node of thirty pods costs a few status writes rather than
thirty, each of which every watcher of CycleNodeStatuses decodes. A phase change, and a drain's
first message, are written at once."""


class CycleNodeStatusReconciler:
    def __init__(
        self,
        *,
        client: Client,
        children: Informer,
        requests: Informer,
        nodes: Informer,
        pods: Informer,
        providers: Providers,
        events: EventRecorder | None,
        settings: CyclingSettings,
        time: TimeBase,
        drainers: Drainers | None = None,
    ) -> None:
        self.client = client
        self.children = children
        self.requests = requests
        self.nodes = nodes
        self.pods = pods
        self.providers = providers
        self.events = events
        self.settings = settings
        self.time = time
        self.status = StatusWriter(client, CYCLENODESTATUSES, events, time)
        self.drainers = drainers or Drainers(client, controller="cyclenodestatus", events=events)
        self._noted: dict[tuple[str, str], datetime] = {}
        """When each draining child's message was last written (`NOTE_SECONDS`)."""

    def drainer(self, force: bool) -> Drainer:
        return self.drainers.get(drain_options(force))

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        obj = self.children.get(request.name, request.namespace)
        if obj is None:
            self._noted.pop((request.namespace or "", request.name), None)
            return None
        view = View(obj)
        if view.phase in TERMINAL_PHASES:
            return None
        if not self._owner_lets_us_act(view):
            return None
        try:
            spec = CycleNodeStatus.parse_spec(obj).spec
        except InvalidResource as e:
            await self._fail(view, str(e), "InvalidSpec")
            return None
        # A step that moves to another phase goes on with it at once: its status is written
        # first, so a crash in between resumes from there.
        for _ in range(_CHAIN):
            phase = view.phase
            result = await self._step(view, spec, ctx)
            if result is not None or view.phase == phase or view.phase in TERMINAL_PHASES:
                return result
        return None

    async def _step(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        if view.phase == "":
            return await self._undefined(view, spec)
        if view.phase in ("WaitingPods", "RemovingLabelsFromPods", "DrainingPods"):
            deadline = view.time("timeoutTimestamp")
            if deadline is not None and self.time.now() > deadline:
                await self._fail(
                    view,
                    f"node {spec.node_name} was not replaced within its cycling timeout "
                    f"(in phase {view.phase}: {view.status.get('message') or 'no details'})",
                    "Timeout",
                )
                return None
        handler = PHASES.get(view.phase)
        if handler is None:
            await self._fail(view, f"status.phase: unknown phase {view.phase!r}", "InvalidStatus")
            return None
        return await handler(self, view, spec, ctx)

    def _owner_lets_us_act(self, view: View) -> bool:
        """A child of a deleted (or deleting) request does nothing more, except finish a node
        that is drained already: the request puts the other nodes back."""
        owner = o.controller_ref(view.obj)
        request = self.requests.get(owner["name"], view.namespace) if owner else None
        if request is not None and o.uid(request) == (owner or {}).get("uid"):
            if o.deletion_timestamp(request) is None:
                return True
        return view.phase in ("DeletingNode", "TerminatingNode")

    # ------------------------------------------------------------------ phases

    async def _undefined(self, view: View, spec: CycleNodeStatusSpec) -> Result | None:
        now = self.time.now()
        timeout = spec.cycle_settings.timeout_seconds or self.settings.default_cycling_timeout
        await self.status.commit(
            view,
            {
                "startedTimestamp": timestamp(now),
                "timeoutTimestamp": timestamp(self.time.after(timeout)),
            },
            phase="Pending",
        )
        return None

    async def _pending(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        del ctx
        node = self.nodes.get(spec.node_name)
        if node is None:
            if spec.provider_id:
                # Someone deleted the Node; its instance may still run outside any group.
                recorded = {
                    "name": spec.node_name,
                    "providerId": spec.provider_id,
                    "nodeGroupName": spec.node_group_name or "",
                }
                await self.status.commit(
                    view,
                    {"currentNode": recorded},
                    phase="TerminatingNode",
                    message=f"node {spec.node_name} no longer exists; terminating its instance",
                )
                return None
            NODES_CYCLED.inc()
            await self.status.commit(
                view,
                phase="Successful",
                message=f"node {spec.node_name} no longer exists: replaced by something else",
            )
            return None
        group = spec.node_group_name or o.annotations_of(node).get(NODE_GROUP_ANNOTATION) or ""
        current: Obj = {
            "name": o.name(node),
            "providerId": provider_id(node),
            "nodeGroupName": group,
        }
        ip = node_ip(node)
        if ip:
            current["privateIp"] = ip
        following = (
            "WaitingPods" if spec.cycle_settings.method == "Wait" else "RemovingLabelsFromPods"
        )
        await self.status.commit(view, {"currentNode": current}, phase=following, message="")
        return None

    async def _waiting_pods(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        del ctx
        settings = spec.cycle_settings
        now = self.time.now()
        waiting = protected_pods(
            self.pods.by_index(BY_NODE, spec.node_name),
            now=now,
            ignore_namespaces=settings.ignore_namespaces or (),
            ignore_labels=settings.ignore_pods_labels,
        )
        if waiting:
            names = ", ".join(w.pod for w in waiting[:5])
            message = f"waiting for {len(waiting)} pods that must not be disrupted: {names}"
            await self.status.commit(view, message=message)
            ends = [w.until for w in waiting if w.until is not None]
            after = self._until(min(ends)) if ends else self.settings.check_interval * 6
            return Result(requeue_after=self.time.wall(after))
        await self.status.commit(view, phase="RemovingLabelsFromPods", message="")
        return None

    def _until(self, when: datetime) -> float:
        return max(1.0, (when - self.time.now()).total_seconds() + 1)

    async def _removing_labels(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        del ctx
        keys = spec.cycle_settings.labels_to_remove or []
        for pod in self.pods.by_index(BY_NODE, spec.node_name) if keys else ():
            present = [k for k in keys if k in o.labels(pod)]
            if not present:
                continue
            # A merge patch removes a label by setting it to null, and removing one that is not
            # there changes nothing: unlike Cyclops' JSON patch it needs no path escaping and
            # cannot fail on a second attempt.
            try:
                await self.client.patch(
                    PODS,
                    o.name(pod),
                    {"metadata": {"labels": dict.fromkeys(present)}},
                    o.namespace(pod),
                )
            except errors.NotFound:
                continue
        pods = [p for p in self.pods.by_index(BY_NODE, spec.node_name) if movable(p)]
        await self.status.commit(
            view,
            {"drainStartedTimestamp": timestamp(self.time.now()), "podsToMove": len(pods)},
            phase="DrainingPods",
            message="",
        )
        POD_MOVES.inc(len(pods))
        return None

    async def _draining(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        del ctx
        settings = spec.cycle_settings
        started = view.time("drainStartedTimestamp") or self.time.now()
        force = bool(view.status.get("forced"))
        deadline = settings.drain_deadline_seconds
        if deadline is not None and not force and self.time.since(started) > deadline:
            if settings.on_drain_deadline == "Fail":
                await self._fail(
                    view,
                    f"node {spec.node_name} was not drained within its drain deadline "
                    f"{settings.drain_deadline}: {view.status.get('message') or ''}",
                    "DrainDeadline",
                )
                return None
            force = True
            await self.status.commit(
                view,
                {"forced": True},
                reason="ForceDrain",
                message=f"drain deadline {settings.drain_deadline} passed: deleting the "
                "remaining pods without their disruption budgets",
                warning=True,
            )
        if self.nodes.get(spec.node_name) is None:
            await self.status.commit(view, phase="DeletingNode", message="the node is gone")
            return None
        outcome = await drain_pass(self.drainer(force), spec.node_name, started)
        if outcome.gone:
            await self.status.commit(view, phase="DeletingNode", message="the node is gone")
            return None
        if outcome.failed:
            await self._fail(view, f"draining {spec.node_name}: {outcome.message}", "DrainFailed")
            return None
        if outcome.done:
            await self.status.commit(
                view,
                phase="DeletingNode",
                message="",
                condition=("Drained", "True", "Drained", f"node {spec.node_name} drained"),
            )
            return None
        if outcome.error is not None:
            # Caches still filling, or a NodeDrainRule to fix: the drain waits rather than guess.
            await self.status.commit(
                view,
                message=f"draining {spec.node_name}: {outcome.message}",
                condition=("Drained", "False", outcome.reason, outcome.message[:32768]),
            )
            return Result(requeue_after=self.time.wall(self.settings.check_interval))
        after = self.settings.check_interval
        if deadline is not None and not force:
            after = min(after, max(1.0, deadline - self.time.since(started) + 1))
        noted = self._noted.get(key := (view.namespace, o.name(view.obj)))
        wait = NOTE_SECONDS - self.time.since(noted) if noted is not None else 0.0
        changed = view.status.get("message") != outcome.message
        if changed and wait > 0:
            after = min(after, wait)  # the newer message is written then, if still current
        else:
            await self.status.commit(
                view,
                message=outcome.message,
                condition=("Drained", "False", "Draining", outcome.message[:32768]),
            )
            if changed:
                self._noted[key] = self.time.now()
        return Result(requeue_after=self.time.wall(after))

    async def _deleting(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        node = self.nodes.get(spec.node_name)
        expected = (view.status.get("currentNode") or {}).get("providerId")
        if node is not None and (not expected or provider_id(node) == expected):
            ctx.ensure_may_act(f"delete node {spec.node_name}")
            try:
                deleted = await self.client.delete(NODES, spec.node_name)
            except errors.NotFound:
                deleted = None
            if deleted is not None and deleted.get("kind") != "Status":
                # The Node waits for our finalizer: with the Node deleted, nothing is left to
                # hold. (A Status answer means it is gone already, finalizers and all.)
                await remove_finalizer(self.client, NODES, deleted, NODE_FINALIZER)
        await self.status.commit(view, phase="TerminatingNode", message="")
        return None

    async def _terminating(
        self, view: View, spec: CycleNodeStatusSpec, ctx: ReconcileContext
    ) -> Result | None:
        current = view.status.get("currentNode") or {}
        iid = instance_id(str(current.get("providerId") or ""))
        if iid:
            try:
                provider = self.providers.get(spec.provider)
            except (ProviderError, ValueError) as e:
                await self._fail(view, f"spec.provider: {e}", "InvalidSpec")
                return None
            ctx.ensure_may_act(f"terminate {iid}")
            try:
                await provider.terminate_instance(iid)
            except ProviderError as e:
                if e.retryable:
                    raise
                await self._fail(view, f"terminating {iid}: {e}", "TerminateFailed")
                return None
            log.info("terminated", node=spec.node_name, instance=iid, cns=o.ref(view.obj))
        NODES_CYCLED.inc()
        await self.status.commit(view, phase="Successful", message="")
        return None

    async def _fail(self, view: View, message: str, reason: str) -> None:
        FAILURES.labels("CycleNodeStatus", reason).inc()
        await self.status.commit(view, phase="Failed", reason=reason, message=message, warning=True)


Handler = Callable[
    [CycleNodeStatusReconciler, View, CycleNodeStatusSpec, ReconcileContext],
    Awaitable[Result | None],
]

PHASES: dict[str, Handler] = {
    "Pending": CycleNodeStatusReconciler._pending,
    "WaitingPods": CycleNodeStatusReconciler._waiting_pods,
    "RemovingLabelsFromPods": CycleNodeStatusReconciler._removing_labels,
    "DrainingPods": CycleNodeStatusReconciler._draining,
    "DeletingNode": CycleNodeStatusReconciler._deleting,
    "TerminatingNode": CycleNodeStatusReconciler._terminating,
}
"""The transitions table: what each phase does. A handler moves the status on by writing the
next phase (Successful and Failed are terminal; "" is set to Pending by `_undefined`)."""


def pod_node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")
