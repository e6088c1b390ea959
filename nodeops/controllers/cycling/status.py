"""Writing a cycling status: the kit's status writer with cycling's transition metrics and its
"Blocked" condition, which every new phase clears (whatever blocked the previous phase no
longer does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nodeops.controllers.cycling.metrics import PHASE_SECONDS, TRANSITIONS
from nodeops.controllers.kit import (
    Clock,
    EventSink,
    View,
    events_or_null,
    merge_patch,
    timestamp,
)
from nodeops.controllers.kit import StatusWriter as KitStatusWriter
from nodeops.kube.client import Client
from nodeops.kube.resources import Resource

__all__ = ["StatusWriter", "View", "count_transition", "merge_patch", "timestamp"]


def count_transition(kind: str, previous: str, phase: str, seconds: float | None) -> None:
    """Cycling's transition metrics: each phase entered, and how long the previous one took."""
    TRANSITIONS.labels(kind, phase).inc()
    if previous and seconds is not None:
        PHASE_SECONDS.labels(kind, previous).observe(seconds)


class StatusWriter(KitStatusWriter):
    def __init__(
        self,
        client: Client,
        resource: Resource,
        events: EventSink | None,
        time: Clock,
        *,
        on_transition: Callable[[View], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(
            client,
            resource,
            events=events_or_null(events),
            clock=time,
            on_transition=on_transition,
            observe=count_transition,
            progress_condition="Blocked",
            action="Cycle",
        )
