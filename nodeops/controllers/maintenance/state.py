"""The per-node state record, in the reference's JSON shape.

```json
{"Profiles": {"flatcar": {"Transition": "2026-07-01T10:00:00Z",
                          "Current": "in-maintenance", "Previous": "maintenance-required"}},
 "Notifications": {"approval_required": "2026-07-01T09:00:00Z"}}
```
`Previous != Current` means the current state's `enter` chain has not completed yet; it is rerun
until it does (crash-safe: the record is the only memory). Unknown fields are kept, so a newer
writer's additions survive an older reader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson


class State(enum.StrEnum):
    OPERATIONAL = "operational"
    REQUIRED = "maintenance-required"
    IN_MAINTENANCE = "in-maintenance"


STATES = tuple(State)
_RANK = {State.OPERATIONAL: 0, State.REQUIRED: 1, State.IN_MAINTENANCE: 2}


def aggregate(states: list[State]) -> State:
    """The node's label value: the most advanced state of any profile."""
    return max(states, key=_RANK.__getitem__, default=State.OPERATIONAL)


class DataError(ValueError):
    """The data annotation cannot be read; the message says where."""


def _parse_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a timestamp string, got {value!r}")
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Go writes up to nine fractional digits; Python reads six.
    if "." in text:
        head, _, rest = text.partition(".")
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        tz = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise DataError(f"{where}: bad timestamp {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_time(value: datetime) -> str:
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def _state(value: Any, where: str) -> State:
    try:
        return State(value)
    except ValueError:
        raise DataError(f"{where}: unknown state {value!r}") from None


@dataclass
class ProfileData:
    current: State
    previous: State
    transition: datetime
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def entered(self) -> bool:
        """The current state's enter chain has completed."""
        return self.previous == self.current

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "Transition": format_time(self.transition),
            "Current": self.current.value,
            "Previous": self.previous.value,
        }


@dataclass
class NodeData:
    profiles: dict[str, ProfileData] = field(default_factory=dict)
    notifications: dict[str, datetime] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> NodeData:
        if not text:
            return cls()
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DataError(f"not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise DataError("expected a JSON object")
        data = cls(extra={k: v for k, v in raw.items() if k not in ("Profiles", "Notifications")})
        profiles = raw.get("Profiles") or {}
        if not isinstance(profiles, dict):
            raise DataError("Profiles: expected an object")
        for name, entry in profiles.items():
            where = f"Profiles.{name}"
            if not isinstance(entry, dict):
                raise DataError(f"{where}: expected an object")
            current = _state(entry.get("Current"), f"{where}.Current")
            previous = _state(entry.get("Previous", entry.get("Current")), f"{where}.Previous")
            transition = _parse_time(entry.get("Transition"), f"{where}.Transition")
            extra = {
                k: v for k, v in entry.items() if k not in ("Current", "Previous", "Transition")
            }
            data.profiles[name] = ProfileData(current, previous, transition, extra)
        notifications = raw.get("Notifications") or {}
        if not isinstance(notifications, dict):
            raise DataError("Notifications: expected an object")
        for name, when in notifications.items():
            data.notifications[name] = _parse_time(when, f"Notifications.{name}")
        return data

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "Profiles": {k: v.to_json() for k, v in self.profiles.items()},
            "Notifications": {k: format_time(v) for k, v in self.notifications.items()},
        }

    def dumps(self) -> str:
        return orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS).decode()
