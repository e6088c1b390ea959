"""Per-kind rules of kube-apiserver's strategies, with its field paths and messages.

Each function returns the causes kube would list (reason, field, message as
`errors.invalid` takes them) so the registry can answer the same 422, or, for bodies kube could
not even decode, the decode error it answers with 400. Covered here:

- no finalizer may be added to an object that is being deleted (`ValidateObjectMetaUpdate`);
- Events: the legacy rules every Event passes, and the strict ones a create or update through
  events.k8s.io/v1 must pass (`ValidateEventCreate` / `ValidateEventUpdate`). kube validates the
  internal Event, so the paths are the internal names (`message`, `involvedObject`) even for a
  request that said `note` and `regarding`;
- Leases: `ValidateLeaseSpec`;
- `MicroTime` fields (Lease acquire/renew times, Event times) that do not parse.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from nodeops.common.gomessages import go_json, go_quote
from nodeops.common.selectors.labelsyntax import label_key_errors
from nodeops.sim.server.gotime import micro_time_error
from nodeops.sim.server.priority import (
    HIGHEST_USER_PRIORITY,
    PREEMPTION_POLICIES,
    SYSTEM_PRIORITY_CLASSES,
    SYSTEM_PRIORITY_PREFIX,
)
from nodeops.sim.server.resources import ResourceType

Cause = tuple[str, str, str]

_EVENTS_V1: Final = "events.k8s.io"
_LENGTH_LIMITS: Final = (
    ("reportingInstance", 128),
    ("action", 128),
    ("reason", 128),
)
_NOTE_LIMIT: Final = 1024
# Namespaces an Event about a cluster-scoped object may live in.
_CLUSTER_EVENT_NAMESPACES: Final = ("default", "kube-system")
# Fields of an Event that an update through events.k8s.io/v1 may not change (internal names).
_IMMUTABLE_EVENT_FIELDS: Final = (
    "reason",
    "message",
    "type",
    "action",
    "reportingController",
    "reportingInstance",
)


def required(field: str, detail: str = "") -> Cause:
    return ("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def forbidden(field: str, detail: str) -> Cause:
    return ("FieldValueForbidden", field, f"Forbidden: {detail}")


def invalid(field: str, value: Any, detail: str) -> Cause:
    shown = go_quote(value) if isinstance(value, str) else go_json(value)
    return ("FieldValueInvalid", field, f"Invalid value: {shown}: {detail}")


def _go_string_slice(values: list[str]) -> str:
    """Go's %#v of a []string."""
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


# ------------------------------------------------------------------ metadata


