"""Triggers that change the node in memory; the controller commits them with the state."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from nodeops.controllers.kit import drain_pass, going_away
from nodeops.controllers.maintenance.plugins.base import (
    PluginConfig,
    PluginContext,
    PluginError,
    PluginType,
    Retry,
)
from nodeops.controllers.maintenance.plugins.fields import Duration, Text
from nodeops.kube import errors


class AlterConfig(PluginConfig):
    key: Text = Field(min_length=1)
    value: Text = ""
    remove: bool = False


class AlterAnnotation:
    def __init__(self, config: AlterConfig) -> None:
        self.config = config

    async def trigger(self, ctx: PluginContext) -> None:
        annotations = ctx.annotations()
        if self.config.remove:
            annotations.pop(self.config.key, None)
        else:
            annotations[self.config.key] = self.config.value


class AlterLabel:
    def __init__(self, config: AlterConfig) -> None:
        self.config = config

    async def trigger(self, ctx: PluginContext) -> None:
        labels = ctx.labels()
        if self.config.remove:
            labels.pop(self.config.key, None)
        else:
            labels[self.config.key] = self.config.value


class FinalizerConfig(PluginConfig):
    key: Text = Field(min_length=1)
    remove: bool = False


class AlterFinalizer:
    def __init__(self, config: FinalizerConfig) -> None:
        self.config = config

    async def trigger(self, ctx: PluginContext) -> None:
        meta = ctx.node.setdefault("metadata", {})
        finalizers = list(meta.get("finalizers") or [])
        if self.config.remove:
            finalizers = [f for f in finalizers if f != self.config.key]
        elif self.config.key not in finalizers:
            finalizers.append(self.config.key)
        meta["finalizers"] = finalizers


class EvictionConfig(PluginConfig):
    action: str
    forceEviction: bool = False
    # The reference's drain timeouts (documented, no longer read there either): accepted.
    deletionTimeout: Duration = 600.0
    evictionTimeout: Duration = 600.0

    @model_validator(mode="after")
    def _action(self) -> EvictionConfig:
        if self.action not in ("cordon", "uncordon", "drain"):
            raise ValueError(f"action must be cordon, uncordon or drain, not {self.action!r}")
        return self


class Eviction:
    """cordon / uncordon / drain. Drain is non-blocking: one pass of the drain engine per
    reconcile, `Retry` until the node is empty. The cordon is committed by the controller's own
    write first, so the engine never writes the node itself. A node in maintenance is drained as
    one that goes away (its pods come back elsewhere, whatever they are)."""

    def __init__(self, config: EvictionConfig) -> None:
        self.config = config
        self.options = going_away(force_delete_stuck=config.forceEviction)

    async def trigger(self, ctx: PluginContext) -> None:
        spec = ctx.node.setdefault("spec", {})
        if self.config.action == "uncordon":
            spec.pop("unschedulable", None)
            return
        spec["unschedulable"] = True
        if self.config.action == "cordon":
            return
        if not (ctx.original.get("spec") or {}).get("unschedulable"):
            raise Retry("cordoning before the drain")
        drainer = ctx.cluster.drainer(self.options)
        try:
            outcome = await drain_pass(drainer, ctx.node_name, ctx.transition)
        except errors.KubeError as exc:
            raise Retry(f"drain: {exc}") from exc
        if outcome.failed:
            raise PluginError(f"drain: {outcome.message}")
        if outcome.gone or outcome.error is not None:
            raise Retry(f"drain: {outcome.message}")  # caches filling, a rule to fix, no node
        if not outcome.done:
            raise Retry(f"drain in progress: {outcome.message}")


TYPES: list[Any] = [
    PluginType("trigger", "alterAnnotation", AlterConfig, AlterAnnotation, "set/remove annotation"),
    PluginType("trigger", "alterLabel", AlterConfig, AlterLabel, "set/remove label"),
    PluginType(
        "trigger", "alterFinalizer", FinalizerConfig, AlterFinalizer, "set/remove finalizer"
    ),
    PluginType(
        "trigger",
        "eviction",
        EvictionConfig,
        Eviction,
        "cordon, uncordon or drain",
    ),
]
