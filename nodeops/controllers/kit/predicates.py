"""When an update is news for a controller.

A node: anything but the kubelet's heartbeats. A kubelet writes its node's status every few
seconds (heartbeat times, images, resource usage); a controller that reconciled on each of those
would spend most of its work on nothing. What makes a node leave, come back or change its
maintenance state lives in its spec, its metadata, its conditions' statuses and its kubelet
version, so those are what `node_changed` compares.

A controller's own object: anything but the notes it writes for people. A drain rewrites its
status message as pods leave ("3 pods left ..."); if that write woke the reconciler it came
from, every note would cost one more pass, and every owner of the object one more reconcile,
for nothing the pass did not already know. `more_than_notes_changed` ignores the status's
`message` and `conditions`; a phase, a field a reconciler acts on, the spec or the metadata
still count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeops.kube import objects as o

__all__ = ["NOTES", "more_than_notes_changed", "node_changed"]

NOTES = frozenset({"message", "conditions"})
"""Status fields written for people to read, which no reconciler acts on."""


def _conditions(node: Mapping[str, Any]) -> list[tuple[Any, Any, Any]]:
    """Each condition's type, status and reason; its heartbeat and transition times are not
    news on their own."""
    return [
        (c.get("type"), c.get("status"), c.get("reason"))
        for c in (node.get("status") or {}).get("conditions") or ()
    ]


def _kubelet_version(node: Mapping[str, Any]) -> Any:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")


def node_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when `new` differs from `old` in more than the kubelet's heartbeats."""
    old_meta, new_meta = o.meta(old), o.meta(new)
    return (
        (old.get("spec") or {}) != (new.get("spec") or {})
        or o.labels(old) != o.labels(new)
        or o.annotations_of(old) != o.annotations_of(new)
        or old_meta.get("finalizers") != new_meta.get("finalizers")
        or old_meta.get("deletionTimestamp") != new_meta.get("deletionTimestamp")
        or _conditions(old) != _conditions(new)
        or _kubelet_version(old) != _kubelet_version(new)
    )


_BOOKKEEPING = frozenset({"resourceVersion", "managedFields"})


def more_than_notes_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when `new` differs from `old` in more than its status's notes (`NOTES`) and the
    resourceVersion and managed fields every write changes."""
    if (old.get("spec") or {}) != (new.get("spec") or {}):
        return True
    old_meta, new_meta = o.meta(old), o.meta(new)
    if old_meta.keys() - _BOOKKEEPING != new_meta.keys() - _BOOKKEEPING or any(
        old_meta[k] != new_meta[k] for k in old_meta.keys() - _BOOKKEEPING
    ):
        return True
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    if old_status.keys() - NOTES != new_status.keys() - NOTES:
        return True
    return any(old_status[k] != new_status[k] for k in old_status.keys() - NOTES)