def no_new_finalizers(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """Once an object is being deleted its finalizers may only shrink."""
    old_meta = old.get("metadata") or {}
    if not old_meta.get("deletionTimestamp"):
        return []
    before = set(old_meta.get("finalizers") or [])
    added = sorted(set((new.get("metadata") or {}).get("finalizers") or []) - before)
    if not added:
        return []
    return [
        forbidden(
            "metadata.finalizers",
            "no new finalizers can be added if the object is being deleted, found new "
            f"finalizers {_go_string_slice(added)}",
        )
    ]


# ------------------------------------------------------------------ decoding


def _micro_time_fields(rt: ResourceType, obj: Mapping[str, Any]) -> Iterator[Any]:
    """The MicroTime values of `obj`, in the order a JSON decoder meets them."""
    if (rt.group, rt.kind) == ("coordination.k8s.io", "Lease"):
        spec = obj.get("spec")
        if isinstance(spec, Mapping):
            for key, value in spec.items():
                if key in ("acquireTime", "renewTime"):
                    yield value
    elif rt.kind == "Event" and rt.group in ("", _EVENTS_V1):
        for key, value in obj.items():
            if key == "eventTime":
                yield value
            elif key == "series" and isinstance(value, Mapping):
                for inner, when in value.items():
                    if inner == "lastObservedTime":
                        yield when


def decode_error(rt: ResourceType, obj: Mapping[str, Any]) -> str | None:
    """The error kube's JSON decoder stops at in this body, or None if it decodes."""
    for value in _micro_time_fields(rt, obj):
        problem = micro_time_error(value)
        if problem is not None:
            return problem
    return None


# ------------------------------------------------------------------ Events


def _event_view(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the Event rules read, under their internal names."""
    v1 = rt.group == _EVENTS_V1
    return {
        "namespace": (obj.get("metadata") or {}).get("namespace") or "",
        "involvedObject": (obj.get("regarding") if v1 else obj.get("involvedObject")) or {},
        "message": (obj.get("note") if v1 else obj.get("message")) or "",
        "reportingController": (
            obj.get("reportingController") if v1 else obj.get("reportingComponent")
        )
        or "",
        "reportingInstance": obj.get("reportingInstance") or "",
        "action": obj.get("action") or "",
        "reason": obj.get("reason") or "",
        "type": obj.get("type") or "",
        "eventTime": obj.get("eventTime"),
        "series": obj.get("series"),
        "firstTimestamp": obj.get("deprecatedFirstTimestamp" if v1 else "firstTimestamp"),
        "lastTimestamp": obj.get("deprecatedLastTimestamp" if v1 else "lastTimestamp"),
        "count": obj.get("deprecatedCount" if v1 else "count") or 0,
        "source": (obj.get("deprecatedSource" if v1 else "source")) or {},
    }


def _legacy_event(ev: Mapping[str, Any]) -> list[Cause]:
    """What every Event must satisfy, whichever API it came through."""
    causes: list[Cause] = []
    involved_ns = ev["involvedObject"].get("namespace") or ""
    namespace = ev["namespace"]
    mismatch = invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
    if not ev["eventTime"]:
        if not involved_ns:
            if namespace not in ("", "default"):
                causes.append(mismatch)
        elif namespace != involved_ns:
            causes.append(mismatch)
        return causes
    if not involved_ns and namespace not in _CLUSTER_EVENT_NAMESPACES:
        causes.append(mismatch)
    controller = ev["reportingController"]
    if not controller:
        causes.append(required("reportingController"))
    causes.extend(
        invalid("reportingController", controller, msg) for msg in label_key_errors(controller)
    )
    for field, limit in _LENGTH_LIMITS:
        value = ev[field]
        if not value:
            causes.append(required(field))
        elif len(value.encode()) > limit:
            causes.append(invalid(field, "", f"can have at most {limit} characters"))
    if len(ev["message"].encode()) > _NOTE_LIMIT:
        causes.append(invalid("message", "", f"can have at most {_NOTE_LIMIT} characters"))
    return causes


def _event_series(ev: Mapping[str, Any]) -> list[Cause]:
    series = ev["series"]
    if not isinstance(series, Mapping):
        return []
    causes: list[Cause] = []
    if int(series.get("count") or 0) < 2:
        causes.append(invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(required("series.lastObservedTime"))
    return causes


def _event_create(rt: ResourceType, obj: Mapping[str, Any]) -> list[Cause]:
    ev = _event_view(rt, obj)
    causes = _legacy_event(ev)
    if rt.group != _EVENTS_V1:
        return causes
    causes.extend(_event_series(ev))
    if not ev["eventTime"]:
        causes.append(required("eventTime"))
    if ev["type"] not in ("Normal", "Warning"):
        causes.append(invalid("type", "", f"has invalid value: {ev['type']}"))
    for field in ("firstTimestamp", "lastTimestamp"):
        if ev[field]:
            causes.append(invalid(field, "", "needs to be unset"))
    if ev["count"]:
        causes.append(invalid("count", "", "needs to be unset"))
    if ev["source"].get("component") or ev["source"].get("host"):
        causes.append(invalid("source", "", "needs to be unset"))
    return causes


def _event_update(rt: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    ev = _event_view(rt, new)
    causes = _legacy_event(ev)
    if rt.group != _EVENTS_V1:
        return causes
    before = _event_view(rt, old)
    if ev["series"] != before["series"]:
        causes.extend(_event_series(ev))
    for field in _IMMUTABLE_EVENT_FIELDS:
        if ev[field] != before[field]:
            causes.append(invalid(field, ev[field], "field is immutable"))
    return causes


# ------------------------------------------------------------------ Leases


def _lease_spec(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        causes.append(invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        causes.append(
            invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    if spec.get("preferredHolder") and not spec.get("strategy"):
        causes.append(
            forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined")
        )
    return causes


def _priority_class(obj: Mapping[str, Any]) -> list[Cause]:
    """`ValidatePriorityClass`: the `system-` names are kube's own, and no other class may
    rank above the highest a user may define."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    value = obj.get("value") or 0
    causes: list[Cause] = []
    if name.startswith(SYSTEM_PRIORITY_PREFIX):
        known = SYSTEM_PRIORITY_CLASSES.get(name)
        if known is None:
            why = f"{name} is not a known system priority class"
        elif value != known[0]:
            why = f"value of {name} PriorityClass must be {known[0]}"
        elif obj.get("globalDefault"):
            why = f"globalDefault of {name} PriorityClass must be false"
        else:
            why = ""
        if why:
            causes.append(
                forbidden(
                    "metadata.name",
                    f"priority class names with '{SYSTEM_PRIORITY_PREFIX}' prefix are reserved "
                    f"for system use only. error: {why}",
                )
            )
    elif isinstance(value, int) and value > HIGHEST_USER_PRIORITY:
        causes.append(
            forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}",
            )
        )
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        listed = ", ".join(f'"{p}"' for p in PREEMPTION_POLICIES)
        causes.append(
            (
                "FieldValueNotSupported",
                "preemptionPolicy",
                f"Unsupported value: {go_json(policy)}: supported values: {listed}",
            )
        )
    return causes


def _priority_class_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    if (new.get("value") or 0) != (old.get("value") or 0):
        # kube names the field as the Go struct does here.
        causes.append(forbidden("Value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        causes.append(
            invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable")
        )
    return causes


# ------------------------------------------------------------------ entry points


def _is_lease(rt: ResourceType) -> bool:
    return (rt.group, rt.kind) == ("coordination.k8s.io", "Lease")


def _is_event(rt: ResourceType) -> bool:
    return rt.kind == "Event" and rt.group in ("", _EVENTS_V1)


def _is_priority_class(rt: ResourceType) -> bool:
    return (rt.group, rt.kind) == ("scheduling.k8s.io", "PriorityClass")


def validate_create(rt: ResourceType, obj: Mapping[str, Any]) -> list[Cause]:
    if _is_event(rt):
        return _event_create(rt, obj)
    if _is_lease(rt):
        return _lease_spec(obj)
    if _is_priority_class(rt):
        return _priority_class(obj)
    return []


def validate_update(
    rt: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[Cause]:
    """The metadata rules first, then the kind's, in the order kube lists them."""
    causes = no_new_finalizers(old, new)
    if _is_event(rt):
        causes.extend(_event_update(rt, old, new))
    elif _is_lease(rt):
        causes.extend(_lease_spec(new))
    elif _is_priority_class(rt):
        causes.extend(_priority_class(new))
        causes.extend(_priority_class_update(old, new))
    return causes


def event_kind(rt: ResourceType) -> tuple[str, str]:
    """The (kind, group) kube names in an Event's Invalid error, whichever API was used.

    Both APIs store through the one core Event registry, whose internal type is registered
    first in the core group, so the error names `Event` with no group.
    """
    return ("Event", "") if _is_event(rt) else (rt.kind, rt.group)
