"""What a detach pass and an attach pass share: the record of one pass over one node.

A pass reads the node's record once, keeps its status and target rows in hand, and writes them
back after every step, so the steps read as a sequence while each one is recorded before the next
is taken (see `reconciler`). The provider calls about one target are made and counted here, with
one answer to a refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from nodeops.controllers.detacher.metrics import TARGET_CALLS
from nodeops.controllers.detacher.record import TargetRow, rows_from_status, rows_to_status
from nodeops.kube import WARNING, ReconcileContext
from nodeops.kube import objects as o
from nodeops.providers.base import ProviderError

if TYPE_CHECKING:
    from nodeops.controllers.detacher.reconciler import DetacherReconciler

__all__ = ["SOON", "Pass", "epoch", "micro"]

Obj = dict[str, Any]

SOON: Final = 0.05
"""A requeue for the next step of work already decided (a delay of 0 means no requeue)."""


def micro(t: datetime) -> str:
    """RFC 3339 with microseconds: deregistrations come seconds apart and their order counts."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch(value: str | None) -> float | None:
    parsed = o.parse_time(value)
    return parsed.timestamp() if parsed is not None else None


class Pass:
    """State shared by one detach or attach pass."""

    def __init__(
        self,
        r: DetacherReconciler,
        ctx: ReconcileContext,
        node: Obj,
        record: Obj | None,
    ) -> None:
        self.r = r
        self.ctx = ctx
        self.node = node
        self.record = record
        self.status: dict[str, Any] = dict((record or {}).get("status") or {})
        self.rows = rows_from_status(self.status)
        self.confirmed = False

    @property
    def name(self) -> str:
        return o.name(self.node)

    async def save(self, **changes: Any) -> None:
        assert self.record is not None
        self.status.update(changes)
        self.status["targets"] = rows_to_status(self.rows)
        self.status["observedGeneration"] = o.meta(self.record).get("generation")
        self.record = await self.r.write_status(self.record, self.status)

    def set_row(self, index: int, row: TargetRow) -> None:
        self.rows[index] = row

    async def intend(self, index: int, state: str) -> None:
        """Record the call about to be made on a target (Deregistering, Registering) first."""
        if self.rows[index].state != state:
            self.set_row(index, self.rows[index].to(state, message=None))
            await self.save()

    async def target_call(
        self, index: int, verb: str, call: Awaitable[None], refused: str, action: str
    ) -> bool:
        """Make a provider call about one target, counted; False when the provider refused it
        for good (the row goes to `refused` with the reason, and a Warning says so). A refusal
        worth retrying is raised: the controller retries it with backoff."""
        try:
            await call
        except ProviderError as exc:
            TARGET_CALLS.labels(verb, exc.code).inc()
            if exc.retryable:
                raise
            self.set_row(index, self.rows[index].to(refused, message=str(exc)))
            await self.save()
            reason = f"{verb.capitalize()}Failed"
            self.r.events.event(self.node, WARNING, reason, action, str(exc))
            return False
        TARGET_CALLS.labels(verb, "ok").inc()
        return True
