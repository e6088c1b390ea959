"""Why a drain stopped: refused before it began, failed on the way, or ran out of time."""

from __future__ import annotations

from nodeops.kube.controller import ReconcileError


class DrainError(ReconcileError):
    """The drain cannot go on. `reasons` lists each problem, as kubectl prints them.

    A `ReconcileError`: a reconciler that lets one escape is retried with backoff and counted
    as an error, not as a panic (a drain refused or blocked is the cluster's state, not a bug).
    """

    def __init__(self, *reasons: str) -> None:
        self.reasons = [r for r in reasons if r]
        super().__init__(", ".join(self.reasons))


class PreflightError(DrainError):
    """kubectl's all-or-nothing pre-flight refused some pods: nothing was evicted."""


class DrainTimeout(DrainError):
    pass


class VolumeDetachTimeout(DrainTimeout):
    pass
