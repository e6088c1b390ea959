"""The rehearsal's findings: one JSON document, or a few tables a person reads on a terminal.

Failures come first in both: a request that would fail, a budget stalled past the drain
deadline, pods left with nowhere to run. Each is one sentence that says what and where, and
their presence is the command's exit status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

__all__ = [
    "Batch",
    "Blocked",
    "Dip",
    "Held",
    "Pending",
    "Preempted",
    "Report",
    "RequestOutcome",
    "Stopped",
]


@dataclass
class Batch:
    index: int
    nodes: list[str]
    start_seconds: float
    """Seconds after the roll began that its first node's replacement started."""
    end_seconds: float | None
    failed: list[str] = field(default_factory=list)


@dataclass
class Blocked:
    budget: str
    blocked_seconds: float
    longest_seconds: float
    stalls: int


@dataclass
class Held:
    """A request whose next batch the capacity check held: the batch's pods did not fit on
    the nodes that stay (resources, selectors, taints, inter-pod rules)."""

    request: str
    nodegroup: str
    held_seconds: float
    longest_seconds: float
    holds: int
    reason: str
    """What the check said last: the first pod that did not fit, and why."""


@dataclass
class Dip:
    workload: str
    desired: int
    lowest_ready_share: float


@dataclass
class Pending:
    pod: str
    reason: str
    already_pending: bool
    spare: bool = False
    """Of a negative priority: a placeholder the roll may leave waiting (`SPARE_BELOW`), not
    a failure."""


@dataclass
class RequestOutcome:
    name: str
    nodegroup: str
    phase: str
    message: str
    seconds: float | None


@dataclass
class Preempted:
    """Pods of a workload the scheduler preempted to place the roll's: they wait for room in
    turn, and a cluster autoscaler may add nodes for them."""

    workload: str
    pods: int


@dataclass
class Stopped:
    """A rehearsal cut short (interrupted, or at its time limit): what the report covers.

    Everything else in the report is the roll up to that instant. What the rest of the roll
    would meet is not known, so a report without failures is no verdict."""

    why: str
    nodes_replaced: int
    nodes_selected: int
    simulated_seconds: float


@dataclass
class Report:
    predicted_seconds: float | None
    requests: list[RequestOutcome]
    batches: list[Batch]
    budgets: list[Blocked]
    capacity: list[Held]
    workloads: list[Dip]
    pending: list[Pending]
    api_calls: dict[str, int]
    cloud_calls: dict[str, int]
    failures: list[str]
    inputs: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    """What the reader should know about the inputs the prediction stands on."""
    stopped: Stopped | None = None
    preempted: list[Preempted] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = not self.failed and self.stopped is None
        return out

    def write_table(self, out: TextIO) -> None:
        w = out.write
        if self.stopped is not None:
            s = self.stopped
            w(
                f"Rehearsal stopped ({s.why}) after {duration(s.simulated_seconds)} of the roll, "
                f"{s.nodes_replaced} of {s.nodes_selected or '?'} nodes replaced: "
                f"what follows is the roll so far; the rest was not rehearsed\n"
            )
        total = duration(self.predicted_seconds)
        if self.predicted_seconds is None and self.stopped is not None:
            total = f"more than {duration(self.stopped.simulated_seconds)}"
        w(f"Predicted duration: {total}\n")
        for failure in self.failures:
            w(f"FAILURE: {failure}\n")
        for note in self.notes:
            w(f"NOTE: {note}\n")
        w("\nRequests\n")
        _table(
            out,
            ("NODEGROUP", "REQUEST", "PHASE", "DURATION", "MESSAGE"),
            [
                (r.nodegroup, r.name, r.phase or "-", duration(r.seconds), r.message[:60])
                for r in self.requests
            ],
        )
        w("\nBatches\n")
        _table(
            out,
            ("BATCH", "NODES", "START", "END", "FAILED"),
            [
                (
                    str(b.index),
                    str(len(b.nodes)),
                    duration(b.start_seconds),
                    duration(b.end_seconds),
                    ",".join(b.failed) or "-",
                )
                for b in self.batches
            ],
        )
        w("\nBudgets that refused evictions\n")
        if self.budgets:
            _table(
                out,
                ("PDB", "BLOCKED", "LONGEST", "STALLS"),
                [
                    (
                        b.budget,
                        duration(b.blocked_seconds),
                        duration(b.longest_seconds),
                        str(b.stalls),
                    )
                    for b in self.budgets
                ],
            )
        else:
            w("  none\n")
        w("\nBatches the capacity check held\n")
        if self.capacity:
            _table(
                out,
                ("NODEGROUP", "HELD", "LONGEST", "HOLDS", "REASON"),
                [
                    (
                        h.nodegroup,
                        duration(h.held_seconds),
                        duration(h.longest_seconds),
                        str(h.holds),
                        h.reason,
                    )
                    for h in self.capacity
                ],
            )
        else:
            w("  none\n")
        w("\nLowest share of Ready replicas\n")
        dips = [d for d in self.workloads if d.lowest_ready_share < 1.0]
        if dips:
            _table(
                out,
                ("WORKLOAD", "DESIRED", "LOWEST READY"),
                [(d.workload, str(d.desired), f"{100 * d.lowest_ready_share:.0f}%") for d in dips],
            )
        else:
            w("  every workload stayed fully Ready\n")
        w("\nPods the scheduler preempted for the roll's\n")
        if self.preempted:
            _table(
                out,
                ("WORKLOAD", "PODS"),
                [(p.workload, str(p.pods)) for p in self.preempted],
            )
        else:
            w("  none\n")
        w("\nPods left Pending\n")
        if self.pending:
            _table(
                out,
                ("POD", "BEFORE", "SPARE", "REASON"),
                [
                    (
                        p.pod,
                        "yes" if p.already_pending else "no",
                        "yes" if p.spare else "no",
                        p.reason,
                    )
                    for p in self.pending
                ],
            )
        else:
            w("  none\n")
        w("\nCalls the roll would make\n")
        _table(
            out,
            ("CALL", "COUNT"),
            [(k, str(v)) for k, v in sorted(self.api_calls.items())]
            + [(k, str(v)) for k, v in sorted(self.cloud_calls.items())],
        )


def duration(seconds: float | None) -> str:
    """`1h02m05s`, `4m05s` or `12s`; `-` for what is not known."""
    if seconds is None:
        return "-"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def _table(out: TextIO, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        line = "   ".join(str(c).ljust(widths[i]) for i, c in enumerate(row))
        out.write(f"  {line.rstrip()}\n")
