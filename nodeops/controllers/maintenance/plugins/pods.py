"""Checks over the pods on the node: affinity ordering and do-not-disrupt style blocking."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from nodeops.common.selectors import LabelSelector, SelectorError, parse_label_selector
from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginType,
)
from nodeops.controllers.maintenance.state import DataError, NodeData, State

Obj = dict[str, Any]


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def prefers_operational(pod: Obj, state_key: str) -> bool:
    """The pod prefers nodes in the operational state (the convention affinity relies on)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ():
        for expr in (term.get("preference") or {}).get("matchExpressions") or ():
            if (
                expr.get("key") == state_key
                and expr.get("operator") == "In"
                and list(expr.get("values") or ()) == [State.OPERATIONAL.value]
            ):
                return True
    return False


class AffinityConfig(PluginConfig):
    minOperational: int = Field(0, ge=0)


def _profile_state(node: Obj, keys: Any, profile: str) -> State | None:
    try:
        data = NodeData.parse((_meta(node).get("annotations") or {}).get(keys.data))
    except DataError:
        return None
    entry = data.profiles.get(profile)
    return entry.current if entry else None


class Affinity:
    """Send nodes without operational-preferring pods first, so those pods land on nodes that
    are not about to be drained. Only meaningful in maintenance-required."""

    def __init__(self, config: AffinityConfig) -> None:
        self.config = config

    async def _has_critical(self, ctx: PluginContext, node_name: str) -> bool:
        pods = await ctx.cluster.pods_on_node(node_name)
        return any(_active(p) and prefers_operational(p, ctx.keys.state) for p in pods)

    async def check(self, ctx: PluginContext) -> CheckResult:
        peers = []
        operational = 0
        for node in ctx.cluster.nodes():
            name = _meta(node).get("name")
            if name == ctx.node_name:
                continue
            profiles = str((_meta(node).get("labels") or {}).get(ctx.keys.profile, "")).split("--")
            if ctx.profile not in profiles:
                continue
            state = _profile_state(node, ctx.keys, ctx.profile)
            if state in (None, State.OPERATIONAL):
                operational += 1
            elif state == State.REQUIRED:
                peers.append(str(name))
        if self.config.minOperational and operational >= self.config.minOperational:
            return CheckResult.ok(operational=operational)
        if not await self._has_critical(ctx, ctx.node_name):
            return CheckResult.ok(reason="no pods prefer operational nodes")
        for peer in peers:
            if not await self._has_critical(ctx, peer):
                return CheckResult.blocked(
                    f"node {peer} has no pods preferring operational nodes and goes first",
                    operational=operational,
                )
        return CheckResult.ok(reason="every waiting node has such pods")


class PodsOnNodeConfig(PluginConfig):
    selector: str = ""
    annotations: dict[str, str] = Field(default_factory=dict)
    namespaces: list[str] = Field(default_factory=list)
    max: int = Field(0, ge=0)

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        try:
            parse_label_selector(value)
        except SelectorError as exc:
            raise ValueError(f"selector: {exc}") from None
        return value

    @field_validator("annotations", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                str(k): ("true" if v is True else "false" if v is False else str(v))
                for k, v in value.items()
            }
        return value


class PodsOnNode:
    """At most `max` running pods on the node match (selector, annotations, namespaces).

    With `annotations: {karpenter.sh/do-not-disrupt: "true"}` it is Karpenter's do-not-disrupt;
    with a selector it is kured's `--blocking-pod-selector`.
    """

    def __init__(self, config: PodsOnNodeConfig) -> None:
        self.config = config
        self.selector: LabelSelector | None = (
            parse_label_selector(config.selector) if config.selector else None
        )

    def matches(self, pod: Obj) -> bool:
        meta = _meta(pod)
        if self.config.namespaces and meta.get("namespace") not in self.config.namespaces:
            return False
        if self.selector is not None and not self.selector.matches(meta.get("labels") or {}):
            return False
        annotations = meta.get("annotations") or {}
        return all(annotations.get(k) == v for k, v in self.config.annotations.items())

    async def check(self, ctx: PluginContext) -> CheckResult:
        pods = await ctx.cluster.pods_on_node(ctx.node_name)
        found = sorted(
            f"{_meta(p).get('namespace')}/{_meta(p).get('name')}"
            for p in pods
            if _active(p) and self.matches(p)
        )
        info = {"matching": len(found), "max": self.config.max, "pods": found[:10]}
        if len(found) > self.config.max:
            return CheckResult.blocked(
                f"{len(found)} matching pods on the node: {', '.join(found[:5])}", **info
            )
        return CheckResult.ok(**info)


TYPES = [
    PluginType(
        "check",
        "affinity",
        AffinityConfig,
        Affinity,
        "pods preferring operational nodes go last",
        states=frozenset({State.REQUIRED.value}),
        needs=frozenset({"pods"}),
    ),
    PluginType(
        "check",
        "podsOnNode",
        PodsOnNodeConfig,
        PodsOnNode,
        "no (or few) matching pods on the node",
        needs=frozenset({"pods"}),
    ),
]
