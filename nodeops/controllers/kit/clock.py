"""The one clock of a manager: every controller it runs measures time the same way.

In a cluster this is the wall clock. A simulated cluster runs its clock faster than wall time
(a 20-minute scale-up limit passes in a minute), and a controller must agree with it about how
long a node took to boot or a drain has run: `now()` is the cluster's time, and `wall()` turns a
wait in that time into the wall seconds a requeue needs. Two controllers of one process that
disagreed about the time would disagree about every timeout they share (a drain started by one
and judged by the other), so the clock is the manager's, not each controller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from nodeops.kube.clock import Clock
from nodeops.kube.manager import Manager

__all__ = ["Clock", "clock_at", "clock_of", "use_clock"]

_KEY = "nodeops.controllers.kit.clock"


@dataclass
class _Chosen:
    """The manager's clock, and whether it was chosen (`use_clock`) or is the default."""

    clock: Clock = field(default_factory=Clock)
    chosen: bool = False


def clock_of(manager: Manager) -> Clock:
    """The manager's clock: the one given to `use_clock`, else the wall clock."""
    return manager.shared(_KEY, _Chosen).clock


def use_clock(manager: Manager, clock: Clock) -> Clock:
    """Make `clock` the manager's clock; call it before installing the controllers that read it.

    Returns the manager's clock: `clock`, or the one chosen before at the same speed. A clock of
    another speed chosen before is refused: two controllers asking for different speeds is a
    configuration error, not a choice to make silently.
    """
    found = manager.shared(_KEY, _Chosen)
    if not found.chosen:
        found.clock, found.chosen = clock, True
    elif found.clock.scale != clock.scale:
        raise ValueError(
            f"the manager's clock runs at {found.clock.scale:g} cluster seconds per second, "
            f"not {clock.scale:g}: one process has one clock"
        )
    return found.clock


def clock_at(manager: Manager, scale: float, origin: datetime | None = None) -> Clock:
    """The manager's clock for a controller whose settings give a speed: 1.0 (the default) is no
    opinion and takes the manager's clock as it is; any other speed chooses it (`use_clock`)."""
    if scale == 1.0:
        return clock_of(manager)
    return use_clock(manager, Clock.scaled(scale, origin))
