"""Decoding helpers of list and watch-list responses, and the errors a watch-list sync raises.

A sync is decoded without building the whole response as Python objects (a 150,000-pod list
must not need gigabytes), so these helpers read only the parts they need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from nodeops.kube import errors

# The annotation of the bookmark that ends a watch-list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(slots=True)
class _Sync:
    """A watch-list's initial state in progress: the keys it brought, how many events."""

    seen: set[str] = field(default_factory=set)
    events: int = 0
    done: bool = False


class _NoWatchList(errors.KubeError):
    """The server did not stream the initial state; `refused` if it never will for this
    resource (it answered with a plain watch), not just this time."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


class _IncompleteSync(errors.KubeError):
    """A watch-list ended before the bookmark that completes its initial state."""


def _list_head(payload: bytes) -> dict[str, Any] | None:
    """A list page's `metadata` from the bytes before its items, or None if they are not there.

    kube-apiserver writes `{"kind":..,"apiVersion":..,"metadata":{..},"items":[..]}`. The head
    closed with one brace decodes only if the `,"items":` found is a member of the top-level
    object (at any other depth one brace cannot close what is open), so a head that decodes is
    the page's own, and one that does not falls back to decoding the page first.
    """
    end = payload.find(b',"items":')
    if end < 0:
        return None
    try:
        head = orjson.loads(payload[:end] + b"}")
    except orjson.JSONDecodeError:
        return None
    meta = head.get("metadata") if isinstance(head, dict) else None
    return meta if isinstance(meta, dict) else None
