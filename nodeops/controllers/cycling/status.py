"""Writing a status: a merge patch of what changed, guarded by resourceVersion.

Both reconcilers keep every fact they need in status and move between phases by writing it, so
this is also where a transition is made visible: the phase's timestamp, an Event, a log line and
the transition metrics. A write that would change nothing is not sent, which is what keeps a
reconcile that finds nothing to do from waking itself through its own watch.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from nodeops.api.conditions import format_time, set_condition
from nodeops.controllers.cycling.metrics import PHASE_SECONDS, TRANSITIONS
from nodeops.controllers.cycling.timebase import TimeBase
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder
from nodeops.kube.resources import Resource

__all__ = ["StatusWriter", "View", "merge_patch", "timestamp"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


def timestamp(t: datetime) -> str:
    return format_time(t)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """The RFC 7386 merge patch that turns `old` into `new` (lists are replaced whole)."""
    patch: Obj = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping) and value:
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value:
            patch[key] = copy.deepcopy(value)
    return patch


@dataclass
class View:
    """One object as a reconcile sees it: the object read and a copy of its status to edit."""

    obj: Obj
    status: Obj = field(init=False)

    def __post_init__(self) -> None:
        self.status = copy.deepcopy(self.obj.get("status") or {})

    @property
    def name(self) -> str:
        return o.name(self.obj)

    @property
    def namespace(self) -> str:
        return o.namespace(self.obj)

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    def time(self, key: str) -> datetime | None:
        value = self.status.get(key)
        return o.parse_time(value) if isinstance(value, str) else None

    def nodes(self, key: str) -> list[Obj]:
        return [dict(n) for n in self.status.get(key) or ()]


class StatusWriter:
    def __init__(
        self,
        client: Client,
        resource: Resource,
        events: EventRecorder | None,
        time: TimeBase,
        *,
        on_transition: Callable[[View], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.events = events
        self.time = time
        self.on_transition = on_transition

    async def commit(
        self,
        view: View,
        changes: Mapping[str, Any] | None = None,
        *,
        phase: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        warning: bool = False,
        condition: tuple[str, str, str, str] | None = None,
    ) -> bool:
        """Write `changes` (and a new phase, message, condition) to the status; True if sent.

        `reason` names the transition in the Event (default: the phase). Raises Conflict when
        the object changed since it was read: the reconcile is retried on the newer object.
        """
        new = copy.deepcopy(view.status)
        new.update(changes or {})
        for key in [k for k, v in new.items() if v is None]:
            del new[key]
        old_phase = view.phase
        previous_start = view.time("phaseTimestamp")
        now = self.time.now()
        entered = phase is not None and phase != old_phase
        if entered:
            assert phase is not None
            new["phase"] = phase
            new["phaseTimestamp"] = timestamp(now)
        if message is not None:
            new["message"] = message
        if entered and (condition is None or condition[0] != "Blocked"):
            # A new phase is progress: whatever blocked the previous one no longer does.
            set_condition(new, "Blocked", "False", "Progressing", f"entered phase {phase}", now=now)
        if condition is not None:
            ctype, cstatus, creason, cmessage = condition
            set_condition(new, ctype, cstatus, creason, cmessage, now=now)  # type: ignore[arg-type]
        patch = merge_patch(view.status, new)
        if not patch:
            return False
        body = {"metadata": {"resourceVersion": o.meta(view.obj).get("resourceVersion")}}
        body["status"] = patch
        written = await self.client.patch(
            self.resource,
            view.name,
            body,
            view.namespace or None,
            subresource="status",
            patch_type="merge",
        )
        view.obj = written
        view.status = copy.deepcopy(written.get("status") or {})
        if entered:
            assert phase is not None
            kind = self.resource.kind
            TRANSITIONS.labels(kind, phase).inc()
            if old_phase and previous_start is not None:
                PHASE_SECONDS.labels(kind, old_phase).observe(
                    max(0.0, (now - previous_start).total_seconds())
                )
            note = message or f"entered phase {phase}"
            log.info(
                "transition",
                kind=kind,
                object=o.ref(view.obj),
                phase=phase,
                previous=old_phase or "Undefined",
                message=message or "",
            )
            if self.events is not None:
                self.events.event(
                    view.obj,
                    "Warning" if warning else "Normal",
                    reason or phase,
                    "Transition",
                    note,
                )
            if self.on_transition is not None:
                await self.on_transition(view)
        elif reason and self.events is not None and message:
            self.events.event(
                view.obj, "Warning" if warning else "Normal", reason, "Cycle", message
            )
        return True
