"""Checks that read the node itself or the cluster's nodes from the controller's cache."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import semver
from pydantic import Field, model_validator

from nodeops.controllers.maintenance.durations import WEEKDAYS
from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginError,
    PluginType,
)
from nodeops.controllers.maintenance.plugins.fields import (
    Clock,
    Duration,
    MonthDays,
    Text,
    Weekdays,
)
from nodeops.controllers.maintenance.state import State

Obj = dict[str, Any]


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


# ---------------------------------------------------------------------- key/value checks


class KeyValueConfig(PluginConfig):
    key: Text = Field(min_length=1)
    value: Text = ""


def _match(mapping: dict[str, str], key: str, value: str) -> CheckResult:
    if key not in mapping:
        return CheckResult.blocked(f"{key} is not set", key=key)
    if value and mapping[key] != value:
        return CheckResult.blocked(
            f"{key} is {mapping[key]!r}, not {value!r}", key=key, current=mapping[key]
        )
    return CheckResult.ok(key=key, current=mapping[key])


class HasAnnotation:
    def __init__(self, config: KeyValueConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        return _match(_meta(ctx.node).get("annotations") or {}, self.config.key, self.config.value)


class HasLabel:
    def __init__(self, config: KeyValueConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        return _match(_meta(ctx.node).get("labels") or {}, self.config.key, self.config.value)


class AnyLabel:
    """Any node of the cluster carries the label (with the value, if given)."""

    def __init__(self, config: KeyValueConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        key, value = self.config.key, self.config.value
        for node in ctx.cluster.nodes():
            labels = _meta(node).get("labels") or {}
            if key in labels and (not value or labels[key] == value):
                return CheckResult.ok(node=_meta(node).get("name"))
        return CheckResult.blocked(f"no node has label {key}" + (f"={value}" if value else ""))


# ---------------------------------------------------------------------- condition


class ConditionConfig(PluginConfig):
    type: Text = Field(min_length=1)
    status: Text = Field(min_length=1)


class Condition:
    def __init__(self, config: ConditionConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        for cond in (ctx.node.get("status") or {}).get("conditions") or ():
            if cond.get("type") == self.config.type:
                current = str(cond.get("status", ""))
                info = {"current": current, "expected": self.config.status}
                if current == self.config.status:
                    return CheckResult.ok(**info)
                return CheckResult.blocked(
                    f"condition {self.config.type} is {current}, not {self.config.status}", **info
                )
        return CheckResult.blocked(
            f"node has no {self.config.type} condition", current="", expected=self.config.status
        )


# ---------------------------------------------------------------------- clusterSemver


class ClusterSemverConfig(PluginConfig):
    key: Text = Field(min_length=1)
    profileScoped: bool = False


def _version(text: str) -> semver.Version:
    return semver.Version.parse(text.strip().removeprefix("v"))


class ClusterSemver:
    """The node's version label is older than the newest one in the cluster (or its profile)."""

    def __init__(self, config: ClusterSemverConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        key = self.config.key
        own_text = (_meta(ctx.node).get("labels") or {}).get(key)
        if own_text is None:
            raise PluginError(f"node has no label {key}")
        try:
            own = _version(own_text)
        except ValueError:
            raise PluginError(f"label {key}={own_text!r} is not a semantic version") from None
        newest = own
        for node in ctx.cluster.nodes():
            labels = _meta(node).get("labels") or {}
            if key not in labels:
                continue
            if self.config.profileScoped:
                profiles = str(labels.get(ctx.keys.profile, "")).split("--")
                if ctx.profile not in profiles:
                    continue
            try:
                v = _version(labels[key])
            except ValueError:
                continue
            newest = max(newest, v)
        info = {"own": str(own), "newest": str(newest)}
        if own < newest:
            return CheckResult.ok(**info)
        return CheckResult.blocked(f"{own} is the newest version", **info)


# ---------------------------------------------------------------------- maxMaintenance


class MaxMaintenanceConfig(PluginConfig):
    max: int = Field(ge=0)
    profile: Text = ""
    groupBy: list[str] = Field(default_factory=list)
    groupLabel: Text = ""  # deprecated: appended to groupBy
    skipAfter: Duration = 0.0

    @model_validator(mode="after")
    def _group_label(self) -> MaxMaintenanceConfig:
        if self.groupLabel and self.groupLabel not in self.groupBy:
            object.__setattr__(self, "groupBy", [*self.groupBy, self.groupLabel])
        return self


class MaxMaintenance:
    """Fewer than `max` nodes (in scope) are in maintenance.

    Scope: nodes whose profile label contains `profile` (if set), with the same values as this
    node for each `groupBy` label, and (with `skipAfter`) whose last transition is recent
    enough, so nodes stuck in maintenance stop blocking the rest. Decisions are serial and read
    the controller's own earlier writes, so two nodes never both take the last slot.
    """

    def __init__(self, config: MaxMaintenanceConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        from nodeops.controllers.maintenance.state import DataError, NodeData

        own_labels = _meta(ctx.node).get("labels") or {}
        scope = {k: own_labels.get(k, "") for k in self.config.groupBy}
        count = 0
        for node in ctx.cluster.nodes_in_state(State.IN_MAINTENANCE.value):
            meta = _meta(node)
            if meta.get("name") == ctx.node_name:
                continue
            labels = meta.get("labels") or {}
            if self.config.profile:
                profiles = str(labels.get(ctx.keys.profile, "")).split("--")
                if self.config.profile not in profiles:
                    continue
            if any(labels.get(k, "") != v for k, v in scope.items()):
                continue
            if self.config.skipAfter > 0:
                try:
                    data = NodeData.parse((meta.get("annotations") or {}).get(ctx.keys.data))
                except DataError:
                    data = NodeData()
                recent = [
                    p.transition
                    for p in data.profiles.values()
                    if p.current == State.IN_MAINTENANCE
                ]
                if recent and all(
                    ctx.now - t > timedelta(seconds=self.config.skipAfter) for t in recent
                ):
                    continue
            count += 1
        info: dict[str, Any] = {"maintained": count, "max": self.config.max}
        if scope:
            info["scope"] = scope
        if count >= self.config.max:
            return CheckResult.blocked(
                f"{count} of at most {self.config.max} in maintenance", **info
            )
        return CheckResult.ok(**info)


# ---------------------------------------------------------------------- nodeCount


class NodeCountConfig(PluginConfig):
    count: int = Field(ge=0)


class NodeCount:
    def __init__(self, config: NodeCountConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        n = ctx.cluster.node_count()
        if n >= self.config.count:
            return CheckResult.ok(nodes=n, required=self.config.count)
        return CheckResult.blocked(
            f"{n} nodes, at least {self.config.count} required", nodes=n, required=self.config.count
        )


# ---------------------------------------------------------------------- time


class TimeWindowConfig(PluginConfig):
    start: Clock
    end: Clock
    weekdays: Weekdays
    exclude: MonthDays = Field(default_factory=list)

    @model_validator(mode="after")
    def _order(self) -> TimeWindowConfig:
        if self.start >= self.end:
            raise ValueError("start must be before end (windows do not wrap past midnight)")
        return self


class TimeWindow:
    """Now (UTC) is strictly inside start-end on one of the weekdays, not on an excluded date."""

    def __init__(self, config: TimeWindowConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        now = ctx.now
        c = self.config
        if (now.month, now.day) in c.exclude:
            return CheckResult.blocked(f"{now:%b} {now.day} is excluded")
        if now.weekday() not in c.weekdays:
            return CheckResult.blocked(f"{WEEKDAYS[now.weekday()]} is not a maintenance day")
        t = now.time().replace(tzinfo=None)
        if c.start < t < c.end:
            return CheckResult.ok()
        return CheckResult.blocked(f"{t:%H:%M} is outside {c.start:%H:%M}-{c.end:%H:%M} UTC")


class WaitConfig(PluginConfig):
    duration: Duration


class Wait:
    """The profile's last transition is longer ago than `duration`."""

    def __init__(self, config: WaitConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        remaining = self.config.duration - (ctx.now - ctx.transition).total_seconds()
        if remaining < 0:
            return CheckResult.ok()
        return CheckResult.blocked(
            f"{remaining:.0f}s to wait", remaining_seconds=round(remaining, 3)
        )


class WaitExcludeConfig(PluginConfig):
    duration: Duration
    exclude: Weekdays


def elapsed_excluding(start: datetime, end: datetime, excluded: set[int]) -> float:
    """Seconds from start to end, not counting time on excluded weekdays (UTC days)."""
    if end <= start:
        return 0.0
    total = 0.0
    cursor = start
    while cursor < end:
        day_end = (cursor + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        stop = min(day_end, end)
        if cursor.weekday() not in excluded:
            total += (stop - cursor).total_seconds()
        cursor = stop
    return total


class WaitExclude:
    def __init__(self, config: WaitExcludeConfig) -> None:
        self.config = config

    async def check(self, ctx: PluginContext) -> CheckResult:
        elapsed = elapsed_excluding(ctx.transition, ctx.now, set(self.config.exclude))
        remaining = self.config.duration - elapsed
        if remaining < 0:
            return CheckResult.ok()
        return CheckResult.blocked(
            f"{remaining:.0f}s to wait (excluded days do not count)",
            remaining_seconds=round(remaining, 3),
        )


TYPES = [
    PluginType("check", "hasAnnotation", KeyValueConfig, HasAnnotation, "node has an annotation"),
    PluginType("check", "hasLabel", KeyValueConfig, HasLabel, "node has a label"),
    PluginType("check", "anyLabel", KeyValueConfig, AnyLabel, "some node has a label"),
    PluginType("check", "condition", ConditionConfig, Condition, "node condition status"),
    PluginType("check", "clusterSemver", ClusterSemverConfig, ClusterSemver, "version behind"),
    PluginType("check", "maxMaintenance", MaxMaintenanceConfig, MaxMaintenance, "concurrency"),
    PluginType("check", "nodeCount", NodeCountConfig, NodeCount, "cluster size"),
    PluginType("check", "timeWindow", TimeWindowConfig, TimeWindow, "weekly UTC window"),
    PluginType("check", "wait", WaitConfig, Wait, "time since last transition"),
    PluginType("check", "waitExclude", WaitExcludeConfig, WaitExclude, "wait, skipping days"),
]
