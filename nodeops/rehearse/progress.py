"""What a running rehearsal is doing, for the person waiting on it.

A rehearsal of a few hundred nodes takes minutes of this machine's time and a thousand nodes
tens of minutes: every pod the roll moves is moved in the copy, call by call. Silent for that
long, it cannot be told from a hang. So it says which step it is in (reading the cluster,
loading the copy, letting it settle, rolling), and while it rolls, the nodes replaced so far,
the simulated time reached, the wall time spent and, from the pace so far, about how much is
left. On a terminal that is one line redrawn in place; elsewhere (a pipe, a CI log) a line per
step and one per tenth of the nodes, so a log stays short. Everything goes to stderr: stdout
is the report's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

from nodeops.rehearse.report import duration as _exact

__all__ = ["ProgressLine", "RollPace", "duration"]


def duration(seconds: float) -> str:
    """As the report writes a duration; a wait estimated below zero is none."""
    return _exact(max(0.0, seconds))


class RollPace:
    """The roll's line: nodes replaced of those selected, and the wall time left at this pace.

    `clock` is the wall clock (the copy's own clock skips its waits, so it says nothing about
    how long the person waits)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()

    def line(self, ended: int, selected: int, simulated: float, failed: int = 0) -> str:
        spent = self.clock() - self.started
        text = f"rolling the copy: {ended} of {selected or '?'} nodes replaced"
        if failed:
            text += f" ({failed} failed)"
        text += f", {duration(simulated)} simulated, {duration(spent)} so far"
        if 0 < ended < selected:
            text += f", about {duration(spent * (selected - ended) / ended)} left"
        return text


class ProgressLine:
    """Writes progress to `stream`: redrawn in place on a terminal, as log lines elsewhere.

    `step` lines are always written; `roll` lines on a terminal at most every `redraw`
    seconds, elsewhere only when another tenth of the nodes has been replaced."""

    def __init__(
        self,
        stream: TextIO,
        *,
        terminal: bool | None = None,
        redraw: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.terminal = stream.isatty() if terminal is None else terminal
        self.redraw = redraw
        self.clock = clock
        self._drawn_at = float("-inf")
        self._drawn_ended = -1
        self._open = False
        self._keep = False
        """Whether the open line stays on screen when the next is written (the roll's last
        count does; a note of what is being read is drawn over)."""
        self._logged_tenth = -1
        self._lock = threading.RLock()
        """The copy's thread draws the roll while the caller's may write a step (Ctrl-C)."""

    def step(self, text: str) -> None:
        with self._lock:
            self._write(text, final=True)

    def meanwhile(self, text: str) -> None:
        """What is being done before the input is known to be good (reading the cluster): on a
        terminal only, and cleared by `close(clear=True)`, so that bad input stays one line."""
        if self.terminal:
            with self._lock:
                self._write(text, final=False)
                self._keep = False

    def roll(self, text: str, ended: int, selected: int) -> None:
        with self._lock:
            self._roll(text, ended, selected)

    def _roll(self, text: str, ended: int, selected: int) -> None:
        if self.terminal:
            now = self.clock()
            last = bool(selected) and ended >= selected and ended != self._drawn_ended
            if now - self._drawn_at >= self.redraw or last:
                self._drawn_at, self._drawn_ended = now, ended
                self._write(text, final=False)
                self._keep = True
            return
        tenth = ended * 10 // selected if selected else 0
        if tenth > self._logged_tenth:
            self._logged_tenth = tenth
            self._write(text, final=True)

    def close(self, *, clear: bool = False) -> None:
        """Ends the line being redrawn: kept (`clear` False) or wiped, for a message instead."""
        with self._lock:
            if self._open:
                self.stream.write("\r\x1b[K" if clear else "\n")
                self.stream.flush()
                self._open = False

    def _write(self, text: str, *, final: bool) -> None:
        if self.terminal:
            if final and self._open and self._keep:
                self.stream.write("\n")
            # Back to the line's start and clear it: the line is redrawn, not appended.
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
            self._open = not final
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
