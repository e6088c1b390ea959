"""When a notification is due: periodic, scheduled (weekly clock time) and oneshot."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from nodeops.controllers.maintenance.plugins.base import PluginConfig, PluginType, ScheduleContext
from nodeops.controllers.maintenance.plugins.fields import Clock, Duration, Weekdays
from nodeops.controllers.maintenance.state import State


class PeriodicConfig(PluginConfig):
    interval: Duration = 3600.0


class Periodic:
    """On entering a state, then every `interval` while the node is not operational."""

    def __init__(self, config: PeriodicConfig) -> None:
        self.config = config

    def due(self, ctx: ScheduleContext) -> bool:
        if ctx.state_changed:
            return True
        if ctx.state == State.OPERATIONAL.value:
            return False
        if ctx.last_sent is None:
            return True
        return (ctx.now - ctx.last_sent).total_seconds() >= self.config.interval


class ScheduledConfig(PluginConfig):
    instant: Clock
    weekdays: Weekdays = Field(min_length=1)


class Scheduled:
    """Once a day on the given weekdays, at or after `instant` (UTC), whatever the state."""

    def __init__(self, config: ScheduledConfig) -> None:
        self.config = config

    def due(self, ctx: ScheduleContext) -> bool:
        now = ctx.now
        if now.weekday() not in self.config.weekdays:
            return False
        if now.time().replace(tzinfo=None) < self.config.instant:
            return False
        # The whole date, not the day of the month: Jan 5 and Feb 5 are different days.
        return ctx.last_sent is None or ctx.last_sent.date() != now.date()


class OneshotConfig(PluginConfig):
    delay: Duration = 60.0


class Oneshot:
    """Once per state entry, `delay` after the transition."""

    def __init__(self, config: OneshotConfig) -> None:
        self.config = config

    def due(self, ctx: ScheduleContext) -> bool:
        if ctx.now - ctx.transition < timedelta(seconds=self.config.delay):
            return False
        return ctx.last_sent is None or ctx.last_sent < ctx.transition


TYPES = [
    PluginType("schedule", "periodic", PeriodicConfig, Periodic, "on change, then every interval"),
    PluginType("schedule", "scheduled", ScheduledConfig, Scheduled, "daily at a time"),
    PluginType("schedule", "oneshot", OneshotConfig, Oneshot, "once per state, after a delay"),
]
