"""The election record a Lease carries, read and written as client-go's LeaseLock does.

Equality of two records is what "the record changed" means for expiry, so the record holds
exactly the fields client-go compares, and nothing else of the Lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["MICRO_TIME", "LeaseRecord", "micro_now"]

MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
"""metav1.MicroTime's format, which the Lease's acquireTime and renewTime use."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election-relevant part of a Lease spec; equality is what "the record changed" means."""

    holder: str
    lease_duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def micro_now() -> str:
    """Now, as a Lease's acquireTime or renewTime."""
    return datetime.now(UTC).strftime(MICRO_TIME)
