"""The LoadBalancerAttachment record as data: which targets to leave, and where each stands.

Pure functions over the record's spec and status, so every rule (what is recorded before a
deregistration, what is registered again) is testable without a cluster or a cloud.

A target in the spec is either written by hand or configured (`Static`, kept from one detach to
the next) or found when the node went away (`Discovered`, found again each time). The status
lists *concrete* targets, one per registration (a target group registers per port), each with
its state:

    Registered --(record)--> Deregistering --(cloud call)--> Draining --> Deregistered
    Deregistering/Draining/Deregistered --(record)--> Registering --(cloud call)--> Registered
    NotRegistered: not registered when the node went away, so never registered again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from nodeops.providers.base import LoadBalancerTarget

__all__ = [
    "LEFT",
    "TargetKey",
    "TargetRow",
    "plan_targets",
    "rows_from_status",
    "rows_to_status",
    "spec_targets",
    "static_targets",
]

TargetKey = tuple[str, str, int | None]

REGISTERED: Final = "Registered"
DEREGISTERING: Final = "Deregistering"
DRAINING: Final = "Draining"
DEREGISTERED: Final = "Deregistered"
REGISTERING: Final = "Registering"
NOT_REGISTERED: Final = "NotRegistered"

LEFT: Final = frozenset({DEREGISTERING, DRAINING, DEREGISTERED, REGISTERING})
"""States of a target the node was registered in and has (or may have) left: registered again
when the node comes back."""


def key_of(target: LoadBalancerTarget) -> TargetKey:
    return (target.kind, target.name, target.port)


@dataclass(frozen=True, slots=True)
class TargetRow:
    """One concrete target in the status."""

    kind: str
    name: str
    port: int | None
    state: str
    deregistered_at: str | None = None
    registered_at: str | None = None
    message: str | None = None

    @property
    def key(self) -> TargetKey:
        return (self.kind, self.name, self.port)

    @property
    def target(self) -> LoadBalancerTarget:
        return LoadBalancerTarget(self.kind, self.name, self.port)

    def to(self, state: str, **changes: Any) -> TargetRow:
        return replace(self, state=state, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind, "name": self.name}
        if self.port is not None:
            out["port"] = self.port
        out["state"] = self.state
        for key, value in (
            ("deregisteredAt", self.deregistered_at),
            ("registeredAt", self.registered_at),
            ("message", self.message),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TargetRow:
        port = raw.get("port")
        return cls(
            kind=str(raw.get("type", "")),
            name=str(raw.get("name", "")),
            port=int(port) if isinstance(port, int) else None,
            state=str(raw.get("state", REGISTERED)),
            deregistered_at=raw.get("deregisteredAt"),
            registered_at=raw.get("registeredAt"),
            message=raw.get("message"),
        )


def rows_from_status(status: Mapping[str, Any] | None) -> list[TargetRow]:
    return [TargetRow.from_dict(t) for t in (status or {}).get("targets") or [] if t]


def rows_to_status(rows: Iterable[TargetRow]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in rows]


def static_targets(spec: Mapping[str, Any] | None) -> list[LoadBalancerTarget]:
    """The record's hand-written targets (kept across detachments)."""
    out = []
    for raw in (spec or {}).get("targets") or []:
        if raw.get("source", "Static") == "Static":
            port = raw.get("port")
            out.append(LoadBalancerTarget(str(raw["type"]), str(raw["name"]), port))
    return out


def spec_targets(
    static: Sequence[LoadBalancerTarget], discovered: Sequence[LoadBalancerTarget]
) -> list[dict[str, Any]]:
    """The spec's target list: static entries as written, then what was found besides."""
    out: list[dict[str, Any]] = []
    seen: set[TargetKey] = set()
    for source, targets in (("Static", static), ("Discovered", discovered)):
        for t in targets:
            if key_of(t) in seen:
                continue
            seen.add(key_of(t))
            entry: dict[str, Any] = {"type": t.kind, "name": t.name}
            if t.port is not None:
                entry["port"] = t.port
            entry["source"] = source
            out.append(entry)
    return out


@dataclass(slots=True)
class Plan:
    """What a detachment starts from: the spec to record and the status rows."""

    spec: list[dict[str, Any]] = field(default_factory=list)
    rows: list[TargetRow] = field(default_factory=list)


def _covers(static: LoadBalancerTarget, registered: LoadBalancerTarget) -> bool:
    """A static target names a registration: same load balancer, and the same port unless the
    static one leaves it open (then every port the instance is registered on)."""
    return (
        static.kind == registered.kind
        and static.name == registered.name
        and (static.port is None or static.port == registered.port)
    )


def plan_targets(
    static: Sequence[LoadBalancerTarget],
    registered: Sequence[LoadBalancerTarget],
    *,
    kinds: Collection[str],
    static_only: bool = False,
) -> Plan:
    """The targets to leave: every registration of a managed kind (only those a static target
    names when `static_only`), plus static targets the instance is not registered in, recorded
    as NotRegistered so that nothing registers the node there later."""
    wanted = [
        r
        for r in registered
        if r.kind in kinds and (not static_only or any(_covers(s, r) for s in static))
    ]
    rows: dict[TargetKey, TargetRow] = {}
    for r in wanted:
        rows.setdefault(key_of(r), TargetRow(r.kind, r.name, r.port, REGISTERED))
    for s in static:
        if s.kind in kinds and not any(_covers(s, r) for r in wanted):
            rows.setdefault(key_of(s), TargetRow(s.kind, s.name, s.port, NOT_REGISTERED))
    static_keys = {key_of(s) for s in static}
    discovered = [r for r in wanted if key_of(r) not in static_keys]
    return Plan(spec=spec_targets(static, discovered), rows=list(rows.values()))


def newly_registered(
    rows: Sequence[TargetRow], registered: Sequence[LoadBalancerTarget], *, kinds: Collection[str]
) -> list[LoadBalancerTarget]:
    """Registrations of a detached instance the record does not show as live: made behind the
    detacher's back (a controller registering the node again) or missed by an older scan."""
    known = {r.key: r for r in rows}
    out = []
    for t in registered:
        if t.kind not in kinds:
            continue
        row = known.get(key_of(t))
        if row is None or row.state in (DEREGISTERED, NOT_REGISTERED):
            out.append(t)
    return out
