"""`metav1.Condition` and the helpers that keep a status' conditions the way apimachinery does.

Statuses are written back as plain dicts, so the helpers work on the status dict itself. They copy
`meta.SetStatusCondition` exactly, because clients (kubectl wait, dashboards, other controllers)
rely on `lastTransitionTime` meaning "when the status last flipped", not "when we last wrote it".
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, field_serializer

from nodeops.api.meta import ApiModel, NonNegativeInt64

__all__ = [
    "Condition",
    "ConditionStatus",
    "Conditions",
    "find_condition",
    "format_time",
    "is_condition_true",
    "remove_condition",
    "set_condition",
]

ConditionStatus = Literal["True", "False", "Unknown"]

# The validation markers of metav1.Condition, so a condition we write is one kube accepts.
_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


def format_time(t: datetime) -> str:
    """metav1.Time's wire form: RFC 3339 in UTC at whole seconds."""
    if t.tzinfo is None:
        raise ValueError("a Kubernetes timestamp needs a time zone")
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Condition(ApiModel):
    """One aspect of the current state of a resource."""

    type: Annotated[str, Field(pattern=_TYPE_PATTERN, max_length=316)]
    """The type of condition in CamelCase or in foo.example.com/CamelCase."""
    status: ConditionStatus
    """The status of the condition: True, False or Unknown."""
    observed_generation: NonNegativeInt64 | None = None
    """The .metadata.generation the condition was set based upon."""
    last_transition_time: Annotated[AwareDatetime, Field(strict=False)]
    """The last time the condition transitioned from one status to another."""
    reason: Annotated[str, Field(pattern=_REASON_PATTERN, min_length=1, max_length=1024)]
    """A programmatic identifier, in CamelCase, of the reason for the last transition."""
    message: Annotated[str, Field(max_length=32768)]
    """A human readable message with details about the transition. May be empty."""

    @field_serializer("last_transition_time", when_used="json")
    def _rfc3339(self, value: datetime) -> str:
        return format_time(value)


Conditions = Annotated[
    list[Condition],
    Field(
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    ),
]
"""A status' `conditions`: a list keyed by type, so server-side apply merges them by type."""


def _conditions(status: Mapping[str, Any] | None) -> list[Any]:
    found = (status or {}).get("conditions")
    return found if isinstance(found, list) else []


def find_condition(status: Mapping[str, Any] | None, type: str) -> dict[str, Any] | None:
    """The condition of `type` in `status`, or None."""
    for cond in _conditions(status):
        if isinstance(cond, dict) and cond.get("type") == type:
            return cond
    return None


def is_condition_true(status: Mapping[str, Any] | None, type: str) -> bool:
    cond = find_condition(status, type)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    status: MutableMapping[str, Any],
    type: str,
    condition_status: ConditionStatus,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: datetime | None = None,
) -> bool:
    """Add or update the condition of `type` in `status["conditions"]`; True if anything changed.

    `lastTransitionTime` is set to `now` only when the condition is new or its status flips; a
    change of reason or message alone keeps it, as meta.SetStatusCondition does. The returned
    flag lets a reconciler skip a status write that would change nothing. `now` defaults to the
    wall clock; pass the simulated clock's time when there is one.
    """
    when = now if now is not None else datetime.now(UTC)
    # Validate through the model so a malformed type or reason fails here, in the code that
    # chose it, rather than as a 422 from the API server on the status write.
    new = Condition(
        type=type,
        status=condition_status,
        reason=reason,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=when,
    ).to_dict()
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = status["conditions"] = []
    existing = find_condition(status, type)
    if existing is None:
        conditions.append(new)
        return True
    changed = False
    if existing.get("status") != condition_status:
        existing["status"] = condition_status
        existing["lastTransitionTime"] = new["lastTransitionTime"]
        changed = True
    for key in ("reason", "message"):
        if existing.get(key) != new[key]:
            existing[key] = new[key]
            changed = True
    if existing.get("observedGeneration") != observed_generation:
        if observed_generation is None:
            existing.pop("observedGeneration", None)
        else:
            existing["observedGeneration"] = observed_generation
        changed = True
    return changed


def remove_condition(status: MutableMapping[str, Any], type: str) -> bool:
    """Drop the condition of `type`; True if there was one."""
    conditions = _conditions(status)
    kept = [c for c in conditions if not (isinstance(c, dict) and c.get("type") == type)]
    if len(kept) == len(conditions):
        return False
    status["conditions"] = kept
    return True
