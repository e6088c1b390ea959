"""The node reconciler: kubelet drift labels, and the delete-node flow.

Per node, level-based:

1. Drift: the node's kubelet version against the API server's. Different (older or newer) ->
   label `<prefix>kubelet-needs-update=true`; equal -> the label is removed. Written only when
   it changes, guarded by the node's resourceVersion.
2. Deletion, when `<prefix>delete-node=true` (or a deletion is under way): cordon and record
   the start; drain with the drain engine, one non-blocking pass per reconcile; record and
   delete the server; wait until the cloud no longer lists it; record and delete the Node (or
   leave that to the cloud controller manager). The record (`<prefix>delete-node-progress`)
   is written before each step, so a restarted controller or a new leader continues where the
   last one stopped. `ctx.ensure_may_act` guards the two irreversible steps.

Cloud and credential problems are reported as Warning events on the node and retried; they never
stop other nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from nodeops.api.configfile import format_go_duration
from nodeops.controllers.kit import Clock, drain_pass, events_or_null, patch_node, record_step
from nodeops.controllers.kubernikus.config import KubernikusConfig
from nodeops.controllers.kubernikus.keys import Keys
from nodeops.controllers.kubernikus.metrics import FAILURES, REPLACEMENTS
from nodeops.controllers.kubernikus.progress import (
    Action,
    Progress,
    ProgressError,
    Step,
    delete_requested,
    next_action,
    read_progress,
)
from nodeops.controllers.kubernikus.servers import CredentialsError, ServersSource
from nodeops.controllers.kubernikus.version import (
    KubeVersion,
    VersionError,
    differs,
    parse_version,
)
from nodeops.drain.engine import Drainer
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.controller import ReconcileContext, Request, Result
from nodeops.kube.events import NORMAL, WARNING, EventRecorder
from nodeops.kube.informer import Informer
from nodeops.kube.resources import NODES
from nodeops.providers.base import ProviderConfigError, ProviderError

__all__ = ["KubernikusReconciler"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

_ACTION = "DeleteNode"
_MAX_STEPS_PER_RECONCILE = 6


class KubernikusReconciler:
    def __init__(
        self,
        *,
        client: Client,
        nodes: Informer,
        keys: Keys,
        config: KubernikusConfig,
        server_version: Callable[[], KubeVersion | None],
        servers: ServersSource,
        drainer: Drainer,
        drain_stopped: Callable[[str], None] | None = None,
        events: EventRecorder | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.keys = keys
        self.config = config
        self.server_version = server_version
        self.servers = servers
        self.drainer = drainer
        self.drain_stopped = drain_stopped or drainer.stopped  # a drain given up on
        self.events = events_or_null(events)
        self.clock = clock or Clock()
        self._unparsable: set[tuple[str, str]] = set()
        self._warned: set[tuple[str, str, str]] = set()

    # ----------------------------------------------------------------------------------------

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        node = self.nodes.get(request.name)
        if node is None:
            return None
        try:
            return await self._reconcile(node, ctx)
        except errors.Conflict:
            # Another writer (the maintenance controller, a kubelet status) changed the node
            # since it was read: nothing was written, look again at the newer node.
            log.debug("node changed meanwhile; looking again", node=request.name)
            return Result(requeue=True)

    async def _reconcile(self, node: Obj, ctx: ReconcileContext) -> Result:
        requeue = self.config.intervals.requeue
        node = await self._label_drift(node)
        try:
            progress = read_progress(node, self.keys)
        except ProgressError as exc:
            node = await self._discard_progress(node, str(exc))
            progress = None
        if progress is None and not delete_requested(node, self.keys):
            return Result(requeue_after=requeue)
        after = await self._delete_flow(node, progress, ctx)
        if after is not None and after <= 0:
            return Result(requeue=True)  # more steps to take right away
        return Result(requeue_after=min(after, requeue) if after is not None else requeue)

    # ------------------------------------------------------------------ drift

    async def _label_drift(self, node: Obj) -> Obj:
        server = self.server_version()
        if server is None:
            return node
        raw = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
        if not raw:
            return node  # registered a moment ago; the kubelet reports its version next
        try:
            kubelet = parse_version(raw)
        except VersionError:
            key = (o.uid(node), raw)
            if key not in self._unparsable:
                self._unparsable.add(key)
                self.events.event(
                    node,
                    WARNING,
                    "UnknownKubeletVersion",
                    "CompareVersion",
                    f"kubelet version {raw!r} is not a semantic version; not labelled",
                )
            return node
        wanted = "true" if differs(kubelet, server) else None
        current = o.labels(node).get(self.keys.needs_update)
        if current == wanted:
            return node
        log.info(
            "kubelet version drift" if wanted else "kubelet version matches",
            node=o.name(node),
            kubelet=str(kubelet),
            server=str(server),
        )
        return await self._patch(node, {"metadata": {"labels": {self.keys.needs_update: wanted}}})

    # ------------------------------------------------------------------ deletion

    async def _delete_flow(
        self, node: Obj, progress: Progress | None, ctx: ReconcileContext
    ) -> float | None:
        """Take as many steps as can be taken now; the seconds until the next look."""
        intervals = self.config.intervals
        for _ in range(_MAX_STEPS_PER_RECONCILE):
            requested = delete_requested(node, self.keys)
            action = next_action(requested, progress, remove_node=self.config.remove_node)
            match action:
                case Action.NONE:
                    return None
                case Action.START:
                    node, progress = await self._start(node)
                case Action.CANCEL:
                    assert progress is not None
                    await self._cancel(node, progress)
                    return None
                case Action.DRAIN:
                    assert progress is not None
                    after = await self._drain(node, progress)
                    if after is not None:
                        return after
                    node, progress = await self._record(node, progress, Step.DELETING_SERVER)
                case Action.DELETE_SERVER:
                    assert progress is not None
                    outcome = await self._delete_server(node, ctx)
                    if isinstance(outcome, float):
                        return outcome
                    node, progress = await self._record(node, progress, outcome)
                    if outcome is not Step.WAITING_FOR_SERVER:
                        REPLACEMENTS.labels("completed").inc()  # the server was gone already
                case Action.WAIT_FOR_SERVER:
                    assert progress is not None
                    gone = await self._server_gone(node)
                    if gone is None:
                        return intervals.requeue
                    if not gone:
                        return intervals.pod_deletion.period
                    self.events.event(node, NORMAL, "ServerDeleted", _ACTION, "the server is gone")
                    node, progress = await self._record(node, progress, self._after_server())
                    REPLACEMENTS.labels("completed").inc()
                case Action.REMOVE_NODE:
                    assert progress is not None
                    if progress.step is not Step.REMOVING_NODE:
                        node, progress = await self._record(node, progress, Step.REMOVING_NODE)
                    await self._remove_node(node, ctx)
                    return None
                case Action.WAIT_FOR_NODE_REMOVAL:
                    return intervals.requeue
        return 0.0

    def _after_server(self) -> Step:
        return Step.REMOVING_NODE if self.config.remove_node else Step.SERVER_DELETED

    async def _start(self, node: Obj) -> tuple[Obj, Progress]:
        already = bool((node.get("spec") or {}).get("unschedulable"))
        progress = Progress.begin(self.clock.now(), cordoned=not already)
        body: Obj = {
            "metadata": {"annotations": {self.keys.delete_progress: progress.to_annotation()}}
        }
        if not already:
            body["spec"] = {"unschedulable": True}
        node = await self._patch(node, body)
        REPLACEMENTS.labels("started").inc()
        log.info("deleting node: cordoned, draining", node=o.name(node))
        self.events.event(
            node,
            NORMAL,
            "Draining",
            _ACTION,
            f"{self.keys.delete_node}=true: cordoned; draining before the server is deleted",
        )
        return node, progress

    async def _cancel(self, node: Obj, progress: Progress) -> None:
        body: Obj = {"metadata": {"annotations": {self.keys.delete_progress: None}}}
        if progress.cordoned:
            body["spec"] = {"unschedulable": None}
        await self._patch(node, body)
        REPLACEMENTS.labels("cancelled").inc()
        self.drain_stopped(o.name(node))
        log.info("node deletion cancelled", node=o.name(node))
        self.events.event(
            node,
            NORMAL,
            "DeletionCancelled",
            _ACTION,
            f"{self.keys.delete_node} was removed before the server was deleted"
            + ("; uncordoned" if progress.cordoned else ""),
        )

    async def _drain(self, node: Obj, progress: Progress) -> float | None:
        """One drain pass; None once the node is drained, else when to look again."""
        intervals = self.config.intervals
        outcome = await drain_pass(self.drainer, o.name(node), progress.started)
        if outcome.failed:
            self._warn(node, "DrainFailed", outcome.message)
            return intervals.pod_eviction.period
        if outcome.gone:
            return intervals.requeue  # the node's cache catches up, and the flow ends there
        if outcome.done:
            self.events.event(node, NORMAL, "Drained", _ACTION, "node drained; deleting its server")
            return None
        report = outcome.progress
        if report is None:
            # Caches still filling, or a NodeDrainRule to fix (that one said in a Warning).
            if outcome.blocked:
                self._warn(node, "DrainFailed", outcome.message)
            return intervals.pod_eviction.period
        waited = (self.clock.now() - progress.since).total_seconds()
        if report.failures:
            # Evictions refused (a PodDisruptionBudget without room): ask again each period.
            if waited > intervals.pod_eviction.timeout:
                self._once(
                    node,
                    progress,
                    "DrainStalled",
                    f"evictions still refused after "
                    f"{format_go_duration(intervals.pod_eviction.timeout)}: {report.message}",
                )
            return intervals.pod_eviction.period
        if waited > intervals.pod_deletion.timeout:
            self._once(
                node,
                progress,
                "DrainSlow",
                f"pods still terminating after "
                f"{format_go_duration(intervals.pod_deletion.timeout)}: {report.message}",
            )
        return intervals.pod_deletion.period

    def _once(self, node: Obj, progress: Progress, reason: str, note: str) -> None:
        """A Warning once per node, reason and drain (not on every look at a stalled drain)."""
        key = (o.uid(node), reason, o.format_time(progress.started))
        if key in self._warned:
            return
        if len(self._warned) > 10_000:
            self._warned.clear()
        self._warned.add(key)
        self._warn(node, reason, note)

    async def _delete_server(self, node: Obj, ctx: ReconcileContext) -> Step | float:
        """Delete the node's server; the next step, or when to try again after a failure."""
        name = o.name(node)
        try:
            servers = await self.servers.get()
            server = await servers.find_server(node)
            if server is None:
                self.events.event(
                    node,
                    NORMAL,
                    "ServerGone",
                    _ACTION,
                    "the server no longer exists; nothing to delete",
                )
                return self._after_server()
            ctx.ensure_may_act(f"delete server {server.id} of node {name}")
            await servers.delete_server(server)
        except (CredentialsError, ProviderConfigError) as exc:
            self._warn(node, "CloudCredentials", str(exc))
            return self.config.intervals.requeue
        except ProviderError as exc:
            self._warn(node, "DeleteServerFailed", str(exc))
            if exc.retryable:
                return self.config.intervals.pod_deletion.period
            return self.config.intervals.requeue
        log.info("server deletion requested", node=name, server=server.id)
        self.events.event(
            node, NORMAL, "DeletingServer", _ACTION, f"server {server.id} is being deleted"
        )
        return Step.WAITING_FOR_SERVER

    async def _server_gone(self, node: Obj) -> bool | None:
        """Whether the cloud no longer lists the node's server; None when it cannot tell."""
        try:
            servers = await self.servers.get()
            return await servers.find_server(node) is None
        except (CredentialsError, ProviderConfigError, ProviderError) as exc:
            self._warn(node, "DeleteServerFailed", str(exc))
            return None

    async def _remove_node(self, node: Obj, ctx: ReconcileContext) -> None:
        name = o.name(node)
        ctx.ensure_may_act(f"delete node {name}")
        try:
            await self.client.delete(NODES, name, preconditions={"uid": o.uid(node)})
        except errors.NotFound:
            return
        except errors.Conflict:
            return  # a node of that name registered again: not the one whose server we deleted
        log.info("node removed", node=name)

    # ------------------------------------------------------------------ writes

    async def _record(self, node: Obj, progress: Progress, step: Step) -> tuple[Obj, Progress]:
        key = self.keys.delete_progress
        return await record_step(self.client, node, key, progress, step, self.clock.now())

    async def _discard_progress(self, node: Obj, reason: str) -> Obj:
        self._warn(node, "InvalidProgress", f"{self.keys.delete_progress}: {reason}; starting over")
        return await self._patch(
            node, {"metadata": {"annotations": {self.keys.delete_progress: None}}}
        )

    async def _patch(self, node: Obj, body: Obj) -> Obj:
        return await patch_node(self.client, node, body)

    def _warn(self, node: Obj, reason: str, note: str) -> None:
        """A step of the delete flow failed or stalled: a Warning on the node, counted."""
        FAILURES.labels(reason).inc()
        self.events.event(node, WARNING, reason, _ACTION, note)
