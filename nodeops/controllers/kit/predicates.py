"""When a node update is news for a controller: anything but the kubelet's heartbeats.

A kubelet writes its node's status every few seconds (heartbeat times, images, resource usage);
a controller that reconciled on each of those would spend most of its work on nothing. What
makes a node leave, come back or change its maintenance state lives in its spec, its metadata,
its conditions' statuses and its kubelet version, so those are what this predicate compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeops.kube import objects as o

__all__ = ["node_changed"]


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
