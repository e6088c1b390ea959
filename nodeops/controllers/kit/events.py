"""Events as controllers record them: a sink that is always there.

A controller may run without an event recorder (a library user's manager, a unit test), and
before this sink each controller wrapped every call in "if the recorder is not None". A null
sink states that choice once, where the controller is built.
"""

from __future__ import annotations

from typing import Any, Protocol

from nodeops.kube.events import EventRecorder

__all__ = ["NULL_EVENTS", "EventSink", "events_or_null"]


class EventSink(Protocol):
    """What a controller records events through (`EventRecorder` is one)."""

    def event(
        self, regarding: dict[str, Any], type_: str, reason: str, action: str, note: str
    ) -> None: ...


class _NullEvents:
    """Records nothing: for a controller run without an event recorder."""

    def event(
        self, regarding: dict[str, Any], type_: str, reason: str, action: str, note: str
    ) -> None:
        del regarding, type_, reason, action, note


NULL_EVENTS: EventSink = _NullEvents()


def events_or_null(recorder: EventRecorder | EventSink | None) -> EventSink:
    """`recorder`, or the sink that records nothing when there is none."""
    return NULL_EVENTS if recorder is None else recorder
