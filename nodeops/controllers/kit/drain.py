"""Draining a node from a reconciler: the "node is going away" preset, the Drainers of a
manager, and one pass that answers done, wait or failed.

Every controller that drains takes one non-blocking pass per reconcile and requeues, and each
had its own idea of which drain errors are the node's problem. They are mapped here, once:

- the pass finished the drain -> done; the node no longer exists -> done (`gone`): nothing is
  left on it to drain;
- pods still going -> wait;
- `SourcesNotReady` -> wait: the informers the pass reads are still filling, which resolves by
  itself and says nothing about the node (failing the node, or a Warning event, would report a
  problem nobody can fix);
- `InvalidRule` -> wait: a NodeDrainRule needs a human; the drain must not guess an order in the
  meantime, and failing the node would punish it for a cluster-wide typo (the error is kept, so
  the controller can show it on the object);
- any other `DrainError` (kubectl's pre-flight refusal, the drain's timeout, an eviction refused
  for good) -> failed: retrying the same pass cannot fix it; the controller decides what failure
  means for it (a failed CycleNodeStatus, a Warning and a later retry, a failed plugin).

Other API errors are not mapped: they propagate and the controller retries them with backoff.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from nodeops.controllers.kit.clock import Clock, clock_of
from nodeops.drain.engine import Drainer, DrainProgress
from nodeops.drain.errors import DrainError
from nodeops.drain.metrics import DRAINS
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import DrainSources, InvalidRule, SharedInformers, SourcesNotReady
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder
from nodeops.kube.manager import Manager

__all__ = ["GOING_AWAY", "DrainOutcome", "Drainers", "drain_pass", "going_away"]

GOING_AWAY = DrainOptions(ignore_daemonsets=True, delete_emptydir_data=True, force=True)
"""The drain of a node that goes away with its machine: every pod but mirror and DaemonSet pods
goes, bare pods and emptyDir data included (the disks go too); budgets still hold."""


def going_away(**changes: Any) -> DrainOptions:
    """`GOING_AWAY` with `changes` (fields of `DrainOptions`), e.g. `disable_eviction=True`."""
    return dataclasses.replace(GOING_AWAY, **changes) if changes else GOING_AWAY


class Drainers:
    """The Drainers of one controller: one per set of options, kept across passes (a Drainer
    remembers when each node's volume wait began), all reading the cluster through the same
    sources and labelled with the controller's name in the drain metrics.

    `sources` is asked for on the first drain only, so a controller that never drains watches
    no pods for it; `clock` too, so it is the clock the manager chose by then.
    """

    def __init__(
        self,
        client: Client,
        *,
        controller: str,
        events: EventRecorder | None = None,
        sources: Callable[[], DrainSources] | None = None,
        clock: Callable[[], Clock] | None = None,
    ) -> None:
        self.client = client
        self.controller = controller
        self.events = events
        self._sources = sources
        self._clock = clock
        self._made: dict[DrainOptions, Drainer] = {}

    @classmethod
    def for_manager(cls, manager: Manager, controller: str) -> Drainers:
        """Drainers on the manager's client, events, clock and shared drain sources (whose
        budget tokens every drain in the process shares)."""
        return cls(
            manager.client,
            controller=controller,
            events=manager.events,
            sources=lambda: SharedInformers.for_manager(manager),
            clock=lambda: clock_of(manager),
        )

    def get(self, options: DrainOptions) -> Drainer:
        found = self._made.get(options)
        if found is None:
            sources = self._sources() if self._sources is not None else None
            found = self._made[options] = Drainer(
                self.client,
                options,
                sources=sources,
                events=self.events,
                controller=self.controller,
                clock=self._clock() if self._clock is not None else None,
            )
        return found

    def nodes_held_by(self, namespace: str, name: str) -> set[str]:
        """The nodes whose last pass, with any of these Drainers, waited on the budget
        `namespace/name` (see `Drainer.nodes_held_by`)."""
        held: set[str] = set()
        for drainer in self._made.values():
            held |= drainer.nodes_held_by(namespace, name)
        return held

    def stopped(self, node: str) -> None:
        """The controller gave up draining `node` before it completed (its request was
        withdrawn): the drain is no longer reported as in progress."""
        for drainer in self._made.values():
            drainer.stopped(node)
        DRAINS.finished(self.controller, node)


@dataclass(frozen=True)
class DrainOutcome:
    """What one drain pass came to; see the module docstring for the mapping."""

    state: Literal["done", "wait", "failed"]
    message: str
    progress: DrainProgress | None = None
    error: Exception | None = None
    gone: bool = False

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def waiting(self) -> bool:
        return self.state == "wait"

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @property
    def blocked(self) -> bool:
        """Waiting on something a human must fix (a NodeDrainRule): worth a Warning."""
        return isinstance(self.error, InvalidRule)

    @property
    def reason(self) -> str:
        """A CamelCase word for a condition or an Event."""
        if self.error is not None:
            return type(self.error).__name__
        if self.gone:
            return "NodeGone"
        return "Drained" if self.done else "Draining"


async def drain_pass(drainer: Drainer, node: str, started: datetime) -> DrainOutcome:
    """One non-blocking pass of `drainer` over `node`, the drain having begun at `started`."""
    try:
        progress = await drainer.step(node, started)
    except errors.NotFound:
        return DrainOutcome("done", f"node {node} is gone", gone=True)
    except (SourcesNotReady, InvalidRule) as exc:
        return DrainOutcome("wait", str(exc), error=exc)
    except DrainError as exc:
        return DrainOutcome("failed", str(exc), error=exc)
    if progress.complete:
        return DrainOutcome("done", progress.message, progress)
    return DrainOutcome("wait", progress.message, progress)
