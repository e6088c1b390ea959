"""The attach pass: the steps that put a returned node back in exactly the targets it left.

Only targets the record shows the node left are registered again (each recorded as Registering
before the call), then the node's marks, cordon and drain taint are removed.
"""

from __future__ import annotations

from typing import Any

import structlog

from nodeops.controllers.detacher import signals
from nodeops.controllers.detacher.metrics import TRANSITIONS
from nodeops.controllers.detacher.passes import Pass, micro
from nodeops.controllers.detacher.record import LEFT, NOT_REGISTERED, REGISTERED, REGISTERING
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT
from nodeops.kube import NORMAL, Result
from nodeops.kube import objects as o

__all__ = ["AttachPass"]

log = structlog.get_logger(__name__)


class AttachPass(Pass):
    """Register the returned node again in exactly the targets it left, then clear its marks."""

    async def run(self) -> Result | None:
        live, reasons = await self.r.live_reasons(self.name, self.record)
        if live is None or reasons:
            log.info(
                "the cache said the node is back, the API server says not; waiting",
                node=self.name,
            )
            return None
        self.node = live
        instance = self.status.get("instanceId") or await self.r.instance_of(self.node)
        pending = [i for i, row in enumerate(self.rows) if row.state in LEFT]
        if self.record is not None and pending:
            if self.status.get("phase") != "Attaching":
                await self.save(phase="Attaching", message="registering the node again")
                self.r.events.event(
                    self.node,
                    NORMAL,
                    "Attaching",
                    "Attach",
                    f"the node is back: registering it in {len(pending)} target(s) again",
                )
            for i in pending:
                row = self.rows[i]
                if instance is None:
                    break
                await self.intend(i, REGISTERING)
                self.ctx.ensure_may_act(f"register {instance} in {row.kind} {row.name}")
                call = self.r.provider.register(row.target, instance)
                if not await self.target_call(i, "register", call, NOT_REGISTERED, "Attach"):
                    continue
                self.set_row(
                    i,
                    self.rows[i].to(REGISTERED, registered_at=micro(self.r.now()), message=None),
                )
                await self.save()
                log.info("registered", node=self.name, target=row.name, port=row.port)
            self.r.inventory.forget()
        await self.unmark()
        if self.record is not None and self.status.get("phase") != "Attached":
            count = sum(1 for row in self.rows if row.state == REGISTERED)
            await self.save(
                phase="Attached",
                attachedAt=micro(self.r.now()),
                reason=None,
                message=f"registered in {count} load balancer target(s)",
                cordoned=None,
                daemonSetPodsStopped=None,
            )
            TRANSITIONS.labels("Attached").inc()
            self.r.events.event(
                self.node, NORMAL, "Attached", "Attach", str(self.status["message"])
            )
        return None

    async def unmark(self) -> None:
        meta: dict[str, Any] = {}
        if signals.DETACHING_ANNOTATION in o.annotations_of(self.node):
            meta["annotations"] = {signals.DETACHING_ANNOTATION: None}
        if o.labels(self.node).get(signals.EXCLUDE_LABEL) == signals.EXCLUDE_LABEL_VALUE:
            meta["labels"] = {signals.EXCLUDE_LABEL: None}
        body: dict[str, Any] = {"metadata": meta} if meta else {}
        spec = self.node.get("spec") or {}
        if self.status.get("daemonSetPodsStopped"):
            taints = [t for t in spec.get("taints") or [] if t.get("key") != DAEMONSET_DRAIN_TAINT]
            if len(taints) != len(spec.get("taints") or []):
                body["spec"] = {"taints": taints or None}
        if self.status.get("cordoned") and spec.get("unschedulable"):
            body.setdefault("spec", {})["unschedulable"] = None
        if body:
            self.node = await self.r.patch_node(self.node, body, guarded="spec" in body)
        self.node = await self.r.set_condition(
            self.node, "False", "Attached", "back in its load balancers", moved=False
        )
