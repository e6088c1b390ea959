"""What a drain reports: the progress of a pass, and the result of a drain run to completion.

Controllers write a pass's progress into a condition and `nodeops drain` prints it; both read
these types without needing the engine that made them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nodeops.drain.plan import Plan

__all__ = ["DrainProgress", "DrainResult", "ProgressCallback"]


@dataclass
class DrainProgress:
    node: str
    message: str
    complete: bool
    plan: Plan
    failures: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)  # still attached (with wait_for_volumes)
    held_by: frozenset[tuple[str, str]] = frozenset()
    """The budgets that held back pods of this pass, (namespace, name); the name is "" for a pod
    under several budgets, which the server judges on its own. Its next pass can only do more
    once one of these changes (or a pod of the node does)."""

    @property
    def blocking(self) -> dict[str, str]:
        """Pods holding the drain back, with the reason for each."""
        out = {d.ref: "terminating" for d in self.plan.terminating}
        for d in self.plan.evict_now:
            out[d.ref] = self.failures.get(d.ref, "eviction in progress")
        for d in self.plan.wait_completed_now:
            out[d.ref] = "waiting for completion"
        return out


@dataclass
class DrainResult:
    node: str
    evicted: list[str]
    deleted: list[str]
    skipped: list[str]
    warnings: list[str]
    seconds: float


ProgressCallback = Callable[[DrainProgress], None]
