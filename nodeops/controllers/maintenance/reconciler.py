"""The Node reconciler: evaluate every profile of one node, then commit with one guarded write.

Serial by design (one worker): cluster-wide checks (maxMaintenance, affinity, stagger) decide
one node at a time and see every earlier decision, because the manager's informer serves this
controller's own writes before its next reconcile.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import structlog

from nodeops.controllers.kit import Clock, events_or_null
from nodeops.controllers.maintenance.cluster import CacheView
from nodeops.controllers.maintenance.engine import Engine, NodeOutcome
from nodeops.controllers.maintenance.info import InfoStore, node_info
from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.metrics import NODE_STATES, TRANSITION_FAILURES
from nodeops.controllers.maintenance.sender import NotificationSender
from nodeops.controllers.maintenance.shuffles import record_shuffles
from nodeops.controllers.maintenance.source import ConfigSource
from nodeops.kube.controller import ReconcileContext, Request, Result
from nodeops.kube.resources import NODES

log = structlog.get_logger(__name__)

RETRY_AFTER = 5.0  # a drain or another long step under way: look again this soon


class MaintenanceReconciler:
    def __init__(
        self,
        source: ConfigSource,
        keys: Keys,
        view: CacheView,
        sender: NotificationSender,
        info: InfoStore,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.source = source
        self.keys = keys
        self.view = view
        self.sender = sender
        self.info = info
        self.clock = clock or Clock()
        self.events = events_or_null(view.events)
        self.writes = 0
        self._background: set[asyncio.Task[Any]] = set()

    async def reconcile(
        self, request: Request, ctx: ReconcileContext | None = None
    ) -> Result | None:
        node = self.view.node(request.name)
        if node is None:
            self.info.remove(request.name)
            NODE_STATES.remove(request.name)
            return None
        config = self.source.current
        if ctx is not None and not ctx.may_act():
            return None
        now = self.clock.now()
        outcome = await Engine(config, self.keys, self.view).evaluate(node, now)
        if outcome.data_error:
            self._event(node, "Warning", "MaintenanceDataInvalid", outcome.data_error)
            log.error("maintenance record unreadable", node=request.name, error=outcome.data_error)
        elif outcome.patch is not None:
            await self._commit(node, outcome, ctx)
        self._after(node, outcome, config.label_filter, now)
        if outcome.retry:
            return Result(requeue_after=min(RETRY_AFTER, config.requeue))
        return Result(requeue_after=config.requeue)

    async def _commit(
        self, node: dict[str, Any], outcome: NodeOutcome, ctx: ReconcileContext | None
    ) -> None:
        try:
            if ctx is not None:
                ctx.ensure_may_act(f"commit maintenance state of node {outcome.node}")
            assert outcome.patch is not None
            await self.view.client.patch(NODES, outcome.node, outcome.patch, patch_type="merge")
            self.writes += 1
        except BaseException:
            for reservation in outcome.reservations:
                await reservation.release()
            raise
        self.sender.submit(outcome.notifications)
        for type_, reason, note in outcome.events:
            self._event(node, type_, reason, note)
        for profile in outcome.entered_maintenance:
            task = asyncio.create_task(record_shuffles(self.view, outcome.node, profile))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _after(
        self, node: dict[str, Any], outcome: NodeOutcome, label_filter: list[str], now: datetime
    ) -> None:
        for profile in set(outcome.failures):
            TRANSITION_FAILURES.labels(profile).inc()
        NODE_STATES.set(
            outcome.node, [(p.name, p.current.value) for p in outcome.profiles if p.known]
        )
        self.info.put(outcome.node, node_info(outcome, node, label_filter, now))
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(self.keys.log_details) == "true":
            for p in outcome.profiles:
                log.info(
                    "maintenance details",
                    node=outcome.node,
                    profile=p.name,
                    state=p.state.value,
                    next=p.current.value,
                    enter=p.enter,
                    transitions=[t.to_json() for t in p.transitions],
                )

    def _event(self, node: dict[str, Any], type_: str, reason: str, note: str) -> None:
        self.events.event(node, type_, reason, "Maintenance", note)
