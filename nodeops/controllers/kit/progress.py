"""How far a node got in a controller's flow, kept in an annotation on the node itself.

A flow that cordons, drains and then does something irreversible to the node's machine (delete
the server, power the VM off) must survive a crash at any line. So the step is written into an
annotation on the node *before* it is taken, in a merge patch guarded by the node's
resourceVersion; a restarted controller (or a new leader) reads the record back and carries on.
The record is the same for every such flow: the step, when the flow started (the drain's start,
for its report), when the current step started (for its timeout), and whether the flow cordoned
the node (only then does it uncordon it at the end).

A controller names its steps as a `StrEnum` and binds them in a subclass:

    class Progress(NodeProgress[Step]):
        __slots__ = ()
        steps = Step
        first = Step.DRAINING
        what = "a delete-node progress record"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import NODES

__all__ = ["NodeProgress", "ProgressError", "patch_node", "record_step"]

S = TypeVar("S", bound=StrEnum)
P = TypeVar("P", bound="NodeProgress[Any]")


class ProgressError(ValueError):
    """An annotation that is not a progress record (edited by hand, or truncated)."""


@dataclass(frozen=True, slots=True)
class NodeProgress(Generic[S]):
    steps: ClassVar[type[StrEnum]]
    """The flow's steps; a record naming any other step is refused."""
    first: ClassVar[StrEnum]
    """The step `begin` records."""
    what: ClassVar[str]
    """What a record is called in the error for one that is not (\"a ... record\")."""

    step: S
    started: datetime
    """When the flow began (the drain's start, for its report)."""
    since: datetime
    """When the current step began (for its timeout)."""
    cordoned: bool = False
    """Whether this flow cordoned the node; only then is it uncordoned when the flow ends."""

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "step": self.step.value,
                "started": o.format_time(self.started),
                "since": o.format_time(self.since),
                "cordoned": self.cordoned,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, text: str) -> Self:
        try:
            raw: Any = json.loads(text)
            step = cast(S, cls.steps(raw["step"]))
            started = o.parse_time(raw["started"])
            since = o.parse_time(raw.get("since") or raw["started"])
            cordoned = raw.get("cordoned", False)
        except (ValueError, TypeError, KeyError) as exc:
            raise ProgressError(f"not {cls.what}: {text[:200]!r}") from exc
        if started is None or since is None or not isinstance(cordoned, bool):
            raise ProgressError(f"not {cls.what}: {text[:200]!r}")
        return cls(step, started, since, cordoned)

    @classmethod
    def of_node(cls, node: dict[str, Any], annotation: str) -> Self | None:
        """The node's record, None without one; raises `ProgressError` for garbage."""
        text = o.annotations_of(node).get(annotation)
        return None if text is None else cls.from_annotation(text)

    @classmethod
    def begin(cls, now: datetime, *, cordoned: bool) -> Self:
        return cls(cast(S, cls.first), now, now, cordoned)

    def to(self, step: S, now: datetime) -> Self:
        return replace(self, step=step, since=now)


async def patch_node(client: Client, node: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A merge patch guarded by the node's resourceVersion (409 when it changed since): a flow
    decides from what it read, so it must not write over a node that changed in between."""
    return await client.patch(
        NODES,
        o.name(node),
        body,
        patch_type="merge",
        resource_version=o.meta(node).get("resourceVersion"),
    )


async def record_step(
    client: Client,
    node: dict[str, Any],
    annotation: str,
    progress: P,
    step: StrEnum,
    now: datetime,
) -> tuple[dict[str, Any], P]:
    """Write the next step before it is taken; the node as written and the new record."""
    advanced = progress.to(step, now)
    body = {"metadata": {"annotations": {annotation: advanced.to_annotation()}}}
    return await patch_node(client, node, body), advanced
