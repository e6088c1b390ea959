"""Writing a status: a merge patch of what changed, guarded by resourceVersion.

A level-based reconciler keeps every fact it needs in status and moves between phases by
writing it, so this is also where a transition is made visible: the phase's timestamp, an
Event, a log line and (through `observe`) the controller's transition metrics. A write that
would change nothing is not sent, which is what keeps a reconcile that finds nothing to do from
waking itself through its own watch.

Nothing here deep-copies a status: a view's status is the one of the object it was built from (a
reconcile's own decoding of the cache, or the answer to its own write), a commit builds the new
status as a shallow copy of it, and the merge patch refers to the new values it is serialised
from. A request's status lists every node it replaces, so a deep copy on every read and write
was work that grew with the size of the roll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from nodeops.api.conditions import format_time, set_condition
from nodeops.controllers.kit.clock import Clock
from nodeops.controllers.kit.events import NULL_EVENTS, EventSink
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import Resource

__all__ = ["StatusWriter", "TransitionObserver", "View", "merge_patch", "timestamp"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

TransitionObserver = Callable[[str, str, str, float | None], None]
"""Told of each phase change: (kind, previous phase or "", new phase, seconds in the previous
phase when known); where a controller counts its transitions."""


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
            patch[key] = value  # serialised at once, never kept: no copy
    return patch


@dataclass
class View:
    """One object as a reconcile sees it: the object read and its status.

    `obj` is the reconcile's own: an informer decodes a new object on every read and a write
    returns a new one, so the view takes its status as it is. The status is read, never edited
    in place: changes go through `StatusWriter.commit`, which compares them with it.
    """

    obj: Obj
    status: Obj = field(init=False)

    def __post_init__(self) -> None:
        self.status = self.obj.get("status") or {}

    def update(self, obj: Obj) -> None:
        """Go on with `obj`, the object as a write of ours returned it."""
        self.obj = obj
        self.status = obj.get("status") or {}

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


def _own_conditions(conditions: Any) -> Any:
    """A copy of a conditions list that `set_condition` may edit without touching the view's
    status (or a caller's list): each condition is a flat mapping, so one level deep is all."""
    if not isinstance(conditions, list):
        return conditions
    return [dict(c) if isinstance(c, Mapping) else c for c in conditions]


class StatusWriter:
    """Commits status changes of one resource's objects.

    `progress_condition` names a condition that a new phase sets to False ("Progressing"):
    whatever blocked the previous phase no longer does. `on_transition` is awaited after a
    phase change was written (a notification); `observe` is told of it (metrics). `action` is
    the Event action of a reason given without a phase change.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        events: EventSink = NULL_EVENTS,
        clock: Clock | None = None,
        on_transition: Callable[[View], Awaitable[None]] | None = None,
        observe: TransitionObserver | None = None,
        progress_condition: str | None = None,
        action: str = "Update",
    ) -> None:
        self.client = client
        self.resource = resource
        self.events = events
        self.clock = clock or Clock()
        self.on_transition = on_transition
        self.observe = observe
        self.progress_condition = progress_condition
        self.action = action

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

        A None in `changes` removes that field. `reason` names the transition in the Event
        (default: the phase). Raises Conflict when the object changed since it was read: the
        reconcile is retried on the newer object.
        """
        # A shallow copy: top-level fields are replaced, never edited, except the conditions,
        # which `set_condition` edits in place and which are copied before it does.
        new = dict(view.status)
        new.update(changes or {})
        for key in [k for k, v in new.items() if v is None]:
            del new[key]
        old_phase = view.phase
        previous_start = view.time("phaseTimestamp")
        now = self.clock.now()
        entered = phase is not None and phase != old_phase
        if entered:
            assert phase is not None
            new["phase"] = phase
            new["phaseTimestamp"] = timestamp(now)
        if message is not None:
            new["message"] = message
        blocked = self.progress_condition
        clears = bool(entered and blocked and (condition is None or condition[0] != blocked))
        if (clears or condition is not None) and "conditions" in new:
            new["conditions"] = _own_conditions(new["conditions"])
        if clears:
            assert blocked is not None
            set_condition(new, blocked, "False", "Progressing", f"entered phase {phase}", now=now)
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
        view.update(written)
        type_ = "Warning" if warning else "Normal"
        if entered:
            assert phase is not None
            await self._entered(view, old_phase, phase, previous_start, now, reason, message, type_)
        elif reason and message:
            self.events.event(view.obj, type_, reason, self.action, message)
        return True

    async def _entered(
        self,
        view: View,
        old_phase: str,
        phase: str,
        previous_start: datetime | None,
        now: datetime,
        reason: str | None,
        message: str | None,
        type_: str,
    ) -> None:
        kind = self.resource.kind
        if self.observe is not None:
            seconds = None
            if old_phase and previous_start is not None:
                seconds = max(0.0, (now - previous_start).total_seconds())
            self.observe(kind, old_phase, phase, seconds)
        log.info(
            "transition",
            kind=kind,
            object=o.ref(view.obj),
            phase=phase,
            previous=old_phase or "Undefined",
            message=message or "",
        )
        note = message or f"entered phase {phase}"
        self.events.event(view.obj, type_, reason or phase, "Transition", note)
        if self.on_transition is not None:
            await self.on_transition(view)
