"""What a candidate contends for, as whom, and with which timing, checked before it contends.

A timing that lets a leader act after others may take over would produce two leaders, so the
configuration refuses it on construction, at start-up, rather than in the middle of a handover.
"""

from __future__ import annotations

import math
import socket
import uuid
from dataclasses import dataclass

__all__ = ["JITTER_FACTOR", "LeaderElectionConfig", "default_identity"]

JITTER_FACTOR = 1.2
"""client-go's `JitterFactor`: acquire attempts are spread over [1, 2.2) retry periods so that
candidates started together do not keep hitting the server in lockstep."""


def default_identity() -> str:
    """`hostname_uuid`, as controller-runtime builds it.

    The uuid keeps a restarted pod with the same hostname from being mistaken for its previous
    incarnation, which would let it skip the wait for the old lease to expire.
    """
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class LeaderElectionConfig:
    """Which Lease to contend for, as whom, and the timing (seconds) of the contest.

    Validated on construction so a misconfiguration fails at start-up instead of producing two
    leaders: the leader must give up (renew deadline) before others may take over (lease
    duration), and must get more than one jittered retry in before giving up.
    """

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    watch_lease: bool = True
    """While waiting to acquire, also watch the Lease (see the module docstring); False gives
    client-go's polling alone."""

    def __post_init__(self) -> None:
        for field_name in ("namespace", "name", "identity"):
            if not getattr(self, field_name):
                raise ValueError(f"leader election {field_name} must not be empty")
        for field_name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, field_name)
            if not value > 0:
                raise ValueError(f"leader election {field_name} must be greater than zero: {value}")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"lease_duration ({self.lease_duration}) must be greater than renew_deadline "
                f"({self.renew_deadline})"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew_deadline ({self.renew_deadline}) must be greater than "
                f"retry_period * {JITTER_FACTOR} ({JITTER_FACTOR * self.retry_period})"
            )

    @property
    def lease_duration_seconds(self) -> int:
        """What goes into `spec.leaseDurationSeconds`, an integer.

        Rounded up, never down: other candidates wait what the record says, and waiting less than
        our renew deadline would let them start while we still act.
        """
        return max(1, math.ceil(self.lease_duration))
