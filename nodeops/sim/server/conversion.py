"""Conversion between the versions of a kind that share one storage.

kube-apiserver stores one version and converts on the way in and out; the simulator does the
same for the two pairs that matter to clients: PodDisruptionBudget policy/v1 <-> v1beta1 and
Event core/v1 <-> events.k8s.io/v1 (our event recorder writes the latter, kubectl reads the
former).
"""

from __future__ import annotations

from typing import Any

from nodeops.sim.server.resources import ResourceType

# events.k8s.io/v1 field <-> core/v1 field
_EVENT_FIELDS = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)


def _events_v1_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    for new, old in _EVENT_FIELDS:
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"] = "v1"
    return out


def _core_to_events_v1(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    for new, old in _EVENT_FIELDS:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def needs_conversion(rt: ResourceType, storage: ResourceType) -> bool:
    return rt.group_version != storage.group_version


def to_storage(rt: ResourceType, storage: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    if not needs_conversion(rt, storage):
        return obj
    if rt.kind == "Event" and rt.group == "events.k8s.io":
        return _events_v1_to_core(obj)
    out = dict(obj)
    out["apiVersion"] = storage.group_version
    return out


def from_storage(rt: ResourceType, storage: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    if not needs_conversion(rt, storage):
        return obj
    if rt.kind == "Event" and rt.group == "events.k8s.io":
        return _core_to_events_v1(obj)
    out = dict(obj)
    out["apiVersion"] = rt.group_version
    return out
