"""Live progress of a roll: a bar per node group, the phase, pods moved and requests failed.

Drawn with rich on a terminal; elsewhere (a pipe, CI) one line per change of phase or progress,
so a log of the run reads like the run.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

__all__ = ["RollState", "RollView", "roll_state"]


@dataclass
class RollState:
    """What the view shows, computed from a request, its children and the record."""

    phase: str = "Pending"
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Node group -> (nodes replaced, nodes selected)."""
    in_progress: int = 0
    pods_moved: int = 0
    requests_sent: int | None = None
    """API requests the simulated cluster served (None: not a simulation, not shown)."""
    requests_failed: int = 0
    message: str = ""
    simulated_seconds: float | None = None
    """Simulated time since the start (None: not a simulation, not shown)."""

    def line(self) -> str:
        groups = " ".join(f"{g} {d}/{t}" for g, (d, t) in self.groups.items())
        clock = "" if self.simulated_seconds is None else f"[{self.simulated_seconds:7.0f}s] "
        text = (
            f"{clock}{self.phase:<18} {groups}  in progress "
            f"{self.in_progress}  pods moved {self.pods_moved}"
        )
        if self.requests_sent is not None:
            text += f"  requests failed {self.requests_failed} of {self.requests_sent}"
        if self.message:
            text += "\n" + " " * len(clock) + self.message
        return text


def _first_reason(message: str) -> str:
    """The first thing a message says is in the way: a drain's message is a header ("Drain not
    completed yet ...:") and a bullet per pod; the first bullet says it."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    bullets = [line[2:] for line in lines if line.startswith("* ")]
    return (bullets or lines or [""])[0]


def _waiting_for(status: Mapping[str, Any], children: Sequence[Mapping[str, Any]]) -> str:
    """Why the roll is not further along, in one line: what blocks the request, or else what
    the first node being replaced waits for."""
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Blocked" and cond.get("status") == "True" and cond.get("message"):
            return _first_reason(str(cond["message"]))
    if status.get("message"):
        return _first_reason(str(status["message"]))
    for child in sorted(children, key=lambda c: str((c.get("spec") or {}).get("nodeName"))):
        child_status = child.get("status") or {}
        if child_status.get("phase") in ("Successful", "Failed") or not child_status.get("message"):
            continue
        node = (child.get("spec") or {}).get("nodeName")
        return f"{node} ({child_status.get('phase')}): {_first_reason(child_status['message'])}"
    return ""


def _shorten(message: str, width: int = 200) -> str:
    """At most `width` characters, cut between words and marked, never in the middle of one."""
    if len(message) <= width:
        return message
    limit = width - len(" ...")
    head = message[:limit]
    if message[limit] != " " and " " in head:
        head = head.rsplit(" ", 1)[0]  # names with hyphens stay whole too
    return head.rstrip() + " ..."


def roll_state(
    request: Mapping[str, Any] | None,
    children: Sequence[Mapping[str, Any]],
    *,
    pods_moved: int,
    requests_sent: int | None = None,
    requests_failed: int = 0,
    simulated_seconds: float | None = None,
) -> RollState:
    """The view of a roll; the simulation's counters (requests, simulated time) only where
    the roll runs on a simulated cluster that counts them."""
    status = (request or {}).get("status") or {}
    done: dict[str, int] = {}
    for c in children:
        if (c.get("status") or {}).get("phase") == "Successful":
            group = str((c.get("spec") or {}).get("nodeGroupName"))
            done[group] = done.get(group, 0) + 1
    groups = {
        str(group): (min(done.get(str(group), 0), int(total)), int(total))
        for group, total in (status.get("selectedByGroup") or {}).items()
    }
    return RollState(
        phase=status.get("phase") or "Pending",
        groups=dict(sorted(groups.items())),
        in_progress=int((status.get("progress") or {}).get("inProgress") or 0),
        pods_moved=pods_moved,
        requests_sent=requests_sent,
        requests_failed=requests_failed,
        message=_shorten(_waiting_for(status, children))
        if status.get("phase")
        not in (
            "Successful",
            "Failed",
        )
        else _shorten(str(status.get("message") or "")),
        simulated_seconds=simulated_seconds,
    )


class RollView:
    """Shows states as they come; `close()` leaves the last one on screen."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.console = Console(file=self.stream)
        self.live = self.console.is_terminal if live is None else live
        self._last_line = ""
        self._progress = Progress(
            TextColumn("{task.description:<12}"),
            BarColumn(bar_width=40),
            MofNCompleteColumn(),
            console=self.console,
        )
        self._tasks: dict[str, Any] = {}
        self._status = Text()
        self._live: Live | None = None
        if self.live:
            self._live = Live(
                Group(self._progress, self._status),
                console=self.console,
                refresh_per_second=8,
                transient=False,
            )
            self._live.start()

    def show(self, state: RollState) -> None:
        if self._live is None:
            line = state.line()
            key = repr((state.phase, state.groups, state.in_progress, state.pods_moved))
            if key != self._last_line:
                self._last_line = key
                print(line, file=self.stream, flush=True)
            return
        for group, (done, total) in state.groups.items():
            task = self._tasks.get(group)
            if task is None:
                task = self._tasks[group] = self._progress.add_task(group, total=total)
            self._progress.update(task, completed=done, total=total)
        text = (
            f"phase {state.phase}   in progress {state.in_progress}   pods moved {state.pods_moved}"
        )
        if state.requests_sent is not None:
            text += f"   requests failed {state.requests_failed} of {state.requests_sent}"
        if state.simulated_seconds is not None:
            text += f"   simulated {state.simulated_seconds:.0f}s"
        if state.message:
            text += f"\n{state.message}"
        self._status.plain = text

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
